"""Test package: end-to-end helpers and the real meter captures."""

import os

# Real meter telegrams kept in the project (bytes as published; sources in captures/INDEX.tsv).
CAPTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "captures")
