"""Pytest setup: the repo and the CircuitPython stand-ins (host/cp) are importable, as on the host runtime."""

import os
import sys

ROOT = os.path.dirname(os.path.abspath(__file__))
CP = os.path.join(ROOT, "host", "cp")

# code.py at the repo root would shadow the stdlib module `code` (pdb imports it), so the repo goes
# behind the standard library on sys.path; `python -m pytest` and pytest's rootdir insertion put it first.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != ROOT]
sys.path.append(ROOT)
if CP not in sys.path:
    sys.path.insert(0, CP)
sys.modules.pop("code", None) if getattr(sys.modules.get("code"), "__file__", "").startswith(ROOT) else None
