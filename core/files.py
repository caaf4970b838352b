"""Small file helpers for the flash drive (CircuitPython has no os.path)."""

import os


def exists(path):
    """True when path names a file or folder."""
    try:
        os.stat(path)
        return True
    except OSError:
        return False


def remove_quiet(path):
    """Remove path; an absent file is not an error."""
    try:
        os.remove(path)
    except OSError:
        pass
