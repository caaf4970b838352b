"""Power cuts: the host runtime is SIGKILLed 50 times during a simulated week; history stays readable and ordered."""

import os

import pytest

from services.history import store as hs
from tests import history_powercut

pytestmark = pytest.mark.slow


def test_fifty_power_cuts_in_a_simulated_week(tmp_path):
    # Up 1.6-6 s between cuts (2-6 simulated hours): each start costs the host a second or more of real time before
    # the history records (CPython's imports, then the start in stages wires the history from the loop), which is an
    # hour of simulated time at 3,600; with 0.8-3 s this machine kept 168 records even before issue 35's work.
    stats = history_powercut.run(50, str(tmp_path), speed=3600.0, seed=7, up_s=(1.6, 6.0))
    assert stats["kills"] == 50
    assert stats["records"] > 4 * 24 * 2          # days of quarter hours made it to the flash across the cuts
    assert stats["lost_max"] <= history_powercut.BATCH_MAX
    assert stats["snapshots"] >= 5                 # cuts where what was served before is compared with the flash


def test_power_cuts_on_a_drive_an_older_firmware_left(tmp_path):
    # history.bin at the drive root, as firmware before the history/ folder kept it: moved at the first start,
    # and not one of its records lost across the cuts.
    old = str(tmp_path / "old.bin")
    st = hs.HistoryStore(old)
    st.open()
    t0 = history_powercut.EPOCH0 - 900 * 400
    st.write([(0, t0 + 900 * i, (t0 + 900 * i + 7200) // 86400, 300, 120, hs.F_POWER, 10_000 + 25 * i, 7, 25, 0)
              for i in range(400)], [])
    os.makedirs(tmp_path / "run")
    stats = history_powercut.run(6, str(tmp_path / "run"), speed=3600.0, seed=3, up_s=(0.3, 2.5), old_file=old)
    assert stats["kills"] == 6 and stats["moved"]
    assert stats["records"] >= 400


def test_power_cuts_while_the_first_start_makes_the_file(tmp_path):
    # Short runs on a fresh drive at 10x (the file takes ~30 simulated s, a slice per 250 ms poll), so cuts land
    # while it is short; every start after one goes on from its end, and the file stays readable with every
    # flushed record.
    stats = history_powercut.run(8, str(tmp_path), speed=10.0, seed=11, up_s=(0.0, 1.5))
    assert stats["kills"] == 8 and stats["cut_while_made"] >= 1


def test_power_cuts_while_an_older_layout_is_moved_and_migrated(tmp_path):
    # The first firmware's 15-day/1-year file at the drive root: copied into history/ and migrated to 30 days /
    # 2 years, both a slice per poll; cuts land in either, and not one of its records is lost.
    old = str(tmp_path / "old.bin")
    st = hs.HistoryStore(old, hr_cap=1500, lr_cap=372)
    st.open()
    t0 = history_powercut.EPOCH0 - 900 * 1400
    st.write([(0, t0 + 900 * i, (t0 + 900 * i + 7200) // 86400, 300, 120, hs.F_POWER, 10_000 + 25 * i, 7, 25, 0)
              for i in range(1400)], [])
    os.makedirs(tmp_path / "run")
    stats = history_powercut.run(8, str(tmp_path / "run"), speed=10.0, seed=5, up_s=(0.0, 1.5), old_file=old)
    # A run shorter than the copy starts it again from the untouched root file (as the migration does): the file
    # served after every cut is whichever is whole, with every record.
    assert stats["kills"] == 8 and stats["records"] >= 1400
    assert stats["cut_while_made"] >= 1
