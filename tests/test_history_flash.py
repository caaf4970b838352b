"""The host's flash wear meter (host/flash_meter.py: the firmware's writes replayed into FatFs, erases counted per
4 KB flash sector) and what the history costs under it."""

import json
import os

import pytest

from host import flash_meter
from host.flash_meter import ENDURANCE, FlashMeter
from services.history import store as hs


@pytest.fixture
def meter(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    m = FlashMeter(str(tmp_path)).install()
    yield m
    m.uninstall()


def _delta(meter, before):
    after = meter.stats()["erases"]
    return {k: after[k] - before[k] for k in after}


def test_the_volume_is_formatted_like_circuitpy(meter):
    m = meter.stats()["model"]
    # f_mkfs(FM_FAT, au=0) of 5824 KB: 1 KB clusters, FAT16, one FAT, 512 root entries (32 blocks)
    assert (m["volume_kb"], m["fat"], m["cluster"]) == (5824, "FAT16", 1024)
    assert m["root_dir_blocks"][1] - m["root_dir_blocks"][0] == 32
    assert meter.stats()["sectors"] == {}          # the layout before counting is not counted


def test_new_file_counts_directory_data_and_fat(meter):
    with open("a.bin", "wb") as f:
        f.write(b"x" * 100)
    st = meter.stats()
    assert st["bytes_written"] == 100
    # new entry, one data block, the entry again at close (size), first cluster in the FAT
    assert st["erases"] == {"data": 1, "dir": 2, "fat": 1}
    assert st["files"]["a.bin"]["erases"] == 4
    # per sector: both directory writes hit the root directory's first sector
    assert st["dir_sectors"]["a.bin"] == [st["root_dir_sectors"][0]]
    assert sum(st["sectors"].values()) == 4


def test_each_block_write_erases_its_flash_sector(meter):
    with open("ring.bin", "wb") as f:
        f.write(bytes(16384))
    before = meter.stats()["erases"]
    s0 = dict(meter.stats()["sectors"])
    with open("ring.bin", "r+b") as f:
        f.seek(100)
        f.write(bytes(56))        # inside block 0
        f.seek(4090)
        f.write(bytes(12))        # straddles blocks 7 and 8
    # three block writes (0, 7, 8), each erasing its 4 KB sector: no write-back cache on the ESP32 flash layer
    assert _delta(meter, before) == {"data": 3, "dir": 1, "fat": 0}
    changed = {k: v - s0.get(k, 0) for k, v in meter.stats()["sectors"].items() if v != s0.get(k, 0)}
    assert sum(changed.values()) == 4


def test_appends_grow_the_chain(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    m = FlashMeter(str(tmp_path), firmware=False).install()   # a fresh drive: the chain's FAT entries in one block
    try:
        with open("log.csv", "a") as f:
            f.write("x" * 10)
        before = m.stats()["erases"]
        with open("log.csv", "a") as f:
            f.write("y" * 5000)       # four more 1 KB clusters
        assert _delta(m, before) == {"data": 7, "dir": 1, "fat": 1}   # 512+512+1024+1024+1024+512+512
    finally:
        m.uninstall()


def test_each_flush_is_a_sync(meter):
    f = open("s.json", "w")
    f.write("{}")
    f.flush()
    f.write("  ")
    f.close()
    assert meter.stats()["syncs"] == 2 and meter.stats()["erases"]["dir"] == 3


def test_truncate_remove_rename_as_fatfs_does_them(meter):
    with open("s.json", "w") as f:
        f.write("a" * 10)
    before = meter.stats()["erases"]
    with open("s.json", "w") as f:     # truncated (entry + chain freed) and written again (chain, data, entry)
        f.write("b" * 10)
    assert _delta(meter, before) == {"data": 1, "dir": 2, "fat": 2}
    before = meter.stats()["erases"]
    os.rename("s.json", "t.json")
    assert _delta(meter, before) == {"data": 0, "dir": 1, "fat": 0}   # same folder, same sector: one write
    before = meter.stats()["erases"]
    os.remove("t.json")
    assert _delta(meter, before) == {"data": 0, "dir": 1, "fat": 1}


def test_a_folder_keeps_its_entries_off_the_root_directory(meter):
    os.mkdir("history")
    with open("history/h.bin", "wb") as f:
        f.write(bytes(2048))
    with open("root.json", "w") as f:
        f.write("{}")
    st = meter.stats()
    root = set(st["root_dir_sectors"])
    assert set(st["dir_sectors"]["root.json"]) <= root
    assert not set(st["dir_sectors"]["history/h.bin"]) & root


def test_rename_across_folders_writes_two_directory_sectors(meter):
    # Why the history is moved by copy: between these two writes both names hold one cluster chain.
    with open("h.bin", "wb") as f:
        f.write(bytes(100))
    os.mkdir("history")
    before = meter.stats()["erases"]
    os.rename("h.bin", "history/h.bin")
    assert _delta(meter, before)["dir"] == 2


def test_what_fatfs_refuses_is_reported(meter):
    # The host renames onto an existing file; FatFs (and so the device) refuses.
    for name in ("a.txt", "b.txt"):
        with open(name, "w") as f:
            f.write(name)
    os.rename("a.txt", "b.txt")
    assert meter.stats()["fat_errors"] == [["rename", "a.txt -> b.txt", 8]]   # FR_EXIST


def test_reads_and_host_files_are_not_counted(meter, tmp_path):
    with open("r.bin", "wb") as f:
        f.write(b"1")
    n = meter.stats()["sector_erases"]
    with open("r.bin", "rb") as f:
        f.read()
    os.makedirs(".host_control", exist_ok=True)
    with open(os.path.join(".host_control", "x"), "w") as f:
        f.write("ignored")
    outside = tmp_path.parent / ("outside-%d.txt" % os.getpid())
    with open(outside, "w") as f:
        f.write("ignored")
    outside.unlink()
    assert meter.stats()["sector_erases"] == n


def test_files_already_on_the_drive_are_laid_out_uncounted(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "history.bin").write_bytes(bytes(3000))
    m = FlashMeter(str(tmp_path)).install()
    try:
        assert m.stats()["sector_erases"] == 0
        os.remove("history.bin")                   # FatFs knows the file: no refusal
        assert m.stats()["fat_errors"] == [] and m.stats()["erases"]["fat"] >= 1
    finally:
        m.uninstall()


def test_stats_file_for_bench(meter, tmp_path):
    with open("h.bin", "wb") as f:
        f.write(b"1")
    meter.dump(force=True)
    data = json.loads((tmp_path / ".host_control" / "flash_stats.json").read_text())
    assert data["sector_erases"] == meter.stats()["sector_erases"] and "h.bin" in data["files"]
    assert sum(data["sectors"].values()) == data["sector_erases"]


def test_install_is_what_the_runner_calls(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    m = flash_meter.install(str(tmp_path))
    try:
        assert flash_meter.meter() is m
        with open("x", "w") as f:
            f.write("1")
        assert m.stats()["bytes_written"] == 1
    finally:
        m.uninstall()


def test_history_costs_one_directory_write_per_hourly_flush(meter):
    from bench.bench_history import flash_inprocess

    meter.uninstall()   # the bench installs its own meter
    fl = flash_inprocess(days=3, flush_minutes=60)
    assert fl["by_kind"]["dir"] == 24            # the file's entry, once per flush
    assert 24 <= fl["by_kind"]["data"] <= 40     # a batch of 4-5 records: one or two 512-byte blocks
    assert fl["by_kind"]["fat"] == 0             # the file is preallocated: the chain never changes
    assert fl["bytes_per_day"] == 97 * hs.REC_SIZE   # 96 quarter hours and one day, 64 bytes each (v2: cost)
    fl2 = flash_inprocess(days=3, flush_minutes=120)
    assert fl2["by_kind"]["dir"] == 12


def test_a_year_at_the_defaults_stays_under_the_ten_year_limit(meter):
    from bench.bench_history import flash_year

    meter.uninstall()   # the bench installs its own meter
    yr = flash_year(days=365)
    assert yr["fat_errors"] == []
    # The most-erased 4 KB sector of the whole drive: under 10,000 erases a year is over 10 years to 100,000.
    assert yr["worst_per_year"] < ENDURANCE / 10
    # History's directory entry, rewritten at every flush, is in its folder's cluster: neither in the root
    # directory nor in a sector where another file's entry is.
    own = set(yr["dir_sectors"]["history/history.bin"])
    assert own and not own & set(yr["root_dir_sectors"])
    for name, sectors in yr["dir_sectors"].items():
        if not name.startswith("history"):
            assert not own & set(sectors), name
    # The root directory (code.py's and boot.py's entries) is left alone: the flash log has a folder of its own too.
    for sector in yr["root_dir_sectors"]:
        assert yr["sectors_per_year"].get(sector, 0) < 1000


def test_the_store_works_under_a_hooked_open(meter):
    # The host runner installs the meter before code.py imports the store: open is then a Python function.
    from services.history.store import HR, HistoryStore

    st = HistoryStore("history.bin")
    assert st.open() == "created"
    st.write([(0, 1000, 1, 5, 60, 1, 10, 0, 1, 0)], [])
    again = HistoryStore("history.bin")
    assert again.open() == "ok" and [r[1] for r in again.records(HR)] == [1000]
    assert meter.stats()["files"]["history.bin"]["erases"] > 0
