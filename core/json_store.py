"""Atomic JSON documents on the flash: FAT has no atomic replace and no rename onto an existing file."""

import json
import os

from core.files import exists as _exists, remove_quiet as _remove


def _sync():
    """Push written data to the flash where the platform can (CircuitPython's os.sync)."""
    try:
        os.sync()
    except (AttributeError, OSError):
        pass


def _load_file(path):
    """The JSON document in path, or None when it is missing, unreadable or torn."""
    try:
        with open(path) as f:
            text = f.read()
    except (OSError, UnicodeError):
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None  # torn or zeroed by a power cut


def write_atomic(path, obj):
    """Store obj as JSON so that a power cut at any step leaves the old or the new document readable.

    Steps: write path.tmp completely; drop a stale path.bak; rename path -> path.bak; rename path.tmp -> path;
    remove path.bak. read_json_file() prefers path, then a complete path.tmp, then path.bak.
    """
    tmp = path + ".tmp"
    bak = path + ".bak"
    text = json.dumps(obj)
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
    _sync()
    _remove(bak)
    if _exists(path):
        os.rename(path, bak)
    os.rename(tmp, path)
    _sync()
    _remove(bak)


def read_json_file(path):
    """The stored document, recovered from an interrupted write_atomic if needed; None when there is none."""
    data = _load_file(path)
    if data is not None:
        return data
    for other in (path + ".tmp", path + ".bak"):
        data = _load_file(other)
        if data is not None:
            try:  # put it back in place, so the next write starts from a clean state
                _remove(path)
                os.rename(other, path)
            except OSError:
                pass
            return data
    return None
