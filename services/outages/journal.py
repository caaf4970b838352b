"""The outage journal on flash: a small preallocated ring of 32-byte CRC-checked records, one per restart."""

import struct
from binascii import crc32

from micropython import const

from core.files import exists

# Record (little-endian): seq u32, down u32 (UTC s, 0 unknown), up u32 (UTC s, 0 unknown), reason u8, flags u8,
# spare u16, detail 12 bytes (ASCII, NUL-padded), crc u32 of bytes 0..27. seq 0 marks an empty slot.
REC_FMT = "<IIIBBH12sI"
REC_SIZE = const(32)
CAPACITY = const(64)          # the API promises at least the last 50
_SEED = const(0x4F55)         # "OU": a record of another file never passes

F_PENDING = const(1)          # written before an orderly restart: the next start completes it
REASONS = ("unknown", "power", "brownout", "watchdog", "crash", "ota", "rollback", "restart", "button",
           "reset_pin", "software", "first_start")


def reason_code(name):
    """Index of a reason name in REASONS (0, "unknown", for anything else)."""
    for i in range(len(REASONS)):
        if REASONS[i] == name:
            return i
    return 0


def pack(seq, down, up, reason, flags, detail):
    """The 32 bytes of a record."""
    buf = bytearray(REC_SIZE)
    text = detail.encode()[:12] if isinstance(detail, str) else bytes(detail[:12])
    struct.pack_into(REC_FMT, buf, 0, seq, down, up, reason, flags, 0, text, 0)
    struct.pack_into("<I", buf, REC_SIZE - 4, crc32(memoryview(buf)[:REC_SIZE - 4], _SEED))
    return buf


def unpack(buf, at=0):
    """[seq, down, up, reason, flags, detail] of a valid record at buf[at:], or None (empty, torn, foreign)."""
    v = struct.unpack_from(REC_FMT, buf, at)
    if v[0] == 0 or v[7] != crc32(memoryview(buf)[at:at + REC_SIZE - 4], _SEED):
        return None
    detail = bytes(v[6])
    end = detail.find(b"\x00")
    return [v[0], v[1], v[2], v[3], v[4], (detail if end < 0 else detail[:end]).decode()]


class OutageJournal:
    """The ring file at path: scan() finds the newest record; put() writes one (a new one, or the newest again with
    the same seq, to complete it); entries() lists them newest first. Every write is one slot in place: the file
    never grows and its FAT chain never changes."""

    def __init__(self, path="logs/outages.bin", capacity=CAPACITY):
        self.path = path
        self.capacity = capacity
        self.head = 0            # slot of the newest record
        self.newest = None       # its fields, or None when the journal is empty
        self.bad = 0             # slots that failed their CRC (torn or foreign): skipped

    def _create(self):
        with open(self.path, "wb") as f:
            f.write(bytes(REC_SIZE * self.capacity))

    def open(self):
        """Create the file when missing (or extend a short one), then scan it."""
        if not exists(self.path):
            slash = self.path.rfind("/")
            if slash > 0 and not exists(self.path[:slash]):
                import os

                os.mkdir(self.path[:slash])
            self._create()
        else:
            with open(self.path, "rb") as f:
                f.seek(0, 2)
                length = f.tell()
            if length < REC_SIZE * self.capacity:
                with open(self.path, "r+b") as f:
                    f.seek(length - length % REC_SIZE)
                    f.write(bytes(REC_SIZE * self.capacity - (length - length % REC_SIZE)))
        self.scan()

    def scan(self):
        self.newest = None
        self.head = 0
        self.bad = 0
        buf = bytearray(REC_SIZE)
        with open(self.path, "rb") as f:
            for slot in range(self.capacity):
                if f.readinto(buf) != REC_SIZE:
                    break
                r = unpack(buf)
                if r is None:
                    if any(buf):
                        self.bad += 1
                    continue
                if self.newest is None or r[0] > self.newest[0]:
                    self.newest = r
                    self.head = slot

    def put(self, down, up, reason, flags, detail, replace=False):
        """Write a record: a new one after the newest, or (replace) the newest again, completed."""
        if replace and self.newest is not None:
            seq, slot = self.newest[0], self.head
        else:
            seq = self.newest[0] + 1 if self.newest is not None else 1
            slot = (self.head + 1) % self.capacity if self.newest is not None else 0
        with open(self.path, "r+b") as f:
            f.seek(slot * REC_SIZE)
            f.write(pack(seq, down, up, reason, flags, detail))
        self.newest = [seq, down, up, reason, flags, detail]
        self.head = slot

    def entries(self, limit=CAPACITY):
        """Records newest first (at most limit), by seq: a torn or foreign slot is skipped."""
        out = []
        buf = bytearray(REC_SIZE)
        with open(self.path, "rb") as f:
            for _ in range(self.capacity):
                if f.readinto(buf) != REC_SIZE:
                    break
                r = unpack(buf)
                if r is not None:
                    out.append(r)
        out.sort(key=lambda r: -r[0])
        return out[:limit]
