"""The host's flash wear meter (host/flash_meter.py) and what the history costs under it."""

import json
import os

import pytest

from host import flash_meter
from host.flash_meter import FlashMeter


@pytest.fixture
def meter(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    m = FlashMeter(str(tmp_path)).install()
    yield m
    m.uninstall()


def test_new_file_counts_directory_data_and_fat(meter):
    with open("a.bin", "wb") as f:
        f.write(b"x" * 100)
    st = meter.stats()
    assert st["bytes_written"] == 100
    # new entry, one data block, the entry again at close (size), first cluster in the FAT
    assert st["erases"] == {"data": 1, "dir": 2, "fat": 1}
    assert st["files"]["a.bin"]["erases"] == 4


def test_rewrite_in_place_costs_data_blocks_and_the_directory_entry_only(meter):
    with open("ring.bin", "wb") as f:
        f.write(bytes(16384))
    before = meter.stats()["erases"]
    with open("ring.bin", "r+b") as f:
        f.seek(100)
        f.write(bytes(56))        # inside block 0
        f.seek(4090)
        f.write(bytes(12))        # straddles blocks 7 and 8 = two 4 KB sectors
    after = meter.stats()["erases"]
    assert after["data"] - before["data"] == 3   # block 0 (sector 0), blocks 7|8 split by the sector edge
    assert after["dir"] - before["dir"] == 1
    assert after["fat"] == before["fat"]          # same size, same clusters


def test_appends_grow_the_chain(meter):
    with open("log.csv", "a") as f:
        f.write("x" * 10)
    fat0 = meter.stats()["erases"]["fat"]
    with open("log.csv", "a") as f:
        f.write("y" * 5000)       # crosses into a second cluster
    assert meter.stats()["erases"]["fat"] == fat0 + 1


def test_each_flush_is_a_sync(meter):
    f = open("s.json", "w")
    f.write("{}")
    f.flush()
    f.write("  ")
    f.close()
    assert meter.stats()["syncs"] == 2 and meter.stats()["erases"]["dir"] == 3


def test_truncate_remove_rename_count_directory_and_fat(meter):
    with open("s.json", "w") as f:
        f.write("a" * 10)
    e0 = dict(meter.stats()["erases"])
    with open("s.json", "w") as f:     # truncated and written again
        f.write("b" * 10)
    e1 = meter.stats()["erases"]
    assert e1["fat"] - e0["fat"] == 2 and e1["dir"] - e0["dir"] == 2
    os.rename("s.json", "t.json")
    os.remove("t.json")
    e2 = meter.stats()["erases"]
    assert e2["dir"] - e1["dir"] == 2 and e2["fat"] - e1["fat"] == 1


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


def test_stats_file_for_bench(meter, tmp_path):
    with open("h.bin", "wb") as f:
        f.write(b"1")
    meter.dump(force=True)
    data = json.loads((tmp_path / ".host_control" / "flash_stats.json").read_text())
    assert data["sector_erases"] == meter.stats()["sector_erases"] and "h.bin" in data["files"]


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


def test_history_costs_two_erases_per_hourly_flush(meter):
    from bench.bench_history import flash_inprocess

    meter.uninstall()   # the bench installs its own meter
    fl = flash_inprocess(days=3, flush_minutes=60)
    # 24 flushes a day: one data sector and the directory entry each, one more data sector for the day record
    assert 48 <= fl["erases_per_day"] <= 52
    assert fl["by_kind"]["fat"] == 0            # the file is preallocated: the chain never changes
    assert fl["bytes_per_day"] == 97 * 56       # 96 quarter hours and one day, 56 bytes each
    fl2 = flash_inprocess(days=3, flush_minutes=120)
    assert fl2["erases_per_day"] <= 27


def test_the_store_works_under_a_hooked_open(meter):
    # The host runner installs the meter before code.py imports the store: open is then a Python function.
    from services.history.store import HR, HistoryStore

    st = HistoryStore("history.bin")
    assert st.open() == "created"
    st.write([(0, 1000, 1, 5, 60, 1, 10, 0, 1, 0)], [])
    again = HistoryStore("history.bin")
    assert again.open() == "ok" and [r[1] for r in again.records(HR)] == [1000]
    assert meter.stats()["files"]["history.bin"]["erases"] > 0
