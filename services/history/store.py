"""History on flash: one preallocated file of two rings of 64-byte CRC-checked records, and its JSON serializers."""

import os
import struct
from binascii import crc32

from micropython import const

from core.files import exists, remove_quiet
from core.tz import civil_from_days

# File layout (little-endian), see docs/history.md:
#   header (64 bytes): magic "MPH\x01", version u16, record size u16, HighRes slots u16, LowRes slots u16,
#                      zero padding, CRC-32 of bytes 0..59 at 60..63
#   HighRes ring: HR_CAP slots of REC_SIZE bytes, then LowRes ring: LR_CAP slots. A file with other ring sizes in a
#   valid header (an older firmware's 1500/372) is migrated record by record, see HistoryStore._migrate(); so is a
#   version 1 file (56-byte records without the cost fields: its records keep every field, their cost unknown).
# Record: seq u32, t u32 (UTC epoch s), day i32 (local day number), power i32 (W), off i16 (UTC offset, min),
#         flags u16, a i64, b i64, c i64, d i64 (energies in 0.1 Wh), ic i32, ec i32 (import cost and export
#         revenue in micro-units of the currency, valid with F_IC / F_EC), crc u32 (CRC-32 of bytes 0..59).
#   HighRes: t = start of the quarter hour, a/b = import/export totals at its end, c/d = its import/export energy,
#            ic/ec = what that energy cost and earned at the price in force when the quarter closed (booked once).
#   LowRes:  t = start of the local day, a/b = totals at the start of the day, c/d = the day's energy, ic/ec the
#            sums of its priced quarters.
MAGIC = b"MPH\x01"
VERSION = const(2)
HEADER_SIZE = const(64)
REC_FMT = "<IIiihhqqqqiiI"
REC_SIZE = const(64)
V1_FMT = "<IIiihhqqqqI"   # version 1: no cost fields
V1_SIZE = const(56)
_HDR_FMT = "<4sHHHH"
HR = const(1)
LR = const(2)
HR_CAP = const(3000)  # 30 days of 100 quarter hours (the longest DST day): retention never falls short
LR_CAP = const(732)   # two years (a leap year included) of days

F_POWER = const(1)    # power holds an average of 16.7.0 samples
F_GAP = const(2)      # the energy spans time without readings (counted from the last known totals)
F_REBASE = const(4)   # ctRatio changed or the counter went back: energy counted from the new base
F_NO_EXPORT = const(8)  # the meter has no export register
F_IC = const(16)      # ic holds the import cost (HighRes: the quarter was priced; LowRes: at least one quarter)
F_EC = const(32)      # ec holds the export revenue
F_IC_PART = const(64)   # LowRes: some quarter with import energy has no import cost (no price then)
F_EC_PART = const(128)  # LowRes: some quarter with export energy has no export revenue

# Bytes written per slice while the file is made (created, extended, migrated, moved), one slice per poll of the
# service: two 1 KB clusters, each written straight to its 4 KB sector, then the FAT block for them and the
# directory entry at the close: 4 sector writes (5 for the first, which creates the file), 206 S3 ms of stall at
# the flash's typical figures (257 for the first) and 1.8 s at its maximum (2.2 s), against 24 S3 s and 210 s for
# the file in one step. 1 KB would stall 154 ms a slice but take 234 slices of 3 erases (703 in all, the FAT's
# sector, which holds the boot sector, erased 234 times); 2 KB takes 117 slices and 469 erases, the same as the
# whole file in 512-byte writes. docs/history.md, "How the file is made".
FILL = const(2048)
_ZERO = bytes(REC_SIZE)
READ_BATCH = const(16)  # slots read per open while streaming an answer (896 bytes of buffer)


def _seed(kind, version=VERSION):
    # Version and ring in the CRC seed: a record of another format or the other ring never passes.
    return (version << 8) | kind


def pack_into(buf, kind, seq, rec):
    """Pack rec = (seq, t, day, power, off, flags, a, b, c, d[, ic, ec]) into buf (REC_SIZE bytes) with seq in place
    of rec[0]; a record without cost fields is written with them zero (its flags say they hold nothing)."""
    ic = rec[10] if len(rec) > 10 else 0
    ec = rec[11] if len(rec) > 11 else 0
    struct.pack_into(REC_FMT, buf, 0, seq, rec[1], rec[2], rec[3], rec[4], rec[5], rec[6], rec[7], rec[8],
                     rec[9], ic, ec, 0)
    struct.pack_into("<I", buf, REC_SIZE - 4, crc32(memoryview(buf)[:REC_SIZE - 4], _seed(kind)))


def unpack(buf, kind, at=0):
    """(seq, t, day, power, off, flags, a, b, c, d, ic, ec) of a valid record at buf[at:], or None when its CRC
    fails."""
    v = struct.unpack_from(REC_FMT, buf, at)
    if v[12] != crc32(memoryview(buf)[at:at + REC_SIZE - 4], _seed(kind)) or v[0] == 0:
        return None
    return v[:12]


def unpack_v1(buf, kind, at=0):
    """A version 1 record (56 bytes, no cost fields) in the current shape: ic and ec 0, their flags clear (cost
    unknown: no price was booked when it was written), or None when its CRC fails."""
    v = struct.unpack_from(V1_FMT, buf, at)
    if v[10] != crc32(memoryview(buf)[at:at + V1_SIZE - 4], _seed(kind, 1)) or v[0] == 0:
        return None
    return v[:5] + (v[5] & ~(F_IC | F_EC | F_IC_PART | F_EC_PART),) + v[6:10] + (0, 0)


def _next(it):
    """The next item of an iterator, or None at its end."""
    # next() with a default needs MICROPY_PY_BUILTINS_NEXT2, off at the core feature level CircuitPython's espressif
    # port builds with (the bench's unix build has it).
    try:
        return next(it)
    except StopIteration:
        return None


def header_bytes(hr_cap, lr_cap):
    """The 64-byte file header for the current format."""
    h = bytearray(HEADER_SIZE)
    struct.pack_into(_HDR_FMT, h, 0, MAGIC, VERSION, REC_SIZE, hr_cap, lr_cap)
    struct.pack_into("<I", h, HEADER_SIZE - 4, crc32(memoryview(h)[:HEADER_SIZE - 4]))
    return h


def parse_header(h):
    """(version, record size, hr_cap, lr_cap) of a header whose magic and CRC hold, else None."""
    if len(h) < HEADER_SIZE or h[:3] != MAGIC[:3]:
        return None
    if struct.unpack_from("<I", h, HEADER_SIZE - 4)[0] != crc32(memoryview(h)[:HEADER_SIZE - 4]):
        return None
    _m, ver, rsize, hc, lc = struct.unpack_from(_HDR_FMT, h, 0)
    return ver, rsize, hc, lc


class Ring:
    """One ring of the file: where it starts, its slots, the next slot and sequence number to write."""

    def __init__(self, kind, base, cap, rsize=REC_SIZE):
        self.kind = kind
        self.base = base
        self.cap = cap
        self.rsize = rsize   # V1_SIZE: a version 1 file's ring, read by a migration
        self.unpack = unpack if rsize == REC_SIZE else unpack_v1
        self.head = 0        # next slot to write
        self.next_seq = 1    # sequence number of the next record (0 marks an empty slot)
        self.valid = 0       # readable records found by the last scan
        self.bad = 0         # slots holding something that failed its CRC
        self.last = None     # newest record (seq, t, day, power, off, flags, a, b, c, d)

    def offset(self, slot):
        """File offset of a slot."""
        return self.base + slot * self.rsize

    def scan(self, f, buf):
        """Find the newest record (highest seq): the head follows it. Reads every slot once."""
        best = -1
        self.valid = self.bad = 0
        self.last = None
        f.seek(self.base)
        rsize = self.rsize
        if len(buf) != rsize:
            buf = memoryview(buf)[:rsize]
        for slot in range(self.cap):
            if f.readinto(buf) != rsize:
                break
            r = self.unpack(buf, self.kind)
            if r is None:
                if buf[0] != 0 or buf[4] != 0 or buf[rsize - 1] != 0:
                    self.bad += 1  # blank slots are zero; anything else is torn or foreign
                continue
            self.valid += 1
            if self.last is None or r[0] > self.last[0]:
                self.last = r
                best = slot
        if self.last is None:
            self.head = 0
            self.next_seq = 1
        else:
            self.head = (best + 1) % self.cap
            self.next_seq = self.last[0] + 1

    def records(self, opener, path, buf, max_seq=0xFFFFFFFF, first_day=-(1 << 30), end_day=1 << 30, ticks=False):
        """Readable records oldest first, skipping torn ones, any written after max_seq and days outside
        [first_day, end_day) (tested on the raw field before the CRC, so skipping costs no allocation).
        With ticks, None is yielded after every read: a streamed answer gives the loop back between reads.

        Reads len(buf) // REC_SIZE slots per open of the file and holds no file open while it yields: an answer
        streamed over many polls neither pins a file handle nor blocks a flush in between.
        """
        rsize = self.rsize
        unpack_at = self.unpack
        per = len(buf) // rsize
        last_seq = 0
        last_t = -1
        i = 0
        cap = self.cap
        # The head as it is now: a flush while the answer streams moves self.head, and following it would skip
        # as many slots as were written (records of the asked day missing from the answer; the soak found it).
        head = self.head
        while i < cap:
            slot = (head + i) % cap
            n = per
            if n > cap - i:
                n = cap - i
            if n > cap - slot:
                n = cap - slot  # up to the end of the ring; the next batch starts at slot 0
            with opener(path, "rb") as f:
                f.seek(self.base + slot * rsize)
                got = f.readinto(buf if n == per else memoryview(buf)[:n * rsize]) // rsize
            i += n
            if ticks:
                yield None
            for k in range(got):
                at = k * rsize + 8  # the day field, read byte-wise: a skipped slot allocates nothing
                day = buf[at] | (buf[at + 1] << 8) | (buf[at + 2] << 16)
                if buf[at + 3] or day < first_day:
                    continue
                if day >= end_day:
                    # Days only grow along the ring; two days of margin cover a change of time zone.
                    if day >= end_day + 2 and unpack_at(buf, self.kind, k * rsize) is not None:
                        return
                    continue
                r = unpack_at(buf, self.kind, k * rsize)
                # Ordered by seq and time: a stale record from an earlier life of the ring is skipped, not misplaced.
                if r is None or r[0] > max_seq or r[0] <= last_seq or r[1] <= last_t:
                    continue
                last_seq = r[0]
                last_t = r[1]
                yield r


class HistoryStore:
    """The history file at path (relative to the drive root; its folder is made when missing); log: core.log.Log
    or None; legacy: where an older firmware kept the file (moved to path by open(), see _move_legacy()).

    opener(path, mode) opens the file for the readers (the bench swaps it inside the VM).

    Making the file (creating, extending, migrating, moving) writes it in slices of FILL bytes: begin() checks the
    file and writes the first slice, step() one more each; ready says the file is complete and may be written.
    Meanwhile self.hr / self.lr describe the file readers are served (the old one during a migration or a move,
    the part written so far of a new or short one), so records() never yields anything but whole, valid records.
    open() is begin() and every step at once (tests, tools)."""

    def __init__(self, path="history/history.bin", hr_cap=HR_CAP, lr_cap=LR_CAP, log=None, legacy=None):
        self.path = path
        self.home = path
        self.legacy = legacy
        self.moved = False
        # An instance attribute, not a class one: a Python function there (a hooked open) would bind to self.
        self.opener = open
        self.hr_cap = hr_cap
        self.lr_cap = lr_cap
        self.hr = Ring(HR, HEADER_SIZE, hr_cap)
        self.lr = Ring(LR, HEADER_SIZE + hr_cap * REC_SIZE, lr_cap)
        self.size = HEADER_SIZE + (hr_cap + lr_cap) * REC_SIZE
        self.log = log
        self.status = None
        self.written = [0, 0]
        self.ready = False       # the file is complete in this layout: write() may run
        self.slices = 0          # slices written since begin()
        self.done_bytes = 0      # how far the file being made is written (describe(), tests)
        self._job = None         # the generator doing the work begin() started, one slice per step()
        self.kept = (0, 0)       # (HighRes, LowRes) records the last migration kept
        self._clean = True       # the slice buffer holds only zeros
        self._buf = bytearray(REC_SIZE)
        self._slice = None       # FILL bytes, allocated at the first slice and reused by every slice after it

    def _note(self, level, msg, *args):
        if self.log is not None:
            self.log.log(level, msg, *args)

    def open(self):
        """Check the file, repair what can be repaired keeping every readable record, find the ring heads, and
        make the file complete now (all slices at once: for tests and tools; the service uses begin()/step()).

        Returns the status: "ok", "created", "extended" (was truncated), "header" (header rewritten),
        "migrated" or "replaced" (another format, kept aside as <path>.v<N>).
        """
        self.begin()
        while not self.step():
            pass
        return self.status

    def begin(self):
        """Check the file and start what it needs: renames and the first slice of writing now, the rest in step().
        Returns the status as known so far ("moving" while an older firmware's file is copied into its folder)."""
        self.ready = False
        self.slices = 0
        self._job = self._opening()
        self.step()
        return self.status

    def step(self):
        """Do one slice of the work begin() started (at most FILL bytes written, or the renames that end a
        migration); True once the file is complete. An OSError ends the work: begin() again starts it anew."""
        job = self._job
        if job is None:
            return self.ready
        try:
            next(job)
        except StopIteration:
            self._job = None
            self._slice = None      # 2 KB back to the heap: only the next begin() needs it again
            self.ready = True
            return True
        except Exception:
            self._job = None
            raise
        return False

    def _opening(self):
        # A generator: every yield ends a slice (at most FILL bytes written, then the file closed).
        self.path = self.home
        self._use(None)
        self.done_bytes = 0
        try:
            yield from self._move_legacy()
        except OSError as exc:
            if self.legacy is None or not exists(self.legacy):
                raise
            # Drive read-only (USB owns it) or full: serve the old file where it is; the next open() moves it.
            self.path = self.legacy
            self._note("error", "history: cannot move %s to %s, using it where it is: %s", self.legacy, self.home, exc)
        self._finish_migration()
        self._use(None)
        try:
            f = open(self.path, "rb")
        except OSError:
            self.status = "created"
            self._note("warning", "history: %s missing, created", self.path)
            yield from self._build(self.path, 0)
            return
        try:
            head = f.read(HEADER_SIZE)
            f.seek(0, 2)
            length = f.tell()
        finally:
            f.close()
        hdr = parse_header(head)
        status = "ok"
        if hdr is not None and hdr[0] == 1 and hdr[1] == V1_SIZE:
            # The format before the cost fields: every record copied into this format, its cost unknown.
            self.status = "migrating"
            yield from self._migrate(hdr)
            n_hr, n_lr = self.kept
            self.status = "migrated"
            self._note("warning", "history: %s migrated from format v1 to v%d, %d HighRes and %d LowRes records "
                       "kept", self.path, VERSION, n_hr, n_lr)
            return
        if hdr is not None and (hdr[0] != VERSION or hdr[1] != REC_SIZE):
            # A format this firmware cannot read: keep the file for a later migration, start a new one.
            aside = "%s.v%d" % (self.path, hdr[0])
            try:
                try:
                    os.remove(aside)  # FAT cannot rename onto an existing file
                except OSError:
                    pass
                os.rename(self.path, aside)
            except OSError as exc:
                self._note("error", "history: cannot set aside %s: %s", self.path, exc)
            self.status = "replaced"
            self._note("warning", "history: %s has format v%d record size %d, kept as %s, new file created",
                       self.path, hdr[0], hdr[1], aside)
            yield from self._build(self.path, 0)
            return
        if hdr is not None and (hdr[2] != self.hr_cap or hdr[3] != self.lr_cap):
            # Another firmware's ring sizes (a valid header says so): copy every record into this layout.
            self.status = "migrating"
            yield from self._migrate(hdr)
            n_hr, n_lr = self.kept
            self.status = "migrated"
            self._note("warning", "history: %s migrated from %d/%d to %d/%d slots, %d HighRes and %d LowRes records "
                       "kept", self.path, hdr[2], hdr[3], self.hr_cap, self.lr_cap, n_hr, n_lr)
            return
        if hdr is None:
            if length < HEADER_SIZE + REC_SIZE:
                # Not one whole record to keep: made afresh (the header in the first slice).
                self.status = "extended"
                self._note("warning", "history: %s truncated at %d of %d bytes, made again", self.path, length,
                           self.size)
                yield from self._build(self.path, 0)
                return
            self._write_header()
            status = "header"
            self._note("warning", "history: %s header unreadable, rewritten; records kept where their CRC holds",
                       self.path)
        # The records there are served at once (a short file reads as far as it goes); the rest is zero-filled.
        self.scan()
        if self.hr.bad or self.lr.bad:
            self._note("warning", "history: %d HighRes and %d LowRes slots unreadable (torn or overwritten), skipped",
                       self.hr.bad, self.lr.bad)
        if length < self.size:
            status = "extended"
            self.status = status
            self._note("warning", "history: %s truncated at %d of %d bytes, extended", self.path, length, self.size)
            # A torn last record is left as is: its CRC fails, the scan skipped it.
            yield from self._build(self.path, length)
        self.status = status

    def _use(self, hdr):
        """Serve the rings of a file with header hdr (another firmware's layout: its ring sizes, or version 1's
        56-byte records), or of this layout when hdr is None; not scanned yet."""
        if hdr is None:
            hc, lc, rsize = self.hr_cap, self.lr_cap, REC_SIZE
        else:
            hc, lc, rsize = hdr[2], hdr[3], hdr[1]
        self.hr = Ring(HR, HEADER_SIZE, hc, rsize)
        self.lr = Ring(LR, HEADER_SIZE + hc * rsize, lc, rsize)

    def _move_legacy(self):
        """Make the file's folder; move a file an older firmware kept at self.legacy to self.path, keeping it whole
        (a generator: the copy goes a slice per step, the old file served meanwhile).

        Why a folder: a file's directory entry is rewritten at every flush, and FAT root-directory entries share
        the root's sectors with settings.json, the log and the firmware's own files; a folder's entries live in
        the folder's own cluster. Why a copy and not a rename: FatFs renames across folders in two sector writes
        (new entry, then old entry removed); a power cut between them leaves two entries sharing one cluster
        chain, and removing either then frees the clusters the other still uses. The copy has its own clusters,
        so every state a cut can leave is recovered below without losing a record:
          legacy only, maybe a partial <tmp>  -> the copy starts again
          <tmp> complete, legacy and no path  -> same (a cut before the rename)
          path and legacy                     -> the rename happened: legacy removed
          <tmp> only (legacy removed by hand) -> <tmp> becomes path (open() extends it if it is short)
        <tmp> and path are in the same folder with 8.3 names, so the rename rewrites one directory sector.
        """
        home = self.path
        slash = home.rfind("/")
        if slash > 0 and not exists(home[:slash]):
            os.mkdir(home[:slash])
        legacy = self.legacy
        if legacy is None or legacy == home:
            return
        tmp = self._side("tmp")
        if exists(home):
            if exists(legacy):
                os.remove(legacy)
            return
        if exists(legacy):
            remove_quiet(tmp)
            self.status = "moving"
            self.path = legacy        # readers are served the old file until the copy is renamed
            self._serve()
            yield from self._copy(legacy, tmp)
            self.path = home
        elif not exists(tmp):
            return
        os.rename(tmp, home)
        remove_quiet(legacy)
        self.moved = True
        self._note("warning", "history: %s moved to %s", legacy, home)

    def _serve(self):
        """Serve the records of the file at self.path in whatever readable layout its header gives."""
        with open(self.path, "rb") as f:
            hdr = parse_header(f.read(HEADER_SIZE))
        if hdr is not None and not ((hdr[0] == VERSION and hdr[1] == REC_SIZE) or (hdr[0] == 1 and hdr[1] == V1_SIZE)):
            hdr = None          # another format: nothing in it passes a CRC of this one, so nothing is served
        self._use(hdr)
        self.scan()

    def _copy(self, src, dst):
        """Copy src to dst, a slice per step (a generator)."""
        buf = self._slice_buf()
        self._clean = False
        with open(src, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
        at = 0
        while True:
            with open(src, "rb") as f:
                f.seek(at)
                n = f.readinto(buf)
            with open(dst, "wb" if at == 0 else "r+b") as f:
                if at:
                    f.seek(at)
                if n:
                    f.write(buf if n == FILL else memoryview(buf)[:n])
            at += n
            self.done_bytes = at
            self.slices += 1
            if not n or at >= size:
                return          # the rename that follows is part of the last slice's step
            yield

    def _side(self, ext):
        """<path without its extension>.<ext>: a name beside the file in the same folder (8.3)."""
        slash = self.path.rfind("/")
        dot = self.path.rfind(".")
        return (self.path[:dot] if dot > slash else self.path) + "." + ext

    def _finish_migration(self):
        """Bring an interrupted migration to the state its last finished step stands for (see _migrate())."""
        new = self._side("new")
        old = self._side("old")
        have_path = exists(self.path)
        if exists(new):
            if not have_path and exists(old):
                os.rename(new, self.path)      # cut after the file was set aside: the copy is complete
                remove_quiet(old)
                self._note("warning", "history: finished an interrupted migration")
                return
            remove_quiet(new)                  # cut while copying: the original is whole, migrate again
        if exists(old):
            if have_path:
                remove_quiet(old)              # cut after the switch: only the leftover goes
            else:
                os.rename(old, self.path)      # the copy went missing: the original comes back

    def _migrate(self, hdr):
        """Copy the records of a file with other ring sizes (or version 1's 56-byte records) into a new file of
        this layout, a slice per step (a generator); self.kept: (HighRes, LowRes) records kept. The newest records
        win when a ring shrinks; sequence numbers stay, so order is kept. The original is served meanwhile.

        Power-cut safe in four drive steps, each leaving a state _finish_migration() completes:
        1. <name>.new written completely, in slices (a cut: .new is removed, the original is untouched, migrate
           again);  2. the original renamed to <name>.old;  3. .new renamed to the file;  4. .old removed.
        Steps 2-4 run in one step(), so a reader never finds the file missing.
        RAM: READ_BATCH slots of each ring and one slice at a time, never the whole file."""
        new = self._side("new")
        old = self._side("old")
        remove_quiet(new)
        self._use(hdr)
        self.scan()
        # [records of the old ring (a generator reading READ_BATCH slots per open), written, the last one]
        feeds = []
        for ring, cap in ((self.hr, self.hr_cap), (self.lr, self.lr_cap)):
            recs = ring.records(open, self.path, bytearray(READ_BATCH * ring.rsize))
            for _ in range(ring.valid - cap):
                _next(recs)          # a smaller ring keeps the newest (no firmware's layout has shrunk yet)
            feeds.append([recs, 0, None])
        hr_cap = self.hr_cap

        def put(chunk, slot):
            # The record for slot (HighRes slots first, then LowRes) packed into chunk; False: the slot stays empty.
            feed = feeds[0] if slot < hr_cap else feeds[1]
            recs = feed[0]
            r = _next(recs) if recs is not None else None
            if r is None:
                feed[0] = None
                return False
            pack_into(chunk, HR if slot < hr_cap else LR, r[0], r)
            feed[1] += 1
            feed[2] = r
            return True

        yield from self._build(new, 0, put)
        yield                   # the switch in a step of its own: no slice's stall added to its four writes
        remove_quiet(old)
        os.rename(self.path, old)
        os.rename(new, self.path)
        remove_quiet(old)
        # The new rings hold what was written, from slot 0 on: no scan needed to know their heads.
        self._use(None)
        for ring, feed in ((self.hr, feeds[0]), (self.lr, feeds[1])):
            ring.valid = feed[1]
            ring.head = feed[1] % ring.cap
            ring.last = feed[2]
            ring.next_seq = feed[2][0] + 1 if feed[2] is not None else 1
        self.kept = (feeds[0][1], feeds[1][1])

    def scan(self):
        """Find both rings' heads and newest records."""
        with self.opener(self.path, "rb") as f:
            self.hr.scan(f, self._buf)
            self.lr.scan(f, self._buf)

    def _slice_buf(self):
        buf = self._slice
        if buf is None:
            buf = self._slice = bytearray(FILL)
            self._clean = True
        return buf

    def _build(self, path, at, put=None):
        """Write path from byte at to its full size, a slice of at most FILL bytes per step (a generator): the
        header in the first slice, then zeros, or the records put(chunk, slot) packs in (a migration).

        Zeros, because a fresh FAT cluster holds whatever was there before, possibly records of a deleted history
        file with valid CRCs: a slot is only trusted once this file wrote it. The file grows slice by slice, and
        FatFs writes a slice's data before the size that covers it, so a cut never leaves unwritten bytes inside
        the file: open() finds it short and goes on from its end."""
        buf = self._slice_buf()
        mv = memoryview(buf)
        size = self.size
        while at < size:
            end = at - at % FILL + FILL      # slices end on FILL boundaries: whole blocks after a partial first
            if end > size:
                end = size
            n = end - at
            if at == 0 or put is not None:
                self._clean = False
                c0 = at // REC_SIZE          # the slice's first 64-byte chunk: 0 is the header, c the slot c - 1
                for k in range(n // REC_SIZE):
                    o = k * REC_SIZE
                    c = c0 + k
                    if c == 0:
                        mv[0:HEADER_SIZE] = header_bytes(self.hr_cap, self.lr_cap)
                    elif put is None or not put(mv[o:o + REC_SIZE], c - 1):
                        mv[o:o + REC_SIZE] = _ZERO
            elif not self._clean:
                for o in range(0, FILL, REC_SIZE):
                    mv[o:o + REC_SIZE] = _ZERO
                self._clean = True
            with open(path, "wb" if at == 0 else "r+b") as f:
                if at:
                    f.seek(at)
                f.write(buf if n == FILL else mv[:n])
            at = end
            self.done_bytes = at
            self.slices += 1
            if at < size:
                yield           # the last slice ends the work in its own step

    def _write_header(self):
        with open(self.path, "r+b") as f:
            f.write(header_bytes(self.hr.cap, self.lr.cap))

    def write(self, hr_recs, lr_recs):
        """Append records (their seq field is ignored: the ring numbers them) in one open of the file.

        One open per flush means one directory-entry update per flush.

        self.written counts the records of each list that reached the file, also when an OSError cuts it short.
        """
        self.written = [0, 0]
        if not hr_recs and not lr_recs:
            return
        if not self.ready:
            raise OSError("history: %s not complete yet" % self.path)
        buf = self._buf
        with open(self.path, "r+b") as f:
            for i, ring, recs in ((0, self.hr, hr_recs), (1, self.lr, lr_recs)):
                pos = -1
                for rec in recs:
                    if pos != ring.head:
                        f.seek(ring.offset(ring.head))
                    pack_into(buf, ring.kind, ring.next_seq, rec)
                    f.write(buf)
                    ring.last = (ring.next_seq,) + tuple(rec[1:])
                    ring.next_seq += 1
                    if ring.valid < ring.cap:
                        ring.valid += 1
                    ring.head += 1
                    if ring.head == ring.cap:
                        ring.head = 0
                        pos = -1  # wrapped: the next slot is not where the file position is
                    else:
                        pos = ring.head
                    self.written[i] += 1

    def oldest(self, kind):
        """The oldest readable record of one ring, or None: the slot at the head (a ring that has wrapped) or slot
        0 (one that has not), two reads of one slot; only torn slots there make it read on along the ring."""
        ring = self.hr if kind == HR else self.lr
        if ring.last is None:
            return None
        buf = memoryview(self._buf)[:ring.rsize]
        with self.opener(self.path, "rb") as f:
            for slot in (ring.head, 0):
                f.seek(ring.offset(slot))
                if f.readinto(buf) == ring.rsize:
                    r = ring.unpack(buf, ring.kind)
                    if r is not None:
                        return r
        return _next(ring.records(self.opener, self.path, bytearray(READ_BATCH * REC_SIZE)))

    def records(self, kind, max_seq=0xFFFFFFFF, first_day=-(1 << 30), end_day=1 << 30, ticks=False):
        """Readable records of one ring, oldest first, of days in [first_day, end_day) (a generator)."""
        ring = self.hr if kind == HR else self.lr
        return ring.records(self.opener, self.path, bytearray(READ_BATCH * REC_SIZE), max_seq, first_day,
                            end_day, ticks)


# --- JSON at the edge. Numbers are written as exact decimal text: the device's floats hold ~7 digits. ---

def date_str(day):
    """YYYY-MM-DD of a day number."""
    y, m, d = civil_from_days(day)
    return "%04d-%02d-%02d" % (y, m, d)


def kwh(dwh):
    """kWh text of an energy in 0.1 Wh: exact, four decimals (one division, one string)."""
    if dwh < 0:
        return "-%d.%04d" % divmod(-dwh, 10000)
    return "%d.%04d" % divmod(dwh, 10000)


def _hr_item(r, sep, gap):
    # r = (seq, t, day, power, off, flags, a, b, c, d); gap: seconds without a record before this quarter hour
    local = r[1] + r[4] * 60
    mins = local % 86400 // 60
    y, m, d = civil_from_days(local // 86400)
    flags = r[5]
    # One format per shape: a missing register or power is left out, never sent as zero.
    if flags & F_NO_EXPORT:
        s = '%s{"date":"%04d-%02d-%02dT%02d:%02d","timestamp":%d,"import_total_kWh":%s,"import_kW":%s' % (
            sep, y, m, d, mins // 60, mins % 60, r[1], kwh(r[6]), kwh(r[8]))
    else:
        s = ('%s{"date":"%04d-%02d-%02dT%02d:%02d","timestamp":%d,"import_total_kWh":%s,"export_total_kWh":%s,'
             '"import_kW":%s,"export_kW":%s') % (sep, y, m, d, mins // 60, mins % 60, r[1], kwh(r[6]), kwh(r[7]),
                                               kwh(r[8]), kwh(r[9]))
    if flags & F_POWER:
        s = '%s,"power_W":%d' % (s, r[3])
    if gap > 0:
        # This record closes a gap: its energy covers the quarter hours without records before it too.
        s = '%s,"gap_s":%d' % (s, gap)
    return s + "}"


def _lr_item(r, sep, _gap):
    y, m, d = civil_from_days(r[2])
    if r[5] & F_NO_EXPORT:
        return '%s{"date":"%04d-%02d-%02d","timestamp":%d,"import_total_kWh":%s,"import_kWh":%s}' % (
            sep, y, m, d, r[1], kwh(r[6]), kwh(r[8]))
    return ('%s{"date":"%04d-%02d-%02d","timestamp":%d,"import_total_kWh":%s,"export_total_kWh":%s,'
            '"import_kWh":%s,"export_kWh":%s}') % (sep, y, m, d, r[1], kwh(r[6]), kwh(r[7]), kwh(r[8]), kwh(r[9]))


def _stream(sources, first_day, end_day, item, head, step=0):
    # sources: iterables of records, oldest first, each newer than the previous source's; None is a tick
    # (a file read done) passed on as an empty chunk, which the server does not send. step: the record interval
    # (900 s for HighRes): a record more than one step after the one before it closes a gap; records of the day
    # before first_day only tell where the gap starts.
    yield head
    n = 0
    imp = 0
    exp = 0
    last_t = -1
    for src in sources:
        for r in src:
            if r is None:
                yield ""
                continue
            if r[1] <= last_t:
                continue
            prev_t = last_t
            last_t = r[1]
            if r[2] < first_day or r[2] >= end_day:
                continue
            imp += r[8]
            exp += r[9]
            gap = r[1] - prev_t - step if step and prev_t >= 0 else 0
            yield item(r, "," if n else "", gap)
            n += 1
    yield '],"count":%d,"import_total_kWh":%s,"export_total_kWh":%s}' % (n, kwh(imp), kwh(exp))


def high_res_json(sources, day):
    """Chunks of the highRes answer for one local day: its quarter hours and the day's energy. sources may start
    with the day before (for the gap before the day's first quarter hour); only the day's records are served."""
    return _stream(sources, day, day + 1, _hr_item, '{"start":"%s","days":1,"items":[' % date_str(day), 900)


def low_res_json(sources, first_day, days):
    """Chunks of the lowRes answer for days local days from first_day, and their summed energy."""
    return _stream(sources, first_day, first_day + days, _lr_item,
                   '{"start":"%s","days":%d,"items":[' % (date_str(first_day), days))
