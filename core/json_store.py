"""JSON documents on the flash that a power cut at any point leaves old or new (core/durable_file.py)."""

import json

from core.durable_file import read_text, write_text


def write_atomic(path, obj):
    """Store obj as JSON so that a power cut at any step leaves the old or the new document readable."""
    write_text(path, json.dumps(obj))


def read_json_file(path):
    """The stored document (recovered from an interrupted write_atomic if needed); None when there is none."""
    return read_text(path, json.loads)  # ValueError: empty, torn, no JSON
