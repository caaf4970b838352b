"""CPython stand-in for CircuitPython's micropython module."""


def const(value):
    """Compile-time constant on the device; identity here."""
    return value
