"""History ring file: layout, wrap-around, recovery from truncation, random bytes, another format, a missing file."""

import os
import random
import struct

import pytest

from services.history import store as hs
from services.history.store import HR, LR, HistoryStore

PATH = "history/history.bin"    # where HistoryStore() keeps it


class ListLog:
    """core.log.Log's log(level, msg, *args), kept in a list."""

    def __init__(self):
        self.entries = []

    def log(self, level, msg, *args):
        self.entries.append((level, msg % args if args else msg))

    def text(self):
        return "\n".join(m for _l, m in self.entries)


def rec(t, day=20000, a=0, c=0):
    return (0, t, day, 100, 60, hs.F_POWER, a, 5, c, 0)


@pytest.fixture
def drive(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def fill(store, n_hr, n_lr=0, t0=1_700_000_100, d0=0):
    store.write([rec(t0 + 900 * i, a=10 * i, c=10) for i in range(n_hr)],
                [rec(1_700_000_000 + 86400 * (d0 + i), day=20000 + d0 + i, a=1000 * i) for i in range(n_lr)])


def test_created_file_is_preallocated_with_a_valid_header(drive):
    log = ListLog()
    st = HistoryStore(log=log)
    assert st.open() == "created"
    assert os.path.getsize(PATH) == hs.HEADER_SIZE + (hs.HR_CAP + hs.LR_CAP) * hs.REC_SIZE
    with open(PATH, "rb") as f:
        assert hs.parse_header(f.read(hs.HEADER_SIZE)) == (hs.VERSION, hs.REC_SIZE, hs.HR_CAP, hs.LR_CAP)
    assert "missing" in log.text()
    assert list(st.records(HR)) == [] and list(st.records(LR)) == []


def test_records_survive_reopen_in_order_and_rings_wrap(drive):
    st = HistoryStore(hr_cap=10, lr_cap=4)
    st.open()
    fill(st, 7, 3)
    fill(st, 8, 3, t0=1_700_000_100 + 7 * 900, d0=3)   # 15 quarter hours into 10 slots; 6 days into 4
    again = HistoryStore(hr_cap=10, lr_cap=4)
    assert again.open() == "ok"
    ts = [r[1] for r in again.records(HR)]
    assert ts == [1_700_000_100 + 900 * i for i in range(5, 15)]
    assert [r[0] for r in again.records(HR)] == list(range(6, 16))
    assert again.hr.next_seq == 16 and again.hr.head == 5
    assert [r[2] for r in again.records(LR)] == [20002, 20003, 20004, 20005]
    assert again.hr.last[1] == ts[-1]


def test_write_positions_and_record_bytes(drive):
    st = HistoryStore(hr_cap=4, lr_cap=2)
    st.open()
    st.write([rec(1000, a=123456789012345, c=-7)], [])
    with open(PATH, "rb") as f:
        f.seek(hs.HEADER_SIZE)
        raw = f.read(hs.REC_SIZE)
    v = struct.unpack(hs.REC_FMT, raw)
    assert v[:10] == (1, 1000, 20000, 100, 60, hs.F_POWER, 123456789012345, 5, -7, 0)
    assert hs.unpack(raw, HR)[6] == 123456789012345
    assert hs.unpack(raw, LR) is None   # the ring is part of the checksum


@pytest.mark.parametrize("cut", [0, 10, hs.HEADER_SIZE, hs.HEADER_SIZE + 3 * hs.REC_SIZE + 17,
                                 hs.HEADER_SIZE + 5 * hs.REC_SIZE])
def test_truncated_file_keeps_the_records_before_the_cut_and_is_extended(drive, cut):
    st = HistoryStore(hr_cap=8, lr_cap=2)
    st.open()
    fill(st, 6, 1)
    with open(PATH, "r+b") as f:
        f.truncate(cut)
    log = ListLog()
    again = HistoryStore(hr_cap=8, lr_cap=2, log=log)
    status = again.open()
    assert status == "extended"
    assert "truncated" in log.text()
    assert os.path.getsize(PATH) == again.size
    whole = max(0, (cut - hs.HEADER_SIZE) // hs.REC_SIZE) if cut >= hs.HEADER_SIZE else 0
    assert [r[0] for r in again.records(HR)] == list(range(1, whole + 1))
    # and it carries on recording after what it kept
    again.write([rec(1_800_000_000)], [])
    third = HistoryStore(hr_cap=8, lr_cap=2)
    assert third.open() == "ok"
    assert [r[1] for r in third.records(HR)][-1] == 1_800_000_000


def test_random_bytes_over_the_whole_file(drive):
    st = HistoryStore(hr_cap=8, lr_cap=2)
    st.open()
    fill(st, 6, 1)
    size = os.path.getsize(PATH)
    with open(PATH, "wb") as f:
        f.write(random.Random(1).randbytes(size))
    log = ListLog()
    again = HistoryStore(hr_cap=8, lr_cap=2, log=log)
    assert again.open() == "header"
    assert "header unreadable" in log.text() and "unreadable" in log.text()
    assert list(again.records(HR)) == [] and again.hr.bad == 8
    again.write([rec(1_800_000_000)], [])
    third = HistoryStore(hr_cap=8, lr_cap=2)
    assert third.open() == "ok"
    assert [r[1] for r in third.records(HR)] == [1_800_000_000]


def test_random_bytes_over_some_records_keep_the_others(drive):
    st = HistoryStore(hr_cap=8, lr_cap=2)
    st.open()
    fill(st, 8, 2)
    with open(PATH, "r+b") as f:
        f.seek(hs.HEADER_SIZE + 2 * hs.REC_SIZE + 5)     # tears records 3 and 4
        f.write(random.Random(2).randbytes(hs.REC_SIZE))
    log = ListLog()
    again = HistoryStore(hr_cap=8, lr_cap=2, log=log)
    assert again.open() == "ok"
    assert [r[0] for r in again.records(HR)] == [1, 2, 5, 6, 7, 8]
    assert again.hr.bad == 2 and "2 HighRes" in log.text()
    assert len(list(again.records(LR))) == 2


def test_newest_records_torn_mid_flush_resume_after_the_last_good_one(drive):
    st = HistoryStore(hr_cap=8, lr_cap=2)
    st.open()
    fill(st, 5)
    with open(PATH, "r+b") as f:          # half of record 5 written, as a cut in a flush leaves it
        f.seek(hs.HEADER_SIZE + 4 * hs.REC_SIZE + hs.REC_SIZE // 2)
        f.write(b"\xff" * (hs.REC_SIZE // 2))
    again = HistoryStore(hr_cap=8, lr_cap=2)
    again.open()
    assert [r[0] for r in again.records(HR)] == [1, 2, 3, 4]
    assert again.hr.head == 4 and again.hr.next_seq == 5
    again.write([rec(1_800_000_000)], [])
    assert [r[1] for r in again.records(HR)][-1] == 1_800_000_000


def test_an_older_format_is_kept_aside_and_a_new_file_started(drive):
    st = HistoryStore(hr_cap=8, lr_cap=2)
    st.open()
    fill(st, 3)
    old = bytearray(hs.HEADER_SIZE)
    struct.pack_into("<4sHHHH", old, 0, hs.MAGIC, 0, 40, 8, 2)   # a v0 file with 40-byte records
    struct.pack_into("<I", old, hs.HEADER_SIZE - 4, __import__("binascii").crc32(bytes(old[:-4])))
    with open(PATH, "r+b") as f:
        f.write(old)
    before = open(PATH, "rb").read()
    log = ListLog()
    again = HistoryStore(hr_cap=8, lr_cap=2, log=log)
    assert again.open() == "replaced"
    assert "format v0" in log.text()
    assert open(PATH + ".v0", "rb").read() == before     # nothing of it is destroyed
    assert list(again.records(HR)) == []
    again.write([rec(1_800_000_000)], [])
    assert HistoryStore(hr_cap=8, lr_cap=2).open() == "ok"


def test_other_ring_sizes_in_a_valid_header_are_migrated_record_by_record(drive):
    """An older firmware's file (smaller rings) keeps every record in the new layout, in order, seq kept."""
    log = ListLog()
    st = HistoryStore(hr_cap=8, lr_cap=2)
    st.open()
    fill(st, 11, 3)                       # the HighRes ring wrapped once, LowRes too
    hr0, lr0 = list(st.records(HR)), list(st.records(LR))
    assert len(hr0) == 8 and len(lr0) == 2
    again = HistoryStore(hr_cap=12, lr_cap=4, log=log)
    assert again.open() == "migrated"
    assert (list(again.records(HR)), list(again.records(LR))) == (hr0, lr0)
    assert "migrated from 8/2 to 12/4 slots, 8 HighRes and 2 LowRes records kept" in log.text()
    assert os.path.getsize(PATH) == again.size and sorted(os.listdir("history")) == ["history.bin"]
    with open(PATH, "rb") as f:
        assert hs.parse_header(f.read(hs.HEADER_SIZE))[2:] == (12, 4)
    fill(again, 1, 1, t0=1_800_000_000, d0=50)           # writing goes on after the newest record
    assert [r[1] for r in again.records(HR)][-2:] == [hr0[-1][1], 1_800_000_000]
    assert HistoryStore(hr_cap=12, lr_cap=4).open() == "ok"


def test_a_smaller_layout_keeps_the_newest_records(drive):
    st = HistoryStore(hr_cap=8, lr_cap=4)
    st.open()
    fill(st, 8, 4)
    hr0, lr0 = list(st.records(HR)), list(st.records(LR))
    again = HistoryStore(hr_cap=5, lr_cap=2)
    assert again.open() == "migrated"
    assert (list(again.records(HR)), list(again.records(LR))) == (hr0[-5:], lr0[-2:])


@pytest.mark.parametrize("state", ["new_partial", "set_aside", "switched"])
def test_an_interrupted_migration_is_finished_at_the_next_start(drive, state):
    """The states a cut between the migration's drive steps leaves (the SIGKILL test runs the real thing)."""
    st = HistoryStore(hr_cap=8, lr_cap=2)
    st.open()
    fill(st, 6, 2)
    hr0, lr0 = list(st.records(HR)), list(st.records(LR))
    if state == "new_partial":            # cut while .new was written: the original is whole
        with open("history/history.new", "wb") as f:
            f.write(b"\x00" * 100)
    else:
        done = HistoryStore(hr_cap=12, lr_cap=4)
        done.open()                        # a complete migration, then its steps undone in part
        os.rename(PATH, "history/history.new")
        st2 = HistoryStore("history/orig.bin", hr_cap=8, lr_cap=2)   # the original as it was
        st2.open()
        st2.write([r for r in hr0], [r for r in lr0])
        os.rename("history/orig.bin", "history/history.old")
        if state == "switched":
            os.rename("history/history.new", PATH)
    again = HistoryStore(hr_cap=12, lr_cap=4)
    assert again.open() in ("ok", "migrated")
    assert [r[1:] for r in again.records(HR)] == [r[1:] for r in hr0]
    assert [r[1:] for r in again.records(LR)] == [r[1:] for r in lr0]
    assert sorted(os.listdir("history")) == ["history.bin"]


def test_serializer_json_shapes(drive):
    import json

    day = 20000
    t = day * 86400 - 3600
    hr = [(0, t + 900 * i, day, 1234, 60, hs.F_POWER, 123456789 + 2500 * i, 0, 2500, 0) for i in range(3)]
    body = json.loads("".join(hs.high_res_json([hr], day)))
    assert body["start"] == hs.date_str(day) and body["days"] == 1 and body["count"] == 3
    assert body["items"][0] == {"date": hs.date_str(day) + "T00:00", "timestamp": t,
                                "import_total_kWh": 12345.6789, "export_total_kWh": 0.0,
                                "import_kW": 0.25, "export_kW": 0.0, "power_W": 1234}
    assert body["import_total_kWh"] == 0.75
    lr = [(0, t, day, 96, 60, hs.F_NO_EXPORT, 10000, 0, 65000, 0)]
    body = json.loads("".join(hs.low_res_json([lr], day - 1, 3)))
    assert body["items"] == [{"date": hs.date_str(day), "timestamp": t, "import_total_kWh": 1.0,
                              "import_kWh": 6.5}]
    assert json.loads("".join(hs.low_res_json([lr], day + 1, 2)))["items"] == []


# --- moving the file of an older firmware (at the drive root) into history/ ---

def _legacy(n_hr=30, n_lr=3):
    """A file where firmware before the history/ folder kept it, at the drive root; its records."""
    old = HistoryStore("history.bin")
    old.open()
    fill(old, n_hr, n_lr)
    return list(old.records(HR)), list(old.records(LR))


def test_a_file_at_the_root_is_moved_into_its_folder_whole(drive):
    hr, lr = _legacy()
    log = ListLog()
    st = HistoryStore(legacy="history.bin", log=log)
    assert st.open() == "ok" and st.moved and st.path == PATH
    assert list(st.records(HR)) == hr and list(st.records(LR)) == lr
    assert sorted(os.listdir(".")) == ["history"] and os.listdir("history") == ["history.bin"]
    assert "moved" in log.text()
    again = HistoryStore(legacy="history.bin")
    assert again.open() == "ok" and not again.moved and list(again.records(HR)) == hr


def test_a_read_only_drive_serves_the_file_where_it_is_and_moves_it_later(drive, monkeypatch):
    hr, _lr = _legacy()
    real_mkdir = os.mkdir

    def refuse(path, *a):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(os, "mkdir", refuse)
    log = ListLog()
    st = HistoryStore(legacy="history.bin", log=log)
    assert st.open() == "ok" and st.path == "history.bin" and not st.moved
    assert list(st.records(HR)) == hr
    assert "cannot move" in log.text()
    monkeypatch.setattr(os, "mkdir", real_mkdir)
    assert st.open() == "ok" and st.moved and st.path == PATH
    assert list(st.records(HR)) == hr and not os.path.exists("history.bin")


def test_without_an_old_file_a_read_only_drive_is_an_error(drive, monkeypatch):
    def refuse(path, *a):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(os, "mkdir", refuse)
    with pytest.raises(OSError):
        HistoryStore(legacy="history.bin").open()     # the service records to RAM and retries


@pytest.mark.parametrize("cut_at", [0, 3000, hs.HEADER_SIZE + (hs.HR_CAP + hs.LR_CAP) * hs.REC_SIZE])
def test_a_copy_cut_short_is_started_again(drive, cut_at):
    hr, lr = _legacy()
    os.mkdir("history")
    with open("history.bin", "rb") as f:
        data = f.read()
    with open("history/history.tmp", "wb") as f:   # the power went during the copy (or before the rename)
        f.write(data[:cut_at])
    st = HistoryStore(legacy="history.bin")
    assert st.open() == "ok" and st.moved
    assert list(st.records(HR)) == hr and list(st.records(LR)) == lr
    assert os.listdir("history") == ["history.bin"] and not os.path.exists("history.bin")


def test_after_the_rename_the_old_file_is_removed(drive):
    hr, lr = _legacy()
    os.mkdir("history")
    with open("history.bin", "rb") as src, open(PATH, "wb") as dst:   # the power went before the remove
        dst.write(src.read())
    st = HistoryStore(legacy="history.bin")
    assert st.open() == "ok"
    assert list(st.records(HR)) == hr and list(st.records(LR)) == lr and not os.path.exists("history.bin")


def test_a_copy_whose_original_was_deleted_by_hand_is_kept(drive):
    hr, lr = _legacy()
    os.mkdir("history")
    os.rename("history.bin", "history/history.tmp")
    st = HistoryStore(legacy="history.bin")
    assert st.open() == "ok" and list(st.records(HR)) == hr and list(st.records(LR)) == lr


def test_the_record_that_closes_a_gap_says_how_long_the_gap_was(drive):
    import json

    day = 20000
    t = day * 86400 - 3600                       # local midnight at UTC+1
    before = (0, t - 900 * 5, day - 1, 0, 60, 0, 1000, 0, 10, 0)     # 22:45 the day before, then 1 h 15 min off
    hr = [(0, t + 900 * i, day, 0, 60, 0, 2000 + i, 0, 10, 0) for i in (0, 1, 2)]
    hr += [(0, t + 900 * 7, day, 0, 60, hs.F_GAP, 3000, 0, 40, 0),            # 4 quarter hours without a record
           (0, t + 900 * 8, day, 0, 60, 0, 3010, 0, 10, 0)]
    body = json.loads("".join(hs.high_res_json([[before] + hr], day)))
    gaps = [(i["date"][11:], i.get("gap_s")) for i in body["items"]]
    assert gaps == [("00:00", 3600), ("00:15", None), ("00:30", None), ("01:45", 3600), ("02:00", None)]
    assert body["count"] == 5                    # the day before only says where the gap starts
    assert list(body["items"][3]) == ["date", "timestamp", "import_total_kWh", "export_total_kWh", "import_kW",
                                      "export_kW", "gap_s"]
    alone = json.loads("".join(hs.high_res_json([hr], day)))
    assert "gap_s" not in alone["items"][0]      # nothing known before the first record: no gap claimed
    assert "gap_s" not in "".join(hs.low_res_json([[(0, t, day, 96, 60, hs.F_GAP, 1, 0, 2, 0)]], day, 1))


def test_a_flush_while_an_answer_streams_skips_no_record(drive):
    """The head moves when a flush lands between two reads of a streamed answer: the answer keeps every record it
    started with (it followed the moving head and skipped as many slots as were written)."""
    st = HistoryStore(hr_cap=40, lr_cap=2)
    st.open()
    fill(st, 40)                                  # full ring
    want = list(st.records(HR))
    snap = st.hr.next_seq - 1
    got = []
    reads = 0
    stream = st.hr.records(st.opener, st.path, bytearray(4 * hs.REC_SIZE), max_seq=snap, ticks=True)
    for r in stream:
        if r is not None:
            got.append(r)
            continue
        reads += 1
        if reads == 2:                            # between two reads: a flush of 3 quarter hours
            st.write([rec(1_800_000_000 + 900 * i, a=5000 + i) for i in range(3)], [])
            assert st.hr.head == 3
    assert got == want                            # read before the flush overwrote them, or after: all 40
