"""Flash wear meter for the host runtime: counts bytes written and 4 KB sector erases on the simulated CIRCUITPY.

The model (docs/history.md, "Flash budget") follows FatFs on CircuitPython's ESP32 flash layer, which has no wear
levelling and erases the whole 4 KB sector around every block it writes:
- data: between two syncs (flush() or close()) a file collects dirty 512-byte blocks; the sync writes each run of
  consecutive dirty blocks within one 4 KB sector with one erase;
- directory: every sync of a modified file rewrites its directory entry (size, time stamp): one erase;
- FAT: a sync after which the file has a different number of clusters rewrites a FAT sector: one erase;
- creating, truncating, removing or renaming a file: one directory erase, plus one FAT erase when clusters
  are freed or allocated.
Files whose name starts with "." at the drive root (.host_control/, .nvm.bin) are the host's, not the drive's.
"""

import builtins
import json
import os
import threading
import time

BLOCK = 512
SECTOR = 4096
CLUSTER = 4096        # assumed FAT cluster size of CIRCUITPY (FatFs f_mkfs default for a volume of this size)

_meter = None


def _clusters(size):
    return (size + CLUSTER - 1) // CLUSTER


class FlashMeter:
    """Counters for one drive folder; install() hooks builtins.open and os so the firmware's writes are counted."""

    def __init__(self, state_dir, stats_name=".host_control/flash_stats.json"):
        self.root = os.path.abspath(state_dir)
        self.stats_path = os.path.join(self.root, stats_name)
        self.lock = threading.Lock()
        self.bytes_written = 0
        self.erases = {"data": 0, "dir": 0, "fat": 0}
        self.per_file = {}    # drive-relative path -> {"bytes": n, "erases": n}
        self.syncs = 0
        self.started = time.monotonic()
        self._last_dump = 0.0
        self._orig = {}

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

    def erase(self, rel, kind, n=1):
        """Count n sector erases of a kind ("data", "dir", "fat") caused by file rel."""
        if n <= 0:
            return
        with self.lock:
            self.erases[kind] += n
            self._file(rel)["erases"] += n

    def wrote(self, rel, n):
        with self.lock:
            self.bytes_written += n
            self._file(rel)["bytes"] += n

    def total_erases(self):
        return self.erases["data"] + self.erases["dir"] + self.erases["fat"]

    def stats(self):
        """Counters as a plain dict (also what flash_stats.json holds)."""
        with self.lock:
            return {
                "bytes_written": self.bytes_written,
                "sector_erases": self.total_erases(),
                "erases": dict(self.erases),
                "syncs": self.syncs,
                "files": {k: dict(v) for k, v in self.per_file.items()},
                "model": {"block": BLOCK, "sector": SECTOR, "cluster": CLUSTER},
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
            try:
                before = os.stat(file).st_size
                existed = True
            except OSError:
                before = 0
                existed = False
            f = o["open"](file, mode, *args, **kwargs)
            if not existed:
                meter.erase(rel, "dir")            # a new directory entry
            elif "w" in mode and before:
                meter.erase(rel, "dir")            # truncated: size 0 in the entry,
                meter.erase(rel, "fat")            # its cluster chain freed
                before = 0
            return _CountedFile(f, meter, rel, before)

        def remove(path, *a, **k):
            rel = meter.rel(path)
            if rel is not None:
                size = _size(path)
                o["remove"](path, *a, **k)
                meter.erase(rel, "dir")
                if size:
                    meter.erase(rel, "fat")
                meter.dump()
                return None
            return o["remove"](path, *a, **k)

        def rename(src, dst, *a, **k):
            rel = meter.rel(src) or meter.rel(dst)
            o["rename"](src, dst, *a, **k)
            if rel is not None:
                meter.erase(rel, "dir")
                meter.dump()

        def mkdir(path, *a, **k):
            o["mkdir"](path, *a, **k)
            rel = meter.rel(path)
            if rel is not None:
                meter.erase(rel, "dir")   # the parent's entry
                meter.erase(rel, "fat")   # the new directory's cluster
                meter.erase(rel, "data")  # its "." and ".." entries

        def rmdir(path, *a, **k):
            o["rmdir"](path, *a, **k)
            rel = meter.rel(path)
            if rel is not None:
                meter.erase(rel, "dir")
                meter.erase(rel, "fat")

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


def _size(path):
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


class _CountedFile:
    """A file object of the drive that records which 512-byte blocks each write dirties and counts at sync."""

    def __init__(self, f, meter, rel, size):
        self._f = f
        self._meter = meter
        self._rel = rel
        self._size = size        # size as the directory entry last recorded it
        self._dirty = set()
        self._modified = False

    def write(self, data):
        pos = self._f.tell()
        n = self._f.write(data)
        if n is None:
            n = len(data)
        if n:
            if isinstance(data, str):
                n = len(data.encode("utf-8")) if "b" not in getattr(self._f, "mode", "") else n
            first = pos // BLOCK
            last = (pos + n - 1) // BLOCK
            self._dirty.update(range(first, last + 1))
            self._modified = True
            self._meter.wrote(self._rel, n)
        return n

    def _sync(self):
        if not self._modified:
            return
        meter = self._meter
        runs = 0
        prev = None
        for b in sorted(self._dirty):
            if prev is None or b != prev + 1 or b * BLOCK // SECTOR != prev * BLOCK // SECTOR:
                runs += 1
            prev = b
        meter.erase(self._rel, "data", runs)
        meter.erase(self._rel, "dir")
        try:
            self._f.flush()
            size = os.fstat(self._f.fileno()).st_size
        except (OSError, ValueError):
            size = self._size
        if _clusters(size) != _clusters(self._size):
            meter.erase(self._rel, "fat")
        self._size = size
        self._dirty = set()
        self._modified = False
        with meter.lock:
            meter.syncs += 1
        meter.dump()

    def flush(self):
        self._f.flush()
        self._sync()

    def close(self):
        if self._f.closed:
            return
        self._sync()
        self._f.close()

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
