"""One text document per file that a power cut at any point leaves old or new, written in place in a fixed file.

The store is path.slots: a header cluster, then two slots of fixed size, each holding one record [magic, file id,
sequence number, length, CRC32, text]. The file is made once at its full size, so its cluster chain and its size
never change after that: a save rewrites only the slot that does not hold the newest valid record (open "r+b", one
write of the whole record from a cluster boundary, so FatFs writes whole blocks straight to the disk), and the close
rewrites the file's directory entry (its time stamp) in place. A cut leaves the other slot untouched; the reader
takes the valid record with the higher sequence number. On the chip that is one block write per KB of record plus
one for the entry, where the scheme before it (path.new written whole, path truncated and rewritten, path.new
removed) cost 13 for a settings save.

Why no rename: FatFs renames by writing the new directory entry first and deleting the old one after, often in
another 512-byte block. A cut between the two leaves two names on one cluster chain, and freeing either name later
(a remove, or an open for writing) frees clusters the other still uses: the next file to grow overwrites them.
tests/test_json_store_power_cut.py replays every block write into ChaN's FatFs; the rename scheme ended
cross-linked there. Truncating and rewriting a file is safe in FatFs's order too (its entry is cleared before its
clusters are freed, its size set only after its data is written), which is how the slot file is made and how the
plain copies of older firmware were written.

Plain copies: path.new, then path, are read before the slot file: the firmware writes them only while it remakes
the slot file (path.new), and older firmware or the owner (over USB) wrote them, so when present they are the newer.
A save removes them after its record is complete. Legacy .tmp/.bak come last and are only read.
"""

import binascii
import os
import struct

from core.files import remove_quiet

NEW = ".new"
SLOTS = ".slots"
# Names older firmware wrote through renames. Only read, never freed except by remove_all(): after a cut they may
# share clusters with the document itself.
LEGACY = (".tmp", ".bak")

MAX_CHARS = 16384       # the largest text stored: the largest any reader takes (json_store, tariff prices)
HEAD = 1024             # the file header's own cluster: each slot starts on a cluster boundary (1 KB on CIRCUITPY)
UNIT = 1024             # records are padded to whole clusters: FatFs writes those straight, one block write each
MIN_SLOT = 4096         # room for a document to grow before the file must be made again
_FILE = b"MPS1"
_REC = b"MPR1"
_FILE_FMT = "<4sIII"    # magic, file id, slot size, CRC32 of the 12 bytes before it
_REC_FMT = "<4sIIII"    # magic, file id, sequence, length, CRC32 of (file id, sequence, length, text)
REC = 20                # struct.calcsize(_REC_FMT)


class TooLarge(OSError):
    """A document larger than the store takes; nothing was written."""


def names(path):
    """Where the document may be, in the order a reader tries them."""
    return (path + NEW, path, path + SLOTS) + tuple(path + s for s in LEGACY)


def _sync():
    """Push written data to the flash where the platform can (CircuitPython's os.sync)."""
    try:
        os.sync()
    except (AttributeError, OSError):
        pass


def _exists(name):
    try:
        os.stat(name)
        return True
    except OSError:
        return False


def _layout(f):
    """(file id, slot size) from the header of an open slot file, or None when it is not a complete one."""
    try:
        size = f.seek(0, 2)
        f.seek(0)
        head = f.read(16)
    except OSError:
        return None
    if len(head) != 16:
        return None
    magic, fid, slot, crc = struct.unpack(_FILE_FMT, head)
    # a cut while the file was made leaves it shorter (FatFs sets the size last): never half a layout
    if magic != _FILE or crc != binascii.crc32(head[:12]) or slot < UNIT or slot % UNIT or size != HEAD + 2 * slot:
        return None
    return fid, slot


def _record(f, fid, slot, i, buf):
    """(sequence, length) of slot i's record when it is complete, else None; buf: scratch for the CRC."""
    try:
        f.seek(HEAD + i * slot)
        head = f.read(REC)
        if len(head) != REC:
            return None
        magic, rfid, seq, n, crc = struct.unpack(_REC_FMT, head)
        if magic != _REC or rfid != fid or n > slot - REC:
            return None    # another file's record in clusters this one reused, or never written
        got = binascii.crc32(head[4:16])
        left = n
        while left:
            k = f.readinto(buf) if left >= len(buf) else f.readinto(memoryview(buf)[:left])
            if not k:
                return None
            got = binascii.crc32(memoryview(buf)[:k], got)
            left -= k
    except OSError:
        return None
    return (seq, n) if got == crc else None


def _newest(f, fid, slot):
    """(slot index, sequence, length) of the newest complete record, or None."""
    buf = bytearray(512)
    best = None
    for i in (0, 1):
        r = _record(f, fid, slot, i, buf)
        if r is not None and (best is None or r[0] > best[1]):
            best = (i, r[0], r[1])
    return best


def _pack(fid, seq, data, size):
    """One record of `data` padded with zeros to `size` bytes."""
    rec = bytearray(size)
    struct.pack_into(_REC_FMT, rec, 0, _REC, fid, seq, len(data),
                     binascii.crc32(data, binascii.crc32(struct.pack("<III", fid, seq, len(data)))))
    rec[REC:REC + len(data)] = data
    return rec


def _plain(name, text):
    with open(name, "w") as f:
        f.write(text)
        f.flush()
    _sync()


def _file_id():
    try:
        return struct.unpack("<I", os.urandom(4))[0]
    except (AttributeError, NotImplementedError, OSError):
        return 1


def _make(path, data, need, keep, room):
    """Make path.slots afresh with data in slot 0 (a missing or broken file, or one too small for data).

    keep: the file holds the newest document, which the truncation loses until the new one is complete; path.new
    holds the new text meanwhile (read before the slot file). The other slot's clusters are allocated by a seek,
    not written: the file id in every record tells this file's records from any that the clusters held before.
    """
    if keep:
        _plain(path + NEW, data.decode())
    slot = max(MIN_SLOT, 2 * need, (room + UNIT - 1) // UNIT * UNIT)
    fid = _file_id()
    buf = bytearray(HEAD)
    struct.pack_into(_FILE_FMT, buf, 0, _FILE, fid, slot, 0)
    struct.pack_into("<I", buf, 12, binascii.crc32(memoryview(buf)[:12]))
    with open(path + SLOTS, "wb") as f:
        f.write(buf + _pack(fid, 1, data, need))
        f.seek(HEAD + 2 * slot - 1)
        f.write(b"\0")      # the file's whole size now; FatFs writes that size into the entry at the close
        f.flush()
    _sync()


def _in_place(path, data, need):
    """(written, keep): data went into the older slot of path.slots; else whether that file holds a document."""
    try:
        f = open(path + SLOTS, "r+b")
    except OSError:
        return False, False
    try:
        layout = _layout(f)
        if layout is None:
            return False, False
        fid, slot = layout
        best = _newest(f, fid, slot)
        if need > slot:
            return False, best is not None
        # the slot that does not hold the newest complete record (either one when neither is complete)
        i, seq = (1 - best[0], best[1] + 1) if best is not None else (0, 1)
        f.seek(HEAD + i * slot)
        f.write(_pack(fid, seq, data, need))
        f.flush()
        return True, True
    finally:
        f.close()


def write_text(path, text, room=0):
    """Store text at path; TooLarge (nothing written) when it is longer than MAX_CHARS characters.

    The slot file is rewritten in place; it is made (again) only when missing, broken or too small for the text,
    with slots of at least `room` bytes (the largest record the caller expects: a larger one makes the file again).
    Plain copies (path, then path.new: path.new is the newer) are removed once the record is complete.
    """
    if len(text) > MAX_CHARS:
        raise TooLarge("document of %d characters, at most %d" % (len(text), MAX_CHARS))
    data = text.encode()
    need = (REC + len(data) + UNIT - 1) // UNIT * UNIT
    written, keep = _in_place(path, data, need)
    if not written:
        _make(path, data, need, keep, room)
    _sync()
    for name in (path, path + NEW):
        if _exists(name):
            remove_quiet(name)


def _read_slots(name, limit):
    """The text of the newest complete record of the slot file name; ValueError when it has none."""
    with open(name, "rb") as f:
        layout = _layout(f)
        best = _newest(f, layout[0], layout[1]) if layout is not None else None
        if best is None:
            raise ValueError("no complete record")
        if limit >= 0 and best[2] > 4 * limit:
            raise ValueError("larger than %d characters" % limit)   # read whole it could exhaust the heap
        f.seek(HEAD + best[0] * layout[1] + REC)
        data = f.read(best[2])
    text = data.decode()
    return text if limit < 0 else text[:limit]


def read_text(path, parse, limit=-1):
    """parse(text) of the first of names(path) that reads and parses, or None.

    A name that cannot be read or parsed is skipped, whatever the reason: torn or empty (ValueError), too large for
    the heap (MemoryError), nested too deep for the parser (RecursionError on CPython, RuntimeError "maximum
    recursion depth exceeded" on CircuitPython). Such a file is damaged, never a reason not to boot.
    """
    for name in names(path):
        try:
            if name.endswith(SLOTS):
                text = _read_slots(name, limit)
            else:
                with open(name) as f:
                    text = f.read(limit)
        except (OSError, ValueError, UnicodeError, MemoryError):
            continue
        try:
            return parse(text)
        except (ValueError, RuntimeError, MemoryError):
            continue
    return None


def stored(path):
    """True when a file is there under any of names(path), readable or not."""
    for name in names(path):
        if _exists(name):
            return True
    return False


def remove_all(path):
    """Remove the document under every name, in the order a reader tries them: a cut part way leaves only names a
    reader would have taken after the removed ones."""
    for name in names(path):
        remove_quiet(name)
