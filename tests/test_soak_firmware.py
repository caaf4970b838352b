"""A few simulated days of the whole firmware with all its clients (bench/soak_firmware.py, shortened): nothing lost,
nothing restarted, no file descriptor or memory growth. The 30-day run is `python -m bench.soak_firmware`."""

import pytest

from bench import soak_firmware

pytestmark = [pytest.mark.slow, pytest.mark.alone]   # CPU-bound: a second worker beside it costs simulated quarters

DAYS = 2.5          # one whole local day between two partial ones, ~130 s at SPEED
# 1,800: a quarter hour is half a second here, so a pause of the host process (a collection, the other worker's
# test) shorter than that merges no quarter hours; at 3,600 this machine (a CPython loop 2x slower than the one the
# figures were first taken on) kept 113-141 of ~240 quarter hours as records even at the commit before issue 35
SPEED = 1800
RSS_GROWTH_KB = 4096


def test_days_of_running_lose_nothing_and_grow_nothing(tmp_path):
    r = soak_firmware.run(DAYS, SPEED, str(tmp_path), report=lambda line: None)
    assert r["alive"] and r["starts"] == 1 and r["uptime_went_back"] == 0, r["faults"]
    assert r["faults"] == []
    assert r["simulated_days"] >= DAYS - 0.2
    assert r["quarters"] >= 4 * 24 * 2 and r["missing_quarters"] == []
    assert r["mismatched_days"] == []
    for name, count, back in r["series"]:
        if name.startswith("REST latest"):
            continue            # at this speed a reading is older than /latest's 15 s: 204, see the bench
        assert count >= 20 and back == [], (name, count, back)
    assert r["modbus_errors"] == 0
    fds0, fds_max = r["fds"]
    assert fds_max <= fds0 + 2, r["samples"]
    rss0, rss_max = r["rss_kb"]
    assert rss_max - rss0 <= RSS_GROWTH_KB, r["samples"]
