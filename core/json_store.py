"""JSON documents on the flash that a power cut at any point leaves old or new (core/durable_file.py)."""

import json

from core.durable_file import MAX_CHARS, read_text, write_text


def write_atomic(path, obj, room=0):
    """Store obj as JSON so that a power cut at any step leaves the old or the new document readable.

    durable_file.TooLarge (an OSError; nothing written) for a document over MAX_CHARS: it could not be read back.
    room: the largest document the caller expects, in bytes (the store's slots are made that large).
    """
    write_text(path, json.dumps(obj), room)


# MAX_CHARS (16384): the largest document read back: the settings are ~2 KB (at most ~8 KB), tokens and pairings a
# few hundred bytes. A larger file is damaged (or planted): reading it whole could exhaust the heap at boot.


def _parse(text):
    if len(text) > MAX_CHARS:
        raise ValueError("larger than %d characters" % MAX_CHARS)
    return json.loads(text)   # ValueError: empty, torn, no JSON; RuntimeError/RecursionError: nested too deep


def read_json_file(path):
    """The stored document (recovered from an interrupted write_atomic if needed); None when there is none or none of
    its names holds a readable document (durable_file.stored() tells the two apart)."""
    return read_text(path, _parse, MAX_CHARS + 1)
