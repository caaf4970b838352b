"""core/durable_file.py as the firmware before the slot file had it (git show de9f118^:core/durable_file.py, its
docstring left out): the older firmware a rollback starts reads and saves settings and tokens with it."""

import os

from core.files import remove_quiet

NEW = ".new"
# Names older firmware wrote through renames. Only read, never freed except by remove_all(): after a cut they may
# share clusters with the document itself.
LEGACY = (".tmp", ".bak")


def names(path):
    """Where the document may be, in the order a reader tries them: a complete path.new is the newest."""
    return (path + NEW, path) + tuple(path + s for s in LEGACY)


def _sync():
    """Push written data to the flash where the platform can (CircuitPython's os.sync)."""
    try:
        os.sync()
    except (AttributeError, OSError):
        pass


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)
        f.flush()
    _sync()


def write_text(path, text):
    """Store text at path: write path.new completely, rewrite path in place, remove path.new.

    While path is being rewritten, path.new holds the whole new text, and read_text() prefers it.
    """
    _write(path + NEW, text)
    _write(path, text)
    remove_quiet(path + NEW)
    _sync()


def read_text(path, parse, limit=-1):
    """parse(text) of the first of names(path) that reads and parses, or None.

    A name that cannot be read or parsed is skipped, whatever the reason: torn or empty (ValueError), too large for
    the heap (MemoryError), nested too deep for the parser (RecursionError on CPython, RuntimeError "maximum
    recursion depth exceeded" on CircuitPython). Such a file is damaged, never a reason not to boot.
    """
    for name in names(path):
        try:
            with open(name) as f:
                text = f.read(limit)
        except (OSError, UnicodeError, MemoryError):
            continue
        try:
            return parse(text)
        except (ValueError, RuntimeError, MemoryError):
            continue
    return None


def stored(path):
    """True when a file is there under any of names(path), readable or not."""
    for name in names(path):
        try:
            os.stat(name)
            return True
        except OSError:
            pass
    return False


def remove_all(path):
    """Remove the document under every name (path.new first: a cut part way never brings back a newer one)."""
    for name in names(path):
        remove_quiet(name)
