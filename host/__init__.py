"""Host runtime: runs the unchanged firmware on desktop CPython with stand-ins for CircuitPython modules."""
