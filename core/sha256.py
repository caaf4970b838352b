"""SHA-256 the same way on CircuitPython, MicroPython and CPython."""

import binascii
import hashlib


def new_sha256():
    """A SHA-256 object: hashlib.new on CircuitPython, hashlib.sha256 in MicroPython (the test VM)."""
    new = getattr(hashlib, "new", None)
    return new("sha256") if new is not None else hashlib.sha256()  # type: ignore[attr-defined]


def hex_digest(h):
    """Lower-case hex of a hashlib object's digest (CircuitPython has no hexdigest())."""
    return binascii.hexlify(h.digest()).decode()
