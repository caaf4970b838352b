"""Power cuts while an older firmware's history.bin (drive root) is moved into history/: one SIGKILL before each
change the move makes to the drive; after every cut the drive holds a readable file with every record, and the
next start finishes the move."""

import os
import shutil

from services.history import store as hs
from tests import history_powercut as hp


def _old_drive(path):
    os.makedirs(path)
    st = hs.HistoryStore(os.path.join(path, hp.LEGACY))
    st.open()
    t0 = 1_782_000_000
    st.write([(0, t0 + 900 * i, 20625 + i // 96, 300, 120, hs.F_POWER, 10_000 + 25 * i, 7, 25, 0)
              for i in range(700)],
             [(0, t0 + 86400 * i, 20625 + i, 0, 120, 0, 10_000 + 2400 * i, 7, 2400, 0) for i in range(7)])
    return list(st.records(hs.HR)), list(st.records(hs.LR))


def test_a_power_cut_before_any_step_of_the_move_loses_no_record(tmp_path, monkeypatch):
    seed = str(tmp_path / "seed")
    hr0, lr0 = _old_drive(seed)
    whole = str(tmp_path / "whole")
    shutil.copytree(seed, whole)
    steps = hp.migration_steps(whole, 10 ** 9)
    assert steps > 100                          # mkdir, the copy's open, ~100 writes, close, rename, remove
    assert os.listdir(whole) == ["history"] and os.listdir(os.path.join(whole, "history")) == ["history.bin"]
    for cut in range(steps):
        drive = str(tmp_path / ("cut%d" % cut))
        shutil.copytree(seed, drive)
        assert hp.migration_steps(drive, cut) is None
        # Right after the cut: the file the next start uses (history/ if it is there, else the root's) is whole.
        header, hr, lr = hp.read_file(drive)
        assert header is not None and (hr, lr) == (hr0, lr0), "cut before step %d" % cut
        # The next start finishes the move and serves every record.
        monkeypatch.chdir(drive)
        st = hs.HistoryStore(legacy=hp.LEGACY)
        assert st.open() == "ok"
        assert (list(st.records(hs.HR)), list(st.records(hs.LR))) == (hr0, lr0), "cut before step %d" % cut
        assert sorted(os.listdir(".")) == ["history"] and os.listdir("history") == ["history.bin"]
        shutil.rmtree(drive)


def _v1_drive(path):
    """A drive whose history/history.bin has the first layout's ring sizes (1500 / 372 slots)."""
    os.makedirs(os.path.join(path, "history"))
    st = hs.HistoryStore(os.path.join(path, hp.PATH), hr_cap=1500, lr_cap=372)
    st.open()
    t0 = 1_782_000_000
    st.write([(0, t0 + 900 * i, 20625 + i // 96, 300, 120, hs.F_POWER, 10_000 + 25 * i, 7, 25, 0)
              for i in range(1600)],                      # wrapped once
             [(0, t0 + 86400 * i, 20625 + i, 0, 120, 0, 10_000 + 2400 * i, 7, 2400, 0) for i in range(20)])
    return list(st.records(hs.HR)), list(st.records(hs.LR))


def test_a_power_cut_in_the_ring_size_migration_loses_no_record(tmp_path, monkeypatch):
    """SIGKILL before a drive change of the 15-day/1-year file's migration to 30 days/2 years: the next start
    serves every record. Every step of the switch (rename, rename, remove) and every 29th step of the sliced copy."""
    seed = str(tmp_path / "seed")
    hr0, lr0 = _v1_drive(seed)
    assert len(hr0) == 1500 and len(lr0) == 20
    whole = str(tmp_path / "whole")
    shutil.copytree(seed, whole)
    steps = hp.migration_steps(whole, 10 ** 9)
    # The new file written with its records in 117 slices (an open, a write and a close each), then the switch.
    assert steps == 3 * -(-(hs.HEADER_SIZE + (hs.HR_CAP + hs.LR_CAP) * hs.REC_SIZE) // hs.FILL) + 5
    monkeypatch.chdir(whole)
    st = hs.HistoryStore()
    assert st.open() == "ok" and st.hr.cap == hs.HR_CAP == 3000 and st.lr.cap == hs.LR_CAP == 732
    assert (list(st.records(hs.HR)), list(st.records(hs.LR))) == (hr0, lr0)
    cuts = sorted(set(range(0, steps, 29)) | set(range(steps - 8, steps)))
    hp.assert_every_cut_recovers(tmp_path, monkeypatch, seed, cuts, (hr0, lr0))


SIZE = hs.HEADER_SIZE + (hs.HR_CAP + hs.LR_CAP) * hs.REC_SIZE


def test_a_power_cut_while_a_new_file_is_made_resumes_from_its_end(tmp_path, monkeypatch):
    """SIGKILL before a drive change of a first start's creation (mkdir, then 117 slices of an open, a write and a
    close each): the next start finds a short file with its header (or none), goes on from where it ends, and the
    file is whole and empty of records; no slice is written twice past the first the cut tore."""
    empty = str(tmp_path / "empty")
    os.makedirs(empty)
    whole = str(tmp_path / "whole")
    shutil.copytree(empty, whole)
    steps = hp.migration_steps(whole, 10 ** 9)
    assert steps == 1 + 3 * -(-SIZE // hs.FILL)
    for cut in sorted(set(range(0, steps, 17)) | {1, 2, 3, 4, steps - 2, steps - 1}):
        drive = str(tmp_path / ("cut%d" % cut))
        shutil.copytree(empty, drive)
        assert hp.migration_steps(drive, cut) is None
        made = (cut - 1) // 3 if cut else 0           # slices closed before the cut
        resumed = hp.migration_steps(drive, 10 ** 9)   # the next start, itself a run that could be cut again
        assert resumed <= steps - 3 * made + 3, "cut before step %d" % cut
        monkeypatch.chdir(drive)
        with open(hp.PATH, "rb") as f:
            data = f.read()
        assert len(data) == SIZE and hs.parse_header(data[:hs.HEADER_SIZE])[2:] == (hs.HR_CAP, hs.LR_CAP)
        assert data[hs.HEADER_SIZE:] == bytes(SIZE - hs.HEADER_SIZE), "cut before step %d" % cut
        assert os.listdir("history") == ["history.bin"]
        monkeypatch.chdir(str(tmp_path))
        shutil.rmtree(drive)


def test_a_power_cut_while_a_truncated_file_is_extended_loses_no_record(tmp_path, monkeypatch):
    """A file cut short (its records up to the cut kept) is zero-filled a slice per step; a SIGKILL before any of
    those steps loses none of the records before the cut, and the next start finishes the file."""
    seed = str(tmp_path / "seed")
    os.makedirs(os.path.join(seed, "history"))
    st = hs.HistoryStore(os.path.join(seed, hp.PATH))
    st.open()
    t0 = 1_782_000_000
    st.write([(0, t0 + 900 * i, 20625 + i // 96, 300, 120, hs.F_POWER, 10_000 + 25 * i, 7, 25, 0)
              for i in range(700)], [])
    with open(os.path.join(seed, hp.PATH), "r+b") as f:
        f.truncate(hs.HEADER_SIZE + 640 * hs.REC_SIZE + 10)      # 640 whole records, a torn one
    kept = list(st.records(hs.HR))[:640]
    whole = str(tmp_path / "whole")
    shutil.copytree(seed, whole)
    steps = hp.migration_steps(whole, 10 ** 9)
    assert steps == 3 * (-(-SIZE // hs.FILL) - (hs.HEADER_SIZE + 640 * hs.REC_SIZE + 10) // hs.FILL)
    for cut in sorted(set(range(0, steps, 19)) | {steps - 1}):
        drive = str(tmp_path / ("cut%d" % cut))
        shutil.copytree(seed, drive)
        assert hp.migration_steps(drive, cut) is None
        _header, hr, _lr = hp.read_file(drive)
        assert hr == kept, "cut before step %d" % cut
        monkeypatch.chdir(drive)
        again = hs.HistoryStore(legacy=hp.LEGACY)
        assert again.open() in ("extended", "ok") and list(again.records(hs.HR)) == kept
        assert os.path.getsize(hp.PATH) == SIZE
        monkeypatch.chdir(str(tmp_path))
        shutil.rmtree(drive)
