"""Flash wear meter for the host runtime: replays the firmware's writes to CIRCUITPY into ChaN's FatFs and counts
the erases of every 4 KB flash sector.

The model (docs/history.md, "Flash budget"):
- CircuitPython's ESP32 flash layer (ports/espressif/supervisor/internal_flash.c) has no wear levelling and no
  write-back cache: every disk_write FatFs makes erases and reprograms each 4 KB sector it touches, at once.
- Which 512-byte blocks FatFs writes, and when, is FatFs's own business: every drive operation of the firmware
  (open for writing, write at an offset, flush, close, rename, remove, mkdir) is replayed into a FatFs volume
  (ChaN's FatFs through fatfs-ng) formatted as CircuitPython formats CIRCUITPY: f_mkfs(FM_FAT, au=0) of the drive's
  size, which gives FAT16 (FAT12 below 4085 clusters), 1 KB clusters, one FAT, 512 root directory entries. So data
  blocks, directory entries (the root's fixed region or a folder's own cluster) and FAT sectors land where FatFs
  puts them, and erases are counted per flash sector, not only in total.
- Before counting starts the volume holds what a fresh CIRCUITPY holds (CircuitPython's own files) plus the
  firmware's files, so the firmware's files get the cluster and directory-entry positions they would get.
Files whose name starts with "." at the drive root (.host_control/, .nvm.bin) are the host's, not the drive's.
"""

import builtins
import json
import os
import struct
import threading
import time

from fatfs import wrapper as _ff
from fatfs.diskio import RamDisk

BLOCK = 512              # FatFs sector (FILESYSTEM_BLOCK_SIZE)
SECTOR = 4096            # NOR flash erase sector
# CIRCUITPY on an 8 MB ESP32-S3 (partitions-8MB.csv): user_fs 3776 KB, extended by the 2048 KB ota_1 partition.
VOLUME_KB = 3776 + 2048
ENDURANCE = 100_000      # erase cycles a NOR sector is rated for (typical)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_FA_R = _ff.PY_FA_READ
_FA_W = _ff.PY_FA_WRITE
_MODES = (("r+", _FA_R | _FA_W | _ff.PY_FA_OPEN_EXISTING), ("w+", _FA_R | _FA_W | _ff.PY_FA_CREATE_ALWAYS),
          ("a+", _FA_R | _FA_W | _ff.PY_FA_OPEN_APPEND), ("w", _FA_W | _ff.PY_FA_CREATE_ALWAYS),
          ("a", _FA_W | _ff.PY_FA_OPEN_APPEND), ("x", _FA_W | _ff.PY_FA_CREATE_NEW))

_meter = None
_mounted = None          # fatfs-ng serves one mounted volume at a time


def _fa(mode):
    for key, flags in _MODES:
        if all(c in mode for c in key):
            return flags
    return None


def _path(rel):
    return ("/" + rel).encode("utf-8")


class _FlashDisk(RamDisk):
    """The volume's blocks in RAM; every write is reported to the Volume, which counts the erases."""

    def __init__(self, volume, kb):
        RamDisk.__init__(self, bytearray(kb * 1024), sector_size=BLOCK)
        self.volume = volume

    def write(self, sector, count, buff):
        RamDisk.write(self, sector, count, buff)
        self.volume.written(sector, count)


class Volume:
    """CIRCUITPY as FatFs formats and writes it, with erase counts per 4 KB flash sector.

    cause names the drive file an operation is for (per-file counts); on_erase(cause, kind, sector) hears each erase.
    """

    def __init__(self, kb=VOLUME_KB):
        global _mounted
        if _mounted is not None:
            _mounted.close()
        self.kb = kb
        self._counting = False   # not while formatting
        self.disk = _FlashDisk(self, kb)
        self.part = _ff.Partition(self.disk)
        self.part.mkfs()
        self.part.mount()
        _mounted = self
        b = self.disk.storage
        spc, rsv, nfat, nroot = b[13], struct.unpack_from("<H", b, 14)[0], b[16], struct.unpack_from("<H", b, 17)[0]
        fatsz = struct.unpack_from("<H", b, 22)[0]
        self.cluster = spc * BLOCK
        self.fat_start = rsv
        self.dir_start = rsv + nfat * fatsz
        self.data_start = self.dir_start + nroot * 32 // BLOCK
        total = struct.unpack_from("<H", b, 19)[0] or struct.unpack_from("<I", b, 32)[0]
        self.fat_type = "FAT12" if (total - self.data_start) // spc < 4085 else "FAT16"
        self.erases = {}         # flash sector -> erases
        self.sector_files = {}   # flash sector -> {cause: erases}
        self.dir_sectors = {}    # cause -> flash sectors erased to write its directory entry
        self.dir_lbas = set()    # blocks of folders' clusters (written by mkdir)
        self.errors = []         # (op, path, FatFs result) where the host succeeded and FatFs refused
        self.cause = None
        self.on_erase = None
        self._mkdir = None
        self._counting = True

    def close(self):
        global _mounted
        if _mounted is self:
            try:
                self.part.unmount()
            except Exception:
                pass
            _mounted = None

    # --- where a block lies ---

    def kind(self, lba):
        """"fat" (boot sector, FAT), "dir" (root directory region, a folder's cluster) or "data"."""
        if lba < self.dir_start:
            return "fat"
        if lba < self.data_start or lba in self.dir_lbas:
            return "dir"
        return "data"

    def root_dir_sectors(self):
        """Flash sectors holding the root directory region."""
        return set(range(self.dir_start * BLOCK // SECTOR, ((self.data_start * BLOCK) - 1) // SECTOR + 1))

    def describe(self, sector):
        """What a flash sector holds, in words."""
        parts = []
        for lba in range(sector * SECTOR // BLOCK, (sector + 1) * SECTOR // BLOCK):
            k = "boot sector" if lba == 0 else {"fat": "FAT", "data": "file data"}.get(self.kind(lba), "")
            if not k:
                k = "root directory" if lba < self.data_start else "folder entries"
            if k not in parts:
                parts.append(k)
        return " + ".join(parts)

    def written(self, lba, nbytes):
        if not self._counting:
            return
        if self._mkdir is not None and lba >= self.data_start:
            self._mkdir.update(range(lba, lba + max(1, nbytes // BLOCK)))
        kind = self.kind(lba)
        cause = self.cause
        for s in range(lba * BLOCK // SECTOR, (lba * BLOCK + nbytes - 1) // SECTOR + 1):
            self.erases[s] = self.erases.get(s, 0) + 1
            if cause is not None:
                files = self.sector_files.setdefault(s, {})
                files[cause] = files.get(cause, 0) + 1
                if kind == "dir":
                    self.dir_sectors.setdefault(cause, set()).add(s)
            if self.on_erase is not None:
                self.on_erase(cause, kind, s)

    def reset_counts(self):
        self.erases = {}
        self.sector_files = {}
        self.dir_sectors = {}

    # --- operations, each as FatFs does it ---

    def _err(self, op, rel, res):
        if res:
            self.errors.append((op, rel, res))
        return res

    def open(self, rel, mode):
        """A _Mirror of rel opened for writing, or None (mode not a writing one, or FatFs refused)."""
        flags = _fa(mode)
        if flags is None:
            return None
        fh = _ff.FIL_Handle()
        self.cause = rel
        if self._err("open", rel, _ff.pyf_open(fh, _path(rel), flags)):
            return None
        return _Mirror(self, rel, fh)

    def rename(self, src, dst, cause):
        self.cause = cause
        self._err("rename", src + " -> " + dst, _ff.pyf_rename(_path(src), _path(dst)))

    def remove(self, rel):
        self.cause = rel
        self._err("remove", rel, _ff.pyf_unlink(_path(rel)))

    def mkdir(self, rel):
        self.cause = rel
        self._mkdir = set()
        try:
            self._err("mkdir", rel, _ff.pyf_mkdir(_path(rel)))
            self.dir_lbas.update(self._mkdir)
        finally:
            self._mkdir = None

    def put(self, rel, data):
        """Create rel holding data (used to lay out the drive before counting)."""
        m = self.open(rel, "w")
        if m is not None:
            m.write(0, data)
            m.close()

    def hottest(self, n=5):
        """[(flash sector, erases, {cause: erases}, description)] of the n most-erased sectors."""
        top = sorted(self.erases.items(), key=lambda kv: (-kv[1], kv[0]))[:n]
        return [(s, e, dict(self.sector_files.get(s, {})), self.describe(s)) for s, e in top]


class _Mirror:
    """One file of the Volume open for writing."""

    def __init__(self, volume, rel, fh):
        self.volume = volume
        self.rel = rel
        self.fh = fh
        self.pos = None

    def write(self, pos, data):
        v = self.volume
        v.cause = self.rel
        try:
            if pos != self.pos:
                v._err("seek", self.rel, _ff.pyf_lseek(self.fh, pos))
            _ff.pyf_write(self.fh, bytes(data))
            self.pos = pos + len(data)
        except _ff.FatFSException as exc:
            v.errors.append(("write", self.rel, str(exc)))
            self.pos = None

    def sync(self):
        self.volume.cause = self.rel
        self.volume._err("sync", self.rel, _ff.pyf_sync(self.fh))

    def close(self):
        if self.fh is None:
            return
        self.volume.cause = self.rel
        self.volume._err("close", self.rel, _ff.pyf_close(self.fh))
        self.fh = None


def _device_libs():
    """(drive path, source file) of the device libraries in lib/ that are installed here (adafruit_*)."""
    import importlib.util

    out = []
    for name in ("adafruit_ticks", "adafruit_connection_manager", "adafruit_httpserver", "adafruit_minimqtt"):
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        if spec is None or not spec.origin:
            continue
        if spec.submodule_search_locations:
            base = list(spec.submodule_search_locations)[0]
            for dirpath, _dirs, files in os.walk(base):
                for f in sorted(files):
                    if f.endswith(".py"):
                        full = os.path.join(dirpath, f)
                        out.append(("lib/" + name + "/" + os.path.relpath(full, base).replace(os.sep, "/"), full))
        else:
            out.append(("lib/" + os.path.basename(spec.origin), spec.origin))
    return out


def lay_out_circuitpy(volume, firmware=True):
    """What CIRCUITPY holds before the firmware runs: CircuitPython's files from its first format
    (supervisor/shared/filesystem.c), then the firmware's files as copied onto the drive, then boot_out.txt."""
    volume.mkdir(".fseventsd")
    for rel in (".fseventsd/no_log", ".metadata_never_index", ".Trashes", ".Trash-1000"):
        volume.put(rel, b"")
    volume.mkdir("sd")
    volume.put("sd/placeholder.txt", b"SD cards mounted at /sd will hide this file from Python.\n")
    volume.put("settings.toml", b"")
    volume.put("code.py", b'print("Hello World!")\n')
    volume.mkdir("lib")
    if firmware:
        made = set()
        files = [(rel, os.path.join(ROOT, rel)) for rel in ("boot.py", "code.py", "settings.toml")]
        for pkg in ("core", "drivers", "meter", "services"):
            for dirpath, dirs, names in os.walk(os.path.join(ROOT, pkg)):
                dirs[:] = sorted(d for d in dirs if d != "__pycache__")
                for f in sorted(names):
                    if f.endswith(".py"):
                        full = os.path.join(dirpath, f)
                        files.append((os.path.relpath(full, ROOT).replace(os.sep, "/"), full))
        web = os.path.join(ROOT, "web")
        if os.path.isdir(web):
            for dirpath, dirs, names in os.walk(web):
                dirs.sort()
                for f in sorted(names):
                    full = os.path.join(dirpath, f)
                    files.append((os.path.relpath(full, ROOT).replace(os.sep, "/"), full))
        files += _device_libs()
        for rel, src in files:
            parts = rel.split("/")
            for i in range(1, len(parts)):
                d = "/".join(parts[:i])
                if d not in made and d not in ("lib",):
                    volume.mkdir(d)
                    made.add(d)
            with open(src, "rb") as f:
                volume.put(rel, f.read())
    volume.put("boot_out.txt", b"Adafruit CircuitPython 10.0.3 on 2025-10-17; ESP32-S3-DevKitC-1-N8R8 with ESP32S3\n"
                               b"Board ID:espressif_esp32s3_devkitc_1_n8r8\nUID:000000000000\n"
                               b"boot.py output:\n")
    volume.errors = [e for e in volume.errors if e[0] != "mkdir"]  # folders that exist already
    volume.reset_counts()


class FlashMeter:
    """Counters for one drive folder; install() hooks builtins.open and os so the firmware's writes are counted.

    kb: the volume's size; firmware: lay the firmware's files out on the volume first (False: only CircuitPython's).
    """

    def __init__(self, state_dir, stats_name=".host_control/flash_stats.json", kb=VOLUME_KB, firmware=True):
        self.root = os.path.abspath(state_dir)
        self.stats_path = os.path.join(self.root, stats_name)
        self.lock = threading.RLock()
        self.bytes_written = 0
        self.erases = {"data": 0, "dir": 0, "fat": 0}
        self.per_file = {}    # drive-relative path -> {"bytes": n, "erases": n}
        self.syncs = 0
        self.started = time.monotonic()
        self._last_dump = 0.0
        self._orig = {}
        self.volume = Volume(kb)
        lay_out_circuitpy(self.volume, firmware)
        self._copy_drive()
        self.volume.on_erase = self._erased

    def _copy_drive(self):
        """Files already on the drive folder go onto the volume, uncounted (a drive updated from an older layout)."""
        for dirpath, dirs, files in os.walk(self.root):
            dirs.sort()
            rel_dir = os.path.relpath(dirpath, self.root)
            if rel_dir != "." and (rel_dir.startswith(".") or rel_dir.split(os.sep)[0].startswith(".")):
                dirs[:] = []
                continue
            if rel_dir != ".":
                self.volume.mkdir(rel_dir.replace(os.sep, "/"))
            else:
                dirs[:] = [d for d in dirs if not d.startswith(".")]
            for f in sorted(files):
                rel = os.path.relpath(os.path.join(dirpath, f), self.root).replace(os.sep, "/")
                if rel.startswith("."):
                    continue
                with open(os.path.join(dirpath, f), "rb") as src:
                    data = src.read()
                self.volume.remove(rel)  # the firmware's file of the same name, if the layout made one
                self.volume.put(rel, data)
        self.volume.errors = []
        self.volume.reset_counts()

    # --- what is counted ---

    def rel(self, path):
        """Drive-relative path of a file on the drive, or None for files elsewhere and the host's own files."""
        if isinstance(path, int):
            return None
        try:
            full = os.path.abspath(os.fsdecode(path))
        except (TypeError, ValueError):
            return None
        if full != self.root and not full.startswith(self.root + os.sep):
            return None
        rel = os.path.relpath(full, self.root)
        if rel == "." or rel.startswith("."):
            return None
        return rel.replace(os.sep, "/")

    def _file(self, rel):
        f = self.per_file.get(rel)
        if f is None:
            f = self.per_file[rel] = {"bytes": 0, "erases": 0}
        return f

    def _erased(self, cause, kind, _sector):
        self.erases[kind] += 1
        if cause is not None:
            self._file(cause)["erases"] += 1

    def wrote(self, rel, n):
        with self.lock:
            self.bytes_written += n
            self._file(rel)["bytes"] += n

    def total_erases(self):
        return self.erases["data"] + self.erases["dir"] + self.erases["fat"]

    def hottest(self, n=5):
        """The n most-erased flash sectors: [(sector, erases, {file: erases}, what it holds)]."""
        with self.lock:
            return self.volume.hottest(n)

    def stats(self):
        """Counters as a plain dict (also what flash_stats.json holds)."""
        with self.lock:
            v = self.volume
            return {
                "bytes_written": self.bytes_written,
                "sector_erases": self.total_erases(),
                "erases": dict(self.erases),
                "syncs": self.syncs,
                "files": {k: dict(x) for k, x in self.per_file.items()},
                "sectors": {str(s): n for s, n in v.erases.items()},
                "sector_files": {str(s): dict(f) for s, f in v.sector_files.items()},
                "dir_sectors": {k: sorted(s) for k, s in v.dir_sectors.items()},
                "root_dir_sectors": sorted(v.root_dir_sectors()),
                "fat_errors": [list(e) for e in v.errors],
                "model": {"block": BLOCK, "sector": SECTOR, "cluster": v.cluster, "volume_kb": v.kb,
                          "fat": v.fat_type, "fat_blocks": [v.fat_start, v.dir_start],
                          "root_dir_blocks": [v.dir_start, v.data_start]},
            }

    def dump(self, force=False):
        """Write flash_stats.json (at most once a second unless forced) for bench/ to read."""
        now = time.monotonic()
        if not force and now - self._last_dump < 1.0:
            return
        self._last_dump = now
        data = self.stats()
        try:
            os.makedirs(os.path.dirname(self.stats_path), exist_ok=True)
            tmp = self.stats_path + ".tmp"
            with self._orig.get("open", builtins.open)(tmp, "w") as f:
                json.dump(data, f)
            os.replace(tmp, self.stats_path)
        except OSError:
            pass

    # --- hooks ---

    def install(self):
        """Hook builtins.open, os.remove, os.unlink, os.rename, os.mkdir and os.rmdir; idempotent."""
        if self._orig:
            return self
        self._orig = {"open": builtins.open, "remove": os.remove, "unlink": os.unlink, "rename": os.rename,
                      "mkdir": os.mkdir, "rmdir": os.rmdir}
        meter = self
        o = self._orig

        def open_(file, mode="r", *args, **kwargs):
            rel = meter.rel(file)
            if rel is None or not any(c in mode for c in "wax+"):
                return o["open"](file, mode, *args, **kwargs)
            f = o["open"](file, mode, *args, **kwargs)
            with meter.lock:
                mirror = meter.volume.open(rel, mode)
            return _CountedFile(f, meter, rel, mirror)

        def remove(path, *a, **k):
            o["remove"](path, *a, **k)
            rel = meter.rel(path)
            if rel is not None:
                with meter.lock:
                    meter.volume.remove(rel)
                meter.dump()

        def rename(src, dst, *a, **k):
            o["rename"](src, dst, *a, **k)
            rs, rd = meter.rel(src), meter.rel(dst)
            if rs is not None and rd is not None:
                with meter.lock:
                    meter.volume.rename(rs, rd, rd)
                meter.dump()

        def mkdir(path, *a, **k):
            o["mkdir"](path, *a, **k)
            rel = meter.rel(path)
            if rel is not None:
                with meter.lock:
                    meter.volume.mkdir(rel)

        def rmdir(path, *a, **k):
            o["rmdir"](path, *a, **k)
            rel = meter.rel(path)
            if rel is not None:
                with meter.lock:
                    meter.volume.remove(rel)

        builtins.open = open_
        os.remove = remove
        os.unlink = remove
        os.rename = rename
        os.mkdir = mkdir
        os.rmdir = rmdir
        return self

    def uninstall(self):
        """Restore the hooked functions (tests)."""
        if not self._orig:
            return
        builtins.open = self._orig["open"]
        os.remove = self._orig["remove"]
        os.unlink = self._orig["unlink"]
        os.rename = self._orig["rename"]
        os.mkdir = self._orig["mkdir"]
        os.rmdir = self._orig["rmdir"]
        self._orig = {}


class _CountedFile:
    """A file of the drive open for writing: each write goes to the host file and, at the same offset, to the
    FatFs volume; flush() is FatFs's f_sync, close() its f_close."""

    def __init__(self, f, meter, rel, mirror):
        self._f = f
        self._meter = meter
        self._rel = rel
        self._mirror = mirror
        self._modified = False

    def write(self, data):
        pos = self._f.tell() if "a" not in getattr(self._f, "mode", "") else None
        n = self._f.write(data)
        if n is None:
            n = len(data)
        if n:
            raw = data.encode("utf-8") if isinstance(data, str) else bytes(memoryview(data)[:n])
            if pos is None:
                pos = self._f.tell() - len(raw)
            m = self._meter
            with m.lock:
                if self._mirror is not None:
                    self._mirror.write(pos, raw)
                self._modified = True
            m.wrote(self._rel, len(raw))
        return n

    def _synced(self):
        if self._modified:
            self._modified = False
            with self._meter.lock:
                self._meter.syncs += 1
            self._meter.dump()

    def flush(self):
        self._f.flush()
        with self._meter.lock:
            if self._mirror is not None:
                self._mirror.sync()
        self._synced()

    def close(self):
        if self._f.closed:
            return
        self._f.close()
        with self._meter.lock:
            if self._mirror is not None:
                self._mirror.close()
        self._synced()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __iter__(self):
        return iter(self._f)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __getattr__(self, name):
        return getattr(self._f, name)


def install(state_dir):
    """Count flash writes under state_dir from now on; returns the FlashMeter (its stats() and dump())."""
    global _meter
    if _meter is None or _meter.root != os.path.abspath(state_dir):
        if _meter is not None:
            _meter.uninstall()
        _meter = FlashMeter(state_dir)
    _meter.install()
    import atexit
    atexit.register(_meter.dump, True)
    return _meter


def meter():
    """The installed FlashMeter or None."""
    return _meter
