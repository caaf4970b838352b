"""The device bench's flash model (bench/device/stand_ins/flash_model.py): sectors by offset, FatFs's block and
metadata writes, typical and maximum stalls; and the same erase counts as the FatFs replay of host/flash_meter.py."""

import importlib.util
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_spec = importlib.util.spec_from_file_location(
    "flash_model", os.path.join(ROOT, "bench", "device", "stand_ins", "flash_model.py"))
fm = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fm)


def erases(ops):
    """Erases of a list of operations on a fresh model: ("open", path, mode, size) opens (and is then the file),
    ("write", pos, n), ("sync",), ("close",), ("remove", path, size), ("rename", a, b), ("mkdir", path)."""
    m = fm.FlashModel()
    f = None
    for op in ops:
        if op[0] == "open":
            f = m.open(op[1], op[2], op[3])
        elif op[0] == "write":
            f.write(op[1], op[2])
        elif op[0] == "sync":
            f.sync()
        elif op[0] == "close":
            f.close()
        elif op[0] == "remove":
            m.remove(op[1], op[2])
        elif op[0] == "rename":
            m.rename(op[1], op[2])
        elif op[0] == "mkdir":
            m.mkdir(op[1])
    return m


def test_sectors_touched_by_offset_and_length():
    assert fm.sectors_touched(0, 0) == 0
    assert fm.sectors_touched(0, 1) == 1
    assert fm.sectors_touched(0, 4096) == 1
    assert fm.sectors_touched(0, 4097) == 2
    assert fm.sectors_touched(4095, 2) == 2
    assert fm.sectors_touched(4096, 4096) == 1
    assert fm.sectors_touched(100, 3 * 4096) == 4


def test_stall_per_sector_typical_and_maximum():
    # W25Q64JV: tSE 45 / 400 ms, tPP 0.4 / 3 ms, 16 pages per 4 KB sector written back
    assert fm.sector_stall_us("typ") == 45000 + 16 * 400
    assert fm.sector_stall_us("max") == 400000 + 16 * 3000
    assert fm.stall_us(10, "typ") == 514000
    assert fm.stall_us(10, "max") == 4480000
    assert fm.stall_us(0, "max") == 0


def test_programs_are_sixteen_pages_per_erase():
    m = erases([("open", "logs/log.csv", "a", 80), ("write", 80, 80), ("close",)])
    assert m.erases == 2
    assert m.programs == 32


def test_a_small_append_is_its_block_and_the_entry():
    m = erases([("open", "logs/log.csv", "a", 80), ("write", 80, 80), ("close",)])
    assert m.by_kind == {"data": 1, "dir": 1, "fat": 0}


def test_an_append_into_a_new_cluster_writes_the_fat():
    m = erases([("open", "logs/log.csv", "a", 1000), ("write", 1000, 100), ("close",)])
    # block 1 (512..1023) dirty, block 2 in the new cluster: two data blocks, FAT, entry
    assert m.by_kind == {"data": 2, "dir": 1, "fat": 1}


def test_writes_in_one_block_cost_one_block_write():
    m = erases([("open", "h.bin", "r+b", 238912)] + [("write", 64064 + 64 * i, 64) for i in range(4)] + [("close",)])
    assert m.by_kind["data"] == 1


def test_records_across_a_block_boundary_cost_two_blocks():
    m = erases([("open", "h.bin", "r+b", 238912)] + [("write", 64448 + 64 * i, 64) for i in range(4)] + [("close",)])
    assert m.by_kind["data"] == 2


def test_whole_blocks_go_direct_up_to_the_cluster_end():
    m = erases([("open", "a.bin", "w", None), ("write", 0, 3000), ("close",)])
    # 1 KB + 1 KB + 512 B direct, 440 B buffered: 4 data writes; entry at the first cluster, FAT and entry at close
    assert m.by_kind == {"data": 4, "dir": 2, "fat": 1}


def test_metadata_of_create_truncate_remove_rename_mkdir():
    assert erases([("open", "e", "w", None), ("close",)]).erases == 1             # an empty new file
    assert erases([("open", "s", "w", 600), ("write", 0, 600), ("close",)]).erases == 6   # truncated, rewritten
    assert erases([("open", "s", "w", None), ("write", 0, 600), ("close",)]).erases == 5  # created, written
    assert erases([("remove", "a", 3000)]).by_kind == {"data": 0, "dir": 1, "fat": 1}
    assert erases([("remove", "a", 0)]).erases == 1
    assert erases([("rename", "logs/a", "logs/b")]).erases == 1
    assert erases([("rename", "logs/a", "history/b")]).erases == 2
    assert erases([("mkdir", "logs")]).erases == 5


def test_flush_then_close_writes_nothing_more():
    m = erases([("open", "s.new", "w", None), ("write", 0, 700), ("sync",), ("close",)])
    assert m.erases == 5


def test_the_history_file_creation():
    size = 64 + (3000 + 732) * 64
    ops = [("open", "history/history.bin", "wb", None), ("write", 0, 64)]
    pos = 64
    while pos < size:
        k = min(512, size - pos)
        ops.append(("write", pos, k))
        pos += k
    ops.append(("close",))
    m = erases(ops)
    assert m.by_kind["data"] == (size + 511) // 512      # every block once
    assert m.erases == 470
    assert fm.stall_us(m.erases, "typ") == 470 * 51400


# --- the same operations replayed in ChaN's FatFs (host/flash_meter.py), where fatfs-ng is installed ---

def _replay(ops):
    flash_meter = pytest.importorskip("host.flash_meter")
    v = flash_meter.Volume()
    v.mkdir("logs")
    v.mkdir("history")
    v.reset_counts()
    f = None
    for op in ops:
        if op[0] == "open":
            f = v.open(op[1], op[2])
        elif op[0] == "write":
            f.write(op[1], b"x" * op[2])
        elif op[0] == "sync":
            f.sync()
        elif op[0] == "close":
            f.close()
        elif op[0] == "remove":
            v.remove(op[1])
        elif op[0] == "rename":
            v.rename(op[1], op[2], op[2])
        elif op[0] == "mkdir":
            v.mkdir(op[1])
    return sum(v.erases.values())


SEQUENCES = {
    "settings save (write_text: .new, rewrite, remove .new)": [
        ("open", "settings.json", "w", None), ("write", 0, 700), ("close",),
        ("open", "settings.json.new", "w", None), ("write", 0, 720), ("sync",), ("close",),
        ("open", "settings.json", "w", 700), ("write", 0, 720), ("sync",), ("close",),
        ("remove", "settings.json.new", 720)],
    "log: first line, then appends": [
        ("open", "logs/log.csv", "a", None), ("write", 0, 28), ("write", 28, 2100), ("close",),
        ("open", "logs/log.csv", "a", 2128), ("write", 2128, 2100), ("close",)],
    "history flush, both rings": [
        ("open", "history/history.bin", "wb", None), ("write", 0, 8192), ("close",),
        ("open", "history/history.bin", "r+b", 8192), ("write", 64 + 64 * 6, 64), ("write", 64 + 64 * 7, 64),
        ("write", 64 + 64 * 8, 64), ("write", 64 + 64 * 100, 64), ("close",)],
    "rename and remove": [
        ("open", "logs/a.csv", "w", None), ("write", 0, 3000), ("close",),
        ("rename", "logs/a.csv", "logs/b.csv"), ("rename", "logs/b.csv", "history/b.csv"),
        ("remove", "history/b.csv", 3000), ("mkdir", "tariff")],
}


@pytest.mark.parametrize("name", sorted(SEQUENCES))
def test_same_erases_as_the_fatfs_replay(name):
    ops = SEQUENCES[name]
    # The model starts from a file's first open; the replay's volume needs the file there before "w" over it.
    assert erases(ops).erases == _replay(ops)
