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

Plain copies: path.new and path are what older firmware reads (path.new first). The first save that finds them
leaves them in place, frozen, so a rollback to an older firmware (boot.py after failed trial boots, or an older
release installed) finds the document as it was before the update, and never rewrites them (a save stays one slot
write). Each record keeps the size and CRC32 of path.new and path as that save found them (or that they were
absent): the reader takes a plain copy only when it differs from what the newest record says, that is when the owner
(over USB) or an older firmware after a rollback changed it; the next save records it again (frozen anew). A slot
file that stands but holds no complete record is damaged: the plain copies and legacy .tmp/.bak are not read then
(they may be older than the document it lost: old tokens, authentication as it was), only when no slot file stands.
path.slots.new is this firmware's own: the new text while it makes the slot file again, read first.
"""

import binascii
import os
import struct

from core.files import remove_quiet

NEW = ".new"
SLOTS = ".slots"
TEMP = SLOTS + NEW      # the new text while the slot file is made again; older firmware never reads it
PLAIN = (NEW, "")       # what older firmware reads, in its order: frozen after the first save here
# Names older firmware wrote through renames. Only read, never freed except by remove_all(): after a cut they may
# share clusters with the document itself.
LEGACY = (".tmp", ".bak")

MAX_CHARS = 16384       # the largest text stored: the largest any reader takes (json_store, tariff prices)
HEAD = 1024             # the file header's own cluster: each slot starts on a cluster boundary (1 KB on CIRCUITPY)
UNIT = 1024             # records are padded to whole clusters: FatFs writes those straight, one block write each
MIN_SLOT = 4096         # room for a document to grow before the file must be made again
_FILE = b"MPS1"
_REC = b"MPR2"
_REC1 = b"MPR1"         # the record before the plain copies were kept (no fingerprints): still read
_FILE_FMT = "<4sIII"    # magic, file id, slot size, CRC32 of the 12 bytes before it
# magic, file id, sequence, length, size and CRC32 of path.new then of path as the save found them, CRC32 of the 28
# bytes after the magic and the text
_REC_FMT = "<4sIIIIIIII"
REC = 36                # struct.calcsize(_REC_FMT)
REC1 = 20               # an MPR1 record's head: magic, file id, sequence, length, CRC32
ABSENT = (0xFFFFFFFF, 0)    # the fingerprint of a name that is not there: no file has that size


class TooLarge(OSError):
    """A document larger than the store takes; nothing was written."""


def names(path):
    """Every name of the document: the order a reader tries them, and remove_all() removes them (the plain copies
    before the slot file: a cut part way never leaves them as the only document)."""
    return (path + TEMP, path + NEW, path, path + SLOTS) + tuple(path + s for s in LEGACY)


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


def _head(f):
    """(file size, its first 16 bytes) of an open slot file, or None when it cannot be read."""
    try:
        size = f.seek(0, 2)
        f.seek(0)
        return size, f.read(16)
    except OSError:
        return None


def _layout(f):
    """(file id, slot size) from the header of an open slot file, or None when it is not a complete one."""
    got = _head(f)
    if got is None or len(got[1]) != 16:
        return None
    size, head = got
    magic, fid, slot, crc = struct.unpack(_FILE_FMT, head)
    # a cut while the file was made leaves it shorter (FatFs sets the size last): never half a layout
    if magic != _FILE or crc != binascii.crc32(head[:12]) or slot < UNIT or slot % UNIT or size != HEAD + 2 * slot:
        return None
    return fid, slot


def _unfinished(f):
    """True for a slot file without a layout that a cut left while it was made (it stands for no document).

    FatFs sets the size at the close, so such a file is empty there; a host's file system may keep part of it: its
    header whole (written first) in a file shorter than the header says, or less than the header. A file of any
    other shape without a layout is damaged.
    """
    got = _head(f)
    if got is None:
        return False
    size, head = got
    if len(head) < 16:
        return True
    magic, _fid, slot, crc = struct.unpack(_FILE_FMT, head)
    return magic == _FILE and crc == binascii.crc32(head[:12]) and size < HEAD + 2 * slot


def _record(f, fid, slot, i, buf):
    """(sequence, length, text offset, plain fingerprints or None) of slot i's record when it is complete, else None;
    buf: scratch for the CRC."""
    try:
        f.seek(HEAD + i * slot)
        head = f.read(REC)
        if len(head) != REC:
            return None
        if head[:4] == _REC:
            _m, rfid, seq, n, ns, nc, ps, pc, crc = struct.unpack(_REC_FMT, head)
            off, plain = REC, ((ns, nc), (ps, pc))
        elif head[:4] == _REC1:
            _m, rfid, seq, n, crc = struct.unpack("<4sIIII", head[:REC1])
            off, plain = REC1, None     # saved by the firmware that removed the plain copies: any there is newer
            f.seek(HEAD + i * slot + REC1)
        else:
            return None
        if rfid != fid or n > slot - off:
            return None    # another file's record in clusters this one reused, or never written
        got = binascii.crc32(head[4:off - 4])
        left = n
        while left:
            k = f.readinto(buf) if left >= len(buf) else f.readinto(memoryview(buf)[:left])
            if not k:
                return None
            got = binascii.crc32(memoryview(buf)[:k], got)
            left -= k
    except OSError:
        return None
    return (seq, n, off, plain) if got == crc else None


def _newest(f, fid, slot, buf):
    """(slot index, sequence, length, text offset, plain fingerprints) of the newest complete record, or None."""
    best = None
    for i in (0, 1):
        r = _record(f, fid, slot, i, buf)
        if r is not None and (best is None or r[0] > best[1]):
            best = (i,) + r
    return best


def _pack(fid, seq, data, size, plain):
    """One record of `data` padded with zeros to `size` bytes; plain: the fingerprints of path.new and path."""
    rec = bytearray(size)
    struct.pack_into(_REC_FMT, rec, 0, _REC, fid, seq, len(data), plain[0][0], plain[0][1], plain[1][0],
                     plain[1][1], 0)
    struct.pack_into("<I", rec, REC - 4, binascii.crc32(data, binascii.crc32(memoryview(rec)[4:REC - 4])))
    rec[REC:REC + len(data)] = data
    return rec


def _fingerprint(name, buf):
    """(size, CRC32) of a file's bytes, or ABSENT when it cannot be opened."""
    size = crc = 0
    try:
        with open(name, "rb") as f:
            while True:
                k = f.readinto(buf)
                if not k:
                    break
                crc = binascii.crc32(memoryview(buf)[:k], crc)
                size += k
    except OSError:
        return ABSENT
    return size, crc


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


def _make(path, data, need, keep, room, plain):
    """Make path.slots afresh with data in slot 0 (a missing or broken file, or one too small for data).

    keep: a slot file stands, which the truncation loses until the new one is complete; path.slots.new holds the
    new text meanwhile (read first), so no cut shows the frozen plain copies the slot file hid. The other slot's
    clusters are allocated by a seek, not written: the file id in every record tells this file's records from any
    that the clusters held before.
    """
    if keep:
        _plain(path + TEMP, data.decode())
    slot = max(MIN_SLOT, 2 * need, (room + UNIT - 1) // UNIT * UNIT)
    fid = _file_id()
    buf = bytearray(HEAD)
    struct.pack_into(_FILE_FMT, buf, 0, _FILE, fid, slot, 0)
    struct.pack_into("<I", buf, 12, binascii.crc32(memoryview(buf)[:12]))
    with open(path + SLOTS, "wb") as f:
        f.write(buf + _pack(fid, 1, data, need, plain))
        f.seek(HEAD + 2 * slot - 1)
        f.write(b"\0")      # the file's whole size now; FatFs writes that size into the entry at the close
        f.flush()
    _sync()


def _in_place(path, data, need, plain, buf):
    """(written, keep): data went into the older slot of path.slots; else whether a slot file stands (one not
    left unfinished by a cut while it was made: the reader takes it, or finds it damaged, over the plain copies)."""
    try:
        f = open(path + SLOTS, "r+b")
    except OSError:
        return False, False
    try:
        layout = _layout(f)
        if layout is None:
            return False, not _unfinished(f)
        fid, slot = layout
        if need > slot:
            return False, True
        best = _newest(f, fid, slot, buf)
        # the slot that does not hold the newest complete record (either one when neither is complete)
        i, seq = (1 - best[0], best[1] + 1) if best is not None else (0, 1)
        f.seek(HEAD + i * slot)
        f.write(_pack(fid, seq, data, need, plain))
        f.flush()
        return True, True
    finally:
        f.close()


def write_text(path, text, room=0):
    """Store text at path; TooLarge (nothing written) when it is longer than MAX_CHARS characters.

    The slot file is rewritten in place; it is made (again) only when missing, broken or too small for the text,
    with slots of at least `room` bytes (the largest record the caller expects: a larger one makes the file again).
    The plain copies are never written or removed: the record keeps their fingerprints as found (frozen).
    """
    if len(text) > MAX_CHARS:
        raise TooLarge("document of %d characters, at most %d" % (len(text), MAX_CHARS))
    data = text.encode()
    need = (REC + len(data) + UNIT - 1) // UNIT * UNIT
    buf = bytearray(512)
    plain = (_fingerprint(path + PLAIN[0], buf), _fingerprint(path + PLAIN[1], buf))
    written, keep = _in_place(path, data, need, plain, buf)
    if not written:
        _make(path, data, need, keep, room, plain)
    _sync()
    if _exists(path + TEMP):
        remove_quiet(path + TEMP)


def _slots(name, buf):
    """What the slot file says: None when there is none (or one a cut left unfinished while it was made), False when
    it stands without a complete record (damaged), else (text position, length, plain fingerprints or None)."""
    try:
        f = open(name, "rb")
    except OSError:
        return None
    with f:
        layout = _layout(f)
        if layout is None:
            return None if _unfinished(f) else False
        best = _newest(f, layout[0], layout[1], buf)
        if best is None:
            return False
        return HEAD + best[0] * layout[1] + best[3], best[2], best[4]


def _read_slots(name, at, limit):
    """The text of the record at (position, length) of the slot file name."""
    if limit >= 0 and at[1] > 4 * limit:
        raise ValueError("larger than %d characters" % limit)   # read whole it could exhaust the heap
    with open(name, "rb") as f:
        f.seek(at[0])
        data = f.read(at[1])
    text = data.decode()
    return text if limit < 0 else text[:limit]


_SKIP = object()


def _parse_name(name, parse, limit, at=None):
    """parse(text) of one name, or _SKIP when it cannot be read or parsed."""
    try:
        if at is not None:
            text = _read_slots(name, at, limit)
        else:
            with open(name) as f:
                text = f.read(limit)
    except (OSError, ValueError, UnicodeError, MemoryError):
        return _SKIP
    try:
        return parse(text)
    except (ValueError, RuntimeError, MemoryError):
        return _SKIP


def read_text(path, parse, limit=-1):
    """parse(text) of the document, or None.

    In order: path.slots.new; then path.new and path, each only when it differs from what the newest record of the
    slot file recorded (or no slot file stands); the slot file's newest record; legacy .tmp/.bak when no slot file
    stands. A name that cannot be read or parsed is skipped, whatever the reason: torn or empty (ValueError), too
    large for the heap (MemoryError), nested too deep for the parser (RecursionError on CPython, RuntimeError
    "maximum recursion depth exceeded" on CircuitPython). Such a file is damaged, never a reason not to boot.
    """
    got = _parse_name(path + TEMP, parse, limit)
    if got is not _SKIP:
        return got
    buf = bytearray(512)
    at = _slots(path + SLOTS, buf)
    if at is False:
        return None     # damaged: the plain copies may be the frozen ones, older than what it lost
    for k in (0, 1):
        name = path + PLAIN[k]
        if at is None or at[2] is None or _fingerprint(name, buf) != at[2][k]:
            got = _parse_name(name, parse, limit)
            if got is not _SKIP:
                return got
    if at is not None:
        got = _parse_name(path + SLOTS, parse, limit, at)
        return None if got is _SKIP else got
    for suffix in LEGACY:
        got = _parse_name(path + suffix, parse, limit)
        if got is not _SKIP:
            return got
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
