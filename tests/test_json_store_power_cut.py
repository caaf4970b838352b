"""A power cut at every block write of core/json_store.write_atomic, replayed in ChaN's FatFs (fatfs-ng) on a volume
formatted and laid out as CIRCUITPY (host/flash_meter.py): the next boot reads the old or the new document, and the
next save leaves no cluster owned by two files (a cross-link would let a later write overwrite the settings).

The cut model: a 512-byte block is written whole or not at all; a cut falls between any two blocks, also inside one
multi-block disk write. (A cut inside the erase of a 4 KB NOR sector is the platform's risk, for every file.)"""

import json
import struct

import pytest
from fatfs import wrapper as ff
from fatfs.diskio import RamDisk

from core import durable_file, json_store
from host import flash_meter
from host.flash_meter import BLOCK, Volume, lay_out_circuitpy

PATH = "settings.json"
OLD = {"device_name": "old", "ledEnable": True, "mqtt": {"host": "broker.lan", "port": 1883}}
NEW = {"device_name": "new", "ledEnable": False, "mqtt": {"host": "10.0.0.9", "port": 8883}, "pad": "x" * 1500}
NEXT = {"device_name": "next", "ledEnable": True}


def _p(path):
    return ("/" + path).encode()


class _File:
    """A file of the mounted FatFs volume with the text-file calls json_store makes."""

    def __init__(self, path, mode="r"):
        self.fh = ff.FIL_Handle()
        flags = ff.PY_FA_READ if mode == "r" else ff.PY_FA_WRITE | ff.PY_FA_CREATE_ALWAYS
        res = ff.pyf_open(self.fh, _p(path), flags)
        if res:
            raise OSError(2, "FatFs %s: %s" % (ff.fresult_to_name(res), path))

    def read(self, limit=-1):
        out = b""
        while limit < 0 or len(out) < limit:
            res, data = ff.pyf_read(self.fh, 4096)[:2]
            if res or not data:
                break
            out += data
        return (out if limit < 0 else out[:limit]).decode()

    def write(self, text):
        ff.pyf_write(self.fh, text.encode())

    def flush(self):
        ff.pyf_sync(self.fh)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        ff.pyf_close(self.fh)


class _FatOs:
    """The os calls json_store makes, on the mounted FatFs volume (refusals raise OSError as on the device)."""

    @staticmethod
    def _check(res, what):
        if res:
            raise OSError(2, "FatFs %s: %s" % (ff.fresult_to_name(res), what))

    def stat(self, path):
        self._check(ff.pyf_stat(_p(path), ff.FILINFO_Handle()), path)

    def rename(self, src, dst):
        self._check(ff.pyf_rename(_p(src), _p(dst)), src + " -> " + dst)

    def remove(self, path):
        self._check(ff.pyf_unlink(_p(path)), path)

    def sync(self):
        pass  # FatFs wrote its window at f_sync/f_close/f_rename already


@pytest.fixture
def on_fatfs(monkeypatch):
    """json_store's file calls go to whichever FatFs volume is mounted."""
    fos = _FatOs()
    monkeypatch.setattr(durable_file, "open", _File, raising=False)
    monkeypatch.setattr(durable_file, "os", fos)
    monkeypatch.setattr(durable_file, "remove_quiet", lambda p: _remove(fos, p))
    yield
    if flash_meter._mounted is not None:
        flash_meter._mounted.close()


def _exists(fos, path):
    try:
        fos.stat(path)
        return True
    except OSError:
        return False


def _remove(fos, path):
    try:
        fos.remove(path)
    except OSError:
        pass


class _Image:
    """A volume image mounted by FatFs on its own (the next boot)."""

    def __init__(self, storage):
        if flash_meter._mounted is not None:
            flash_meter._mounted.close()
        self.disk = RamDisk(storage, sector_size=BLOCK)
        self.part = ff.Partition(self.disk)
        self.part.mount()

    def close(self):
        self.part.unmount()


def _cross_links(image, volume):
    """[(cluster, first owner, second owner)] for clusters that two directory entries' FAT16 chains share."""
    owner = {}
    shared = []
    nclusters = (len(image) // BLOCK - volume.data_start) * BLOCK // volume.cluster + 2

    def fat(c):
        return struct.unpack_from("<H", image, volume.fat_start * BLOCK + 2 * c)[0]

    def chain(start):
        c, seen = start, 0
        while 2 <= c < nclusters and seen < nclusters:
            yield c
            c = fat(c)
            seen += 1

    def entries(blocks):
        for lba in blocks:
            for off in range(lba * BLOCK, (lba + 1) * BLOCK, 32):
                e = image[off:off + 32]
                if e[0] == 0:
                    return
                if e[0] == 0xE5 or e[11] == 0x0F or e[11] & 0x08 or e[0:2] in (b". ", b".."):
                    continue
                yield e[0:11].decode("latin-1").strip(), e[11], struct.unpack_from("<H", e, 26)[0]

    def cluster_blocks(c):
        first = volume.data_start + (c - 2) * volume.cluster // BLOCK
        return range(first, first + volume.cluster // BLOCK)

    def walk(blocks, where):
        for name, attr, start in list(entries(blocks)):
            for c in chain(start):
                if c in owner:
                    shared.append((c, owner[c], where + name))
                else:
                    owner[c] = where + name
            if attr & 0x10:
                walk([b for c in chain(start) for b in cluster_blocks(c)], where + name + "/")

    walk(range(volume.dir_start, volume.data_start), "/")
    return shared


def _block_writes(volume, run):
    """Every 512-byte block write (offset, bytes) the volume's disk takes while run() runs."""
    got = []
    disk = volume.disk
    plain = disk.write

    def write(sector, count, buff):
        data = bytes(buff[:count])
        for i in range(0, count, BLOCK):
            got.append(((sector * BLOCK) + i, data[i:i + BLOCK]))
        plain(sector, count, buff)

    disk.write = write
    try:
        run()
    finally:
        disk.write = plain
    return got


def _rename_scheme(path, obj):
    """The write this module replaced (core/json_store.py before it): .tmp written, path renamed to .bak, .tmp
    renamed to path, .bak removed; kept here to show what the replay finds in it."""
    fos = _FatOs()
    tmp, bak = path + ".tmp", path + ".bak"
    with _File(tmp, "w") as f:
        f.write(json.dumps(obj))
        f.flush()
    _remove(fos, bak)
    if _exists(fos, path):
        fos.rename(path, bak)
    fos.rename(tmp, path)
    _remove(fos, bak)


def _cut_and_boot(volume, base, writes, cut, save):
    """The volume as a power cut after writes[:cut] leaves it, booted: (document read, cross-links then, and
    cross-links after the boot saved again with save() and wrote a file that takes fresh clusters)."""
    image = bytearray(base)
    for off, data in writes[:cut]:
        image[off:off + len(data)] = data
    at_cut = _cross_links(image, volume)
    boot = _Image(image)
    try:
        doc = json_store.read_json_file(PATH)
        save(PATH, NEXT)
        f = _File("history.bin", "w")
        f.write("h" * 20000)
        f.__exit__()
        again = json_store.read_json_file(PATH)
    finally:
        boot.close()
    return doc, at_cut, _cross_links(image, volume) or ([] if again == NEXT else ["settings lost: %r" % again])


def _replay(save):
    """Every (warm-up saves, filler entries, cut) of one save(PATH, NEW) after save(PATH, OLD): [(case, result)].

    Filler entries before settings.json move its entries (and its siblings', three entries each) through every
    position of a 16-entry directory block, and warm-up saves leave the deleted slots that later names reuse, so
    some renames span two blocks."""
    out = []
    for warm in range(4):
        for fillers in range(16):
            volume = Volume(kb=flash_meter.VOLUME_KB)
            lay_out_circuitpy(volume, firmware=True)
            for i in range(fillers):
                volume.put("F%d.TXT" % i, b"")      # one 8.3 entry each
            for _ in range(warm + 1):
                save(PATH, OLD)
            assert json_store.read_json_file(PATH) == OLD
            base = bytes(volume.disk.storage)
            writes = _block_writes(volume, lambda: save(PATH, NEW))
            assert len(writes) > 4
            for cut in range(len(writes) + 1):
                out.append(((warm, fillers, cut, len(writes)), _cut_and_boot(volume, base, writes, cut, save)))
    return out


def test_a_cut_at_any_block_leaves_the_old_or_new_document_and_a_clean_volume(on_fatfs):
    runs = _replay(json_store.write_atomic)
    for case, (doc, at_cut, after) in runs:
        assert doc in (OLD, NEW), "warm-ups, fillers, cut, writes %r: %r" % (case, doc)
        assert at_cut == [] and after == [], case
    by_case = {}
    for (warm, fillers, _cut, _n), (doc, _a, _b) in runs:
        by_case.setdefault((warm, fillers), []).append(doc["device_name"])
    for seen in by_case.values():   # old until one block write, new from then on
        assert seen[0] == "old" and seen[-1] == "new" and seen == sorted(seen, key=("old", "new").index), seen


def test_the_rename_scheme_it_replaced_ends_cross_linked_after_one_cut(on_fatfs):
    """The hazard is real in FatFs and the replay sees it: a cut inside a rename leaves two names on one chain,
    and the next save plus one growing file end with settings and another file on the same clusters."""
    runs = _replay(_rename_scheme)
    linked_at_cut = [case for case, (_d, at_cut, _a) in runs if at_cut]
    broken_after = [case for case, (_d, _c, after) in runs if after]
    assert linked_at_cut and broken_after, (len(linked_at_cut), len(broken_after))
