"""Power cuts: the host runtime is SIGKILLed 50 times during a simulated week; history stays readable and ordered."""

import pytest

from tests import history_powercut

pytestmark = pytest.mark.slow


def test_fifty_power_cuts_in_a_simulated_week(tmp_path):
    stats = history_powercut.run(50, str(tmp_path), speed=3600.0, seed=7, up_s=(0.8, 3.0))
    assert stats["kills"] == 50
    assert stats["records"] > 4 * 24 * 2          # days of quarter hours made it to the flash across the cuts
    assert stats["lost_max"] <= history_powercut.BATCH_MAX
    assert stats["snapshots"] >= 5                 # cuts where what was served before is compared with the flash
