"""Pytest setup: the repo and the CircuitPython stand-ins (host/cp) are importable, as on the host runtime."""

import os
import sys

ROOT = os.path.dirname(os.path.abspath(__file__))
for p in (os.path.join(ROOT, "host", "cp"), ROOT):
    if p not in sys.path:
        sys.path.insert(0, p)
