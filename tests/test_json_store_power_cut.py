"""A power cut at every block write of core/json_store.write_atomic, replayed in ChaN's FatFs (fatfs-ng) on a volume
formatted and laid out as CIRCUITPY (host/flash_meter.py): the next boot reads the old or the new document, and the
next save leaves no cluster owned by two files (a cross-link would let a later write overwrite the settings). The
same for the first save on a drive an older firmware left (path, path.new, .tmp/.bak), for a document that outgrows
its slots, and the erases a save costs (the flash sectors FatFs's block writes touch, as the device bench counts).

The cut model: a 512-byte block is written whole or not at all; a cut falls between any two blocks, also inside one
multi-block disk write. (A cut inside the erase of a 4 KB NOR sector is the platform's risk, for every file.)"""

import json
import os
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
    """A file of the mounted FatFs volume with the file calls durable_file makes; a seek is FatFs's f_lseek at once,
    as CircuitPython's (beyond the end of a file open for writing it allocates clusters and grows the size)."""

    def __init__(self, path, mode="r"):
        self.fh = ff.FIL_Handle()
        self.binary = "b" in mode
        if "+" in mode:
            flags = ff.PY_FA_READ | ff.PY_FA_WRITE | ff.PY_FA_OPEN_EXISTING
        elif "w" in mode:
            flags = ff.PY_FA_WRITE | ff.PY_FA_CREATE_ALWAYS
        else:
            flags = ff.PY_FA_READ
        self.writable = bool(flags & ff.PY_FA_WRITE)
        res = ff.pyf_open(self.fh, _p(path), flags)
        if res:
            raise OSError(2, "FatFs %s: %s" % (ff.fresult_to_name(res), path))
        info = ff.FILINFO_Handle()
        ff.pyf_stat(_p(path), info)
        self.size = 0 if "w" in mode else info.get_size()
        self.pos = 0

    def read(self, limit=-1):
        out = b""
        while limit < 0 or len(out) < limit:
            res, data = ff.pyf_read(self.fh, 4096 if limit < 0 else min(4096, limit - len(out)))[:2]
            if res or not data:
                break
            out += data
        self.pos += len(out)
        return out if self.binary else out.decode()

    def readinto(self, buf):
        data = self.read(len(buf))
        buf[:len(data)] = data
        return len(data)

    def seek(self, pos, whence=0):
        pos = pos + (self.size if whence == 2 else self.pos if whence == 1 else 0)
        if not self.writable:
            pos = min(pos, self.size)
        ff.pyf_lseek(self.fh, pos)
        self.pos = pos
        self.size = max(self.size, pos)
        return pos

    def write(self, data):
        data = bytes(data) if self.binary else data.encode()
        ff.pyf_write(self.fh, data)
        self.pos += len(data)
        self.size = max(self.size, self.pos)
        return len(data)

    def flush(self):
        ff.pyf_sync(self.fh)

    def close(self):
        if self.fh is not None:
            ff.pyf_close(self.fh)
            self.fh = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


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

    @staticmethod
    def urandom(n):
        return os.urandom(n)


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


def _copy_scheme(path, obj):
    """The write this module replaced next (core/durable_file.py before the slot file): path.new written whole, path
    truncated and rewritten, path.new removed; kept here for its erases."""
    fos = _FatOs()
    text = json.dumps(obj)
    for name in (path + ".new", path):
        with _File(name, "w") as f:
            f.write(text)
            f.flush()
    _remove(fos, path + ".new")


def _older_read(path):
    """What firmware before the slot file reads (the copy scheme's reader): path.new, path, then .tmp/.bak."""
    for suffix in (".new", "", ".tmp", ".bak"):
        try:
            with _File(path + suffix) as f:
                return json.loads(f.read())
        except (OSError, ValueError):
            continue
    return None


def _cut_and_boot(volume, base, writes, cut, save, boot_save=None):
    """The volume as a power cut after writes[:cut] leaves it, booted: (document read, cross-links then, and
    cross-links after the boot saved again with boot_save() (default save()) and wrote a file that takes fresh
    clusters, and what an older firmware reads (_older_read) at the cut and after that boot's save)."""
    image = bytearray(base)
    for off, data in writes[:cut]:
        image[off:off + len(data)] = data
    at_cut = _cross_links(image, volume)
    boot = _Image(image)
    try:
        doc = json_store.read_json_file(PATH)
        older = _older_read(PATH)
        (boot_save or save)(PATH, NEXT)
        older_after = _older_read(PATH)
        f = _File("history.bin", "w")
        f.write("h" * 20000)
        f.close()
        again = json_store.read_json_file(PATH)
    finally:
        boot.close()
    after = _cross_links(image, volume) or ([] if again == NEXT else ["settings lost: %r" % again])
    return doc, at_cut, after, (older, older_after)


def _volume(fillers):
    volume = Volume(kb=flash_meter.VOLUME_KB)
    lay_out_circuitpy(volume, firmware=True)
    for i in range(fillers):
        volume.put("F%d.TXT" % i, b"")      # one 8.3 entry each
    return volume


def _warm(save):
    def prepare(volume, warm):
        for _ in range(warm + 1):
            save(PATH, OLD)
    return prepare


def _replay(save, prepare=None, new=NEW, warms=range(4), fillers=range(16), boot_save=None, old=OLD):
    """Every (warm-up, filler entries, cut) of one save(PATH, new) after prepare(volume, warm) (default: warm + 1
    saves of OLD), the next boot saving with boot_save (default save): [(case, (document read, cross-links at the cut,
    after, older firmware's reads))].

    Filler entries before settings.json move its entries (and its siblings', three entries each) through every
    position of a 16-entry directory block, and warm-up saves leave the deleted slots that later names reuse, so
    some renames span two blocks (and the slot file's two slots take turns)."""
    prepare = prepare or _warm(save)
    out = []
    for warm in warms:
        for fill in fillers:
            volume = _volume(fill)
            prepare(volume, warm)
            assert json_store.read_json_file(PATH) == old
            base = bytes(volume.disk.storage)
            writes = _block_writes(volume, lambda: save(PATH, new))
            assert len(writes) > 1
            for cut in range(len(writes) + 1):
                out.append(((warm, fill, cut, len(writes)), _cut_and_boot(volume, base, writes, cut, save, boot_save)))
    return out


def _olders(runs):
    """The distinct (at the cut, after the next boot's save) reads of an older firmware over runs."""
    out = []
    for _case, (_d, _c, _a, older) in runs:
        if older not in out:
            out.append(older)
    return out


def _old_then_new(runs, new=NEW, old=OLD):
    """Every cut read old or new, no cut left a cross-link, and per layout: old until one block write, new after."""
    by_case = {}
    for case, (doc, at_cut, after, _older) in runs:
        assert doc in (old, new), "warm-up, fillers, cut, writes %r: %r" % (case, doc)
        assert at_cut == [] and after == [], case
        by_case.setdefault(case[:2], []).append(doc == new)
    for seen in by_case.values():
        assert not seen[0] and seen[-1] and seen == sorted(seen), seen


def test_a_cut_at_any_block_leaves_the_old_or_new_document_and_a_clean_volume(on_fatfs):
    runs = _replay(json_store.write_atomic)
    _old_then_new(runs)
    # a fresh drive never gets a plain name: an older firmware finds nothing at any cut
    assert _olders(runs) == [(None, None)]
    # the slot file is rewritten in place: the 4 blocks of NEW's 2 KB record and the directory entry's
    assert max(n for (_w, _f, _c, n), _r in runs) == 5


def test_the_rename_scheme_it_replaced_ends_cross_linked_after_one_cut(on_fatfs):
    """The hazard is real in FatFs and the replay sees it: a cut inside a rename leaves two names on one chain,
    and the next save plus one growing file end with settings and another file on the same clusters."""
    runs = _replay(_rename_scheme)
    linked_at_cut = [case for case, (_d, at_cut, _a, _o) in runs if at_cut]
    broken_after = [case for case, (_d, _c, after, _o) in runs if after]
    assert linked_at_cut and broken_after, (len(linked_at_cut), len(broken_after))


OLDER = {"device_name": "older"}
TORN = '{"device_name": "ne'
# What drives of older firmware hold, by suffix of settings.json; read_json_file takes OLD from each.
LEFT = {
    "path alone": {"": OLD},
    "path and a complete path.new (a cut save of the copy scheme)": {"": TORN, ".new": OLD},
    "path.new older than nothing": {"": OLDER, ".new": OLD},
    "legacy .tmp and .bak (a cut between the rename scheme's renames)": {".tmp": OLD, ".bak": OLDER},
    "path and legacy names": {"": OLD, ".bak": OLDER},
}


@pytest.mark.parametrize("left", sorted(LEFT))
def test_the_first_save_on_an_older_drive_migrates_with_every_cut_safe(on_fatfs, left):
    files = LEFT[left]

    def prepare(volume, _warm):
        for suffix in sorted(files):
            doc = files[suffix]
            volume.put(PATH + suffix, (doc if isinstance(doc, str) else json.dumps(doc)).encode())

    runs = _replay(json_store.write_atomic, prepare, warms=range(1), fillers=range(0, 16, 5))
    _old_then_new(runs)
    # the older firmware's view stays: at every cut, and after the next boot's save, it reads the drive as it was
    assert _olders(runs) == [(OLD, OLD)]
    # after a whole save the plain names are left as they were (frozen), beside the slot file
    volume = _volume(0)
    prepare(volume, 0)
    before = {s: _content(PATH + s) for s in files}
    json_store.write_atomic(PATH, NEW)
    fos = _FatOs()
    assert [s for s in ("", ".new", ".slots", ".tmp", ".bak") if _exists(fos, PATH + s)] == \
        [s for s in ("", ".new", ".slots", ".tmp", ".bak") if s in files or s == ".slots"]
    assert json_store.read_json_file(PATH) == NEW and _older_read(PATH) == OLD
    json_store.write_atomic(PATH, NEXT)
    assert json_store.read_json_file(PATH) == NEXT and {s: _content(PATH + s) for s in files} == before


def _content(name):
    with _File(name, "rb") as f:
        return f.read()


FROZEN = {"device_name": "before the update", "auth": "as it was"}


def _migrated(volume, warm):
    """A drive of older firmware (settings.json alone: FROZEN) after the first save here and warm more (OLD)."""
    volume.put(PATH, json.dumps(FROZEN).encode())
    for _ in range(warm + 1):
        json_store.write_atomic(PATH, OLD)


def test_saves_after_the_migration_never_touch_the_frozen_copy_with_every_cut_safe(on_fatfs):
    runs = _replay(json_store.write_atomic, _migrated, warms=range(3), fillers=range(0, 16, 3))
    _old_then_new(runs)
    assert _olders(runs) == [(FROZEN, FROZEN)]
    assert max(n for (_w, _f, _c, n), _r in runs) == 5     # as without the copy: 4 record blocks + the entry


def test_a_rollback_reads_the_frozen_copy_and_its_save_wins_back_here_with_every_cut_safe(on_fatfs):
    """Older firmware after a rollback reads FROZEN and saves NEW (the copy scheme: path.new whole, path rewritten,
    path.new removed), cut at every block: this firmware reads its own OLD until older firmware's NEW is complete,
    then NEW; its next save (NEXT) takes the plain names as found as the new frozen copy, which the older firmware
    then reads unchanged."""
    runs = _replay(_copy_scheme, _migrated, warms=range(2), fillers=range(0, 16, 5),
                   boot_save=json_store.write_atomic)
    _old_then_new(runs)
    for case, (_doc, _c, _a, (older, older_after)) in runs:
        assert older in (FROZEN, NEW) and older_after == older, case
    volume = _volume(0)
    _migrated(volume, 0)
    assert _older_read(PATH) == FROZEN
    _copy_scheme(PATH, NEW)
    assert json_store.read_json_file(PATH) == NEW
    json_store.write_atomic(PATH, NEXT)
    assert json_store.read_json_file(PATH) == NEXT and _older_read(PATH) == NEW


def test_a_plain_file_the_owner_edits_wins_and_is_frozen_by_the_next_save(on_fatfs):
    for prepare in (_migrated, lambda v, w: json_store.write_atomic(PATH, OLD)):     # old drive and fresh drive
        volume = _volume(0)
        prepare(volume, 1)
        assert json_store.read_json_file(PATH) == OLD
        with _File(PATH, "w") as f:                       # over USB
            f.write(json.dumps({"device_name": "edited"}))
        assert json_store.read_json_file(PATH) == {"device_name": "edited"}
        volume.reset_counts()
        json_store.write_atomic(PATH, NEXT)
        assert sum(volume.erases.values()) <= 4       # taking it again writes nothing more than a save
        assert json_store.read_json_file(PATH) == NEXT and _older_read(PATH) == {"device_name": "edited"}


def test_remove_all_takes_the_frozen_copy_first_with_every_cut_safe(on_fatfs):
    """A factory reset: at no cut does this firmware read the frozen copy (FROZEN: older settings and tokens) or an
    older firmware read anything but FROZEN or nothing; whole, nothing is left."""
    runs = _replay(lambda p, _o: durable_file.remove_all(p), _migrated, warms=range(2), fillers=range(0, 16, 5),
                   boot_save=json_store.write_atomic)
    for case, (doc, at_cut, after, (older, _older_after)) in runs:
        assert doc in (OLD, None) and older in (FROZEN, None) and at_cut == [] and after == [], case
    assert any(doc is None for _c, (doc, _a, _b, _o) in runs)
    volume = _volume(0)
    _migrated(volume, 0)
    durable_file.remove_all(PATH)
    fos = _FatOs()
    assert [n for n in durable_file.names(PATH) if _exists(fos, n)] == []
    assert json_store.read_json_file(PATH) is None and _older_read(PATH) is None


def test_a_damaged_slot_file_never_falls_back_to_the_frozen_copy(on_fatfs):
    """The frozen copy may be older than what the slot file lost (tokens, authentication as it was): a slot file that
    stands without a complete record reads as damaged (None, stored), never as the copy."""
    volume = _volume(0)
    _migrated(volume, 1)
    with _File(PATH + ".slots", "r+b") as f:
        f.write(b"\0" * 512)          # its header
    assert json_store.read_json_file(PATH) is None and durable_file.stored(PATH)
    json_store.write_atomic(PATH, NEXT)    # the slot file made again: NEXT, the copy still frozen
    assert json_store.read_json_file(PATH) == NEXT and _older_read(PATH) == FROZEN


BIG = {"device_name": "big", "pad": "y" * 6000}


def test_a_document_that_outgrows_its_slots_is_moved_to_a_larger_file_with_every_cut_safe(on_fatfs):
    runs = _replay(json_store.write_atomic, new=BIG, warms=range(2), fillers=range(0, 16, 5))
    _old_then_new(runs, BIG)
    assert _olders(runs) == [(None, None)]     # path.slots.new: no plain name
    runs = _replay(json_store.write_atomic, _migrated, new=BIG, warms=range(1), fillers=range(0, 16, 5))
    _old_then_new(runs, BIG)
    assert _olders(runs) == [(FROZEN, FROZEN)]


def test_a_document_too_large_is_refused_before_any_block_is_written(on_fatfs):
    volume = _volume(0)
    json_store.write_atomic(PATH, OLD)
    huge = {"device_name": "huge", "pad": "z" * json_store.MAX_CHARS}
    with pytest.raises(OSError) as got:
        assert _block_writes(volume, lambda: json_store.write_atomic(PATH, huge)) == []
    assert isinstance(got.value, durable_file.TooLarge) and "at most 16384" in str(got.value)
    assert json_store.read_json_file(PATH) == OLD


# --- erases: each block write FatFs makes erases and reprograms the 4 KB flash sectors it touches ---

def _bench_settings():
    """The settings document the device bench saves (bench/device/runner.py write_settings(), then a POST of
    ledEnable): the defaults with WiFi, MQTT, Modbus and both emulations on."""
    from core import settings

    doc = json.loads(json.dumps(settings.DEFAULTS))
    doc["wifi"]["primary"].update({"ssid": "HostNetwork", "password": "host-password"})
    doc["mqtt"].update({"enable": True, "host": "10.0.0.2", "port": 1883, "sendInterval": 1})
    doc["modbus"].update({"enable": True, "port": 502, "model": 213})
    doc["emulation"].update({"shelly": True, "shellyUdpPort": 1010, "shellyUdpPort2": 0, "sma": True})
    doc["medianFilterSize"] = 0
    doc["ledEnable"] = False
    return doc


def _largest_settings():
    """The largest settings document the rules let through: every text at its length limit in the characters JSON
    escapes longest (an emoji is 12 characters as \\ud83d\\ude00, a control character 6)."""
    from core import settings as s

    def worst(kind, a, b):
        if kind in ("text", "topic"):
            return "\U0001F600" * a
        if kind == "ssid":
            return "\x01" * 32
        if kind == "wpa":
            return "\u00e9" * 31 + '"'
        if kind == "secret":
            return "\x01" * a
        if kind == "host":
            return ".".join(["a" * 63] * 3 + ["a" * 61])
        if kind == "url":
            return "https://" + "a" * 180 + ".example/"
        if kind == "ipv4list":
            return ",".join(["223.255.255.254"] * a)
        if kind == "ipv4":
            return "223.255.255.254"
        if kind == "mask":
            return "255.255.255.252"
        if kind == "money":
            return "-%d.%s" % (b // 10 ** a, "0" * a)
        if kind == "int":
            return b
        if kind == "tou":
            return [{"days": [1, 2, 3, 4, 5, 6, 7], "from": "00:00", "to": "24:00", "price": "-100.000000"}] * a
        return None

    doc = s._copy(s.DEFAULTS)
    from core.settings_check import SCHEMA

    for key, (kind, a, b) in SCHEMA.items():
        value = worst(kind, a, b)
        if value is not None:
            norm, err = s.check(key, value, lambda z: True)
            assert err is None, (key, err)
            s._set(doc, key, norm)
    return doc


def _erases(volume, save, doc):
    """Flash sectors erased (and reprogrammed) by save(PATH, doc)."""
    volume.reset_counts()
    save(PATH, doc)
    return sum(volume.erases.values())


def test_erases_per_save(on_fatfs):
    """A settings save of the device bench's document: the copy scheme's 13 erases (668 S3 ms of stall at the
    flash's typical figure) become one per KB of record plus the directory entry; the largest settings document
    the rules allow still fits the store."""
    doc = _bench_settings()
    largest = _largest_settings()
    assert len(json.dumps(largest)) <= json_store.MAX_CHARS
    from core.settings import STORE_ROOM

    got = {}
    for name, save in (("copy scheme", _copy_scheme),
                       ("slot file", lambda p, o: json_store.write_atomic(p, o, STORE_ROOM))):
        volume = _volume(0)
        volume.put("boot_out.txt", b"")      # as on a drive in use
        got[name + ", first save"] = _erases(volume, save, doc)
        got[name] = max(_erases(volume, save, doc) for _ in range(4))
        got[name + ", largest settings, first"] = _erases(volume, save, largest)
        got[name + ", largest settings"] = max(_erases(volume, save, largest) for _ in range(4))
        got[name + ", back to the bench's"] = max(_erases(volume, save, doc) for _ in range(4))
    volume = _volume(0)
    volume.put(PATH, json.dumps(doc).encode())
    got["migration from path"] = _erases(volume, lambda p, o: json_store.write_atomic(p, o, STORE_ROOM), doc)
    # settings.json stays, frozen, for a rollback: the saves after the migration cost what saves on a fresh drive do
    got["slot file after the migration"] = max(
        _erases(volume, lambda p, o: json_store.write_atomic(p, o, STORE_ROOM), doc) for _ in range(4))
    print("erases per save:", json.dumps(got, indent=1))
    assert got["copy scheme"] == 13
    assert got["slot file"] <= 4, got                          # 2 KB record: 2 clusters + the directory entry
    assert got["slot file, back to the bench's"] <= 4, got
    assert got["slot file, largest settings, first"] <= 10, got   # 9 KB record, the slots made large enough at first
    assert got["slot file, largest settings"] <= 10, got
    assert got["migration from path"] <= 10, got
    assert got["slot file after the migration"] <= 4 and got["slot file after the migration"] == got["slot file"], got
