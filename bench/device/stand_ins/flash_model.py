"""Which 4 KB NOR sectors CircuitPython's FAT erases for a file operation, and how long the chip stalls for them.

Pure arithmetic, no I/O: the device bench (stand_ins/flashfs.py, on CircuitPython's unix port) feeds it the firmware's
drive operations, tests/test_flash_model.py checks it on CPython (and against the FatFs replay of host/flash_meter.py).

The model, as docs/history.md ("Flash budget") counts erases:
- CircuitPython's ESP32 flash layer (ports/espressif/supervisor/internal_flash.c) has no write-back cache: every
  block write FatFs makes reads the 4 KB sector, erases it and programs all of it again (16 pages of 256 bytes).
  So one block write = one sector erase + 16 page programs, and a multi-block write = that for each sector it touches.
- FatFs (512-byte blocks; FAT16 with 1 KB clusters on the 5,824 KB CIRCUITPY of an 8 MB S3) keeps one dirty block
  per open file and writes it when a write or seek moves to another block, at a block boundary, and at flush/close;
  whole blocks at a block boundary go straight to the disk, at most to the end of the cluster.
- Metadata (FatFs's one-sector window): creating or truncating a file marks its directory entry dirty; allocating a
  cluster moves the window to the FAT, which writes the dirty directory block first; flush/close of a modified file
  writes the FAT block (if clusters were added) and the directory entry. Remove: directory entry + FAT (if the file
  had clusters). Rename: one directory block in one folder, two across folders. mkdir: FAT + the new folder's
  cluster (2 blocks) + its "." entries + the parent's entry. rmdir: entry + FAT.
  This reproduces the FatFs replay exactly for the firmware's operations (tests/test_flash_model.py): a settings
  save, a log append, a history flush, the history file's creation (470 erases on an empty volume; docs/history.md's
  417 is the same creation on the volume laid out as CIRCUITPY, where clusters and entries sit elsewhere).
- A file's data is assumed to start on a 4 KB boundary with its clusters in order, so file offsets give sectors.

The chip. The reference board (ESP32-S3-DevKitC-1 N8R8) carries an ESP32-S3-WROOM-1-N8R8 module, whose datasheet
gives "8 MB Quad SPI flash" without naming the part; Espressif fits flash from several vendors (GigaDevice, XMC,
Boya, ...; esp-idf issues #7994, #18947 show XMC parts in WROOM modules). The part could not be sourced, so the figures
are a named comparable of the same class, Winbond W25Q64JV (64 Mbit, 3 V, Quad SPI, 4 KB sectors, 256-byte pages),
datasheet "AC Electrical Characteristics": tSE (sector erase 4 KB) 45 ms typical, 400 ms maximum; tPP (page program)
0.4 ms typical, 3 ms maximum. Found through secondary sources quoting the datasheet (W25Q64JV: tSE 45/400 ms; the
same table of the W25Q128JV family: tPP 0.4/3 ms; one note on the W25Q64JV gives tPP 0.8 ms typical, so the typical
program figure may be low by 6.4 ms per sector). GigaDevice's GD25Q64C is similar (tSE 50/400 ms; not used).
"""

BLOCK = 512            # FatFs sector: CircuitPython's FILESYSTEM_BLOCK_SIZE
SECTOR = 4096          # NOR erase sector
PAGE = 256             # NOR program page
PAGES_PER_SECTOR = SECTOR // PAGE
CLUSTER = 1024         # FAT16 cluster of CIRCUITPY on an 8 MB S3 (docs/history.md)
FAT_ENTRY = 2          # bytes per FAT16 entry

# W25Q64JV (see above), microseconds: (sector erase 4 KB, page program).
FIGURES = {"typ": (45000, 400), "max": (400000, 3000)}


def sector_stall_us(figure):
    """Microseconds the chip is busy for one sector written back: its erase and its 16 page programs."""
    t_se, t_pp = FIGURES[figure]
    return t_se + PAGES_PER_SECTOR * t_pp


def sectors_touched(offset, length):
    """How many 4 KB sectors the bytes [offset, offset + length) touch (0 for no bytes)."""
    if length <= 0:
        return 0
    return (offset + length - 1) // SECTOR - offset // SECTOR + 1


def stall_us(erases, figure):
    """Stall of `erases` sector write-backs (each an erase and 16 page programs) at the figure "typ" or "max"."""
    return erases * sector_stall_us(figure)


class FlashModel:
    """Counts sector erases (data, dir, fat) and page programs; on_erase(path, kind, sectors) hears each write-back."""

    def __init__(self, on_erase=None):
        self.erases = 0
        self.programs = 0
        self.by_kind = {"data": 0, "dir": 0, "fat": 0}
        self.on_erase = on_erase

    def erase(self, path, kind, sectors):
        if sectors <= 0:
            return
        self.erases += sectors
        self.programs += sectors * PAGES_PER_SECTOR
        self.by_kind[kind] += sectors
        if self.on_erase is not None:
            self.on_erase(path, kind, sectors)

    def open(self, path, mode, size):
        """An OpenFile for a file opened for writing; size: its length before, or None when it does not exist."""
        return OpenFile(self, path, mode, size)

    def remove(self, path, size):
        """os.remove of a file of `size` bytes: its entry, and the FAT when it held clusters."""
        self.erase(path, "dir", 1)
        if size:
            self.erase(path, "fat", 1)

    def rename(self, src, dst):
        """os.rename: one directory block within a folder; across folders the new entry and the old one."""
        self.erase(dst, "dir", 1 if _folder(src) == _folder(dst) else 2)

    def mkdir(self, path):
        """os.mkdir: the FAT, the new folder's cluster cleared, its "." entries, the parent's entry."""
        self.erase(path, "fat", 1)
        self.erase(path, "dir", CLUSTER // BLOCK + 2)

    def rmdir(self, path):
        self.erase(path, "dir", 1)
        self.erase(path, "fat", 1)


def _folder(path):
    return path[:path.rfind("/") + 1]


class OpenFile:
    """FatFs's state of one file open for writing: its one dirty block, its clusters, the window's dirty sector."""

    def __init__(self, model, path, mode, size):
        self.model = model
        self.path = path
        self.dirty = None          # index of the dirty 512-byte block in the file's buffer, or None
        self.buffered = None       # index of the block in the buffer
        self.modified = False      # the directory entry must be rewritten at the next sync
        self.added = 0             # clusters allocated since the last sync (FAT entries to write)
        self.window = None         # "dir" or "fat": FatFs's window sector holding unwritten changes
        existed = size is not None
        size = size or 0
        if "w" in mode or "x" in mode or not existed:
            # Created, or truncated: the entry changes now (FA_CREATE_ALWAYS marks the file modified).
            self.modified = True
            self.window = "dir"
            if existed and size:
                # The old chain is freed: the entry is written when the window moves to the FAT, the FAT when
                # FatFs moves back to the entry's sector (f_open).
                self._move("fat")
                self._move("dir")
                self.window = None
            size = 0
        self.clusters = (size + CLUSTER - 1) // CLUSTER
        self.size = size
        self.pos = size if "a" in mode else 0

    def _move(self, kind):
        """FatFs's window moves to a sector of `kind`: the dirty one it held is written first."""
        if self.window is not None and self.window != kind:
            self.model.erase(self.path, self.window, 1)
        self.window = kind

    def _flush_block(self):
        if self.dirty is not None:
            self.model.erase(self.path, "data", 1)
            self.dirty = None

    def _allocate(self, pos):
        while pos >= self.clusters * CLUSTER:
            self._move("fat")
            self.clusters += 1
            self.added += 1

    def seek(self, pos):
        """f_lseek: a dirty block is written when the new position is inside another block."""
        if pos % BLOCK and pos // BLOCK != self.buffered:
            self._flush_block()
        self.pos = pos

    def write(self, pos, n):
        """f_write of n bytes at pos."""
        if pos != self.pos:
            self.seek(pos)
        while n > 0:
            blk = pos // BLOCK
            at = pos % BLOCK
            if at == 0 or blk != self.buffered:
                self._flush_block()
            self._allocate(pos)
            if at == 0 and n >= BLOCK:
                left = (CLUSTER - pos % CLUSTER) // BLOCK      # whole blocks to the end of the cluster
                k = min(n // BLOCK, left) * BLOCK
                self.model.erase(self.path, "data", sectors_touched(pos, k))
                if self.buffered is not None and blk <= self.buffered < blk + k // BLOCK:
                    self.buffered = None
            else:
                k = min(BLOCK - at, n)
                self.buffered = blk
                self.dirty = blk
            pos += k
            n -= k
            self.modified = True
        self.pos = pos
        if pos > self.size:
            self.size = pos

    def sync(self):
        """f_sync (flush, and close): the dirty block, then the FAT and the directory entry of a modified file."""
        self._flush_block()
        if self.modified:
            if self.added:
                self._move("fat")
                # entries of the clusters added (consecutive): FAT blocks beyond the first are written as FatFs
                # walks the chain
                self.model.erase(self.path, "fat", (self.added * FAT_ENTRY - 1) // BLOCK)
            self._move("dir")
            self.model.erase(self.path, "dir", 1)
            self.window = None
        elif self.window is not None:
            self.model.erase(self.path, self.window, 1)
            self.window = None
        self.modified = False
        self.added = 0

    def close(self):
        self.sync()
