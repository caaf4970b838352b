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
    # The new file written with its records in 234 slices (an open, a write and a close each), then the switch.
    assert steps == 3 * -(-(hs.HEADER_SIZE + (hs.HR_CAP + hs.LR_CAP) * hs.REC_SIZE) // hs.FILL) + 5
    monkeypatch.chdir(whole)
    st = hs.HistoryStore()
    assert st.open() == "ok" and st.hr.cap == hs.HR_CAP == 3000 and st.lr.cap == hs.LR_CAP == 732
    assert (list(st.records(hs.HR)), list(st.records(hs.LR))) == (hr0, lr0)
    cuts = sorted(set(range(0, steps, 29)) | set(range(steps - 8, steps)))
    hp.assert_every_cut_recovers(tmp_path, monkeypatch, seed, cuts, (hr0, lr0))
