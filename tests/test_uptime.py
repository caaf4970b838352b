"""core/uptime.py: uptime that does not wrap with the ticks (2**29 ms), and the log entries stamped with it."""

from core.log import Log
from core.uptime import Uptime
from services.logs.flash_log import FlashLog
from tests.steppedclock import SteppedClock

DAY_MS = 86400000


def run_days(up, clock, days, step=1 << 20):
    """Advance days with the supervisor polling every step ms (coarser than the device's few ms)."""
    left = days * DAY_MS
    while left > 0:
        clock.advance(min(step, left))
        left -= step
        up.poll(clock())


def test_uptime_counts_past_the_tick_wrap():
    clock = SteppedClock()
    up = Uptime(clock(), ticks=clock)
    run_days(up, clock, 3)
    assert up.ms() == 3 * DAY_MS
    run_days(up, clock, 11)  # ticks_diff from boot gave -2.2 days here (14 days mod 6.2, past the half period)
    assert up.ms() == 14 * DAY_MS
    assert up.describe()["uptime_s"] == 14 * 86400


def test_an_older_stamp_than_the_last_poll_does_not_step_back():
    clock = SteppedClock()
    up = Uptime(clock(), ticks=clock)
    before = clock()
    clock.advance(500)
    up.poll(clock())
    assert up.ms(before) == 500 and up.ms() == 500


def test_log_entries_and_flash_log_lines_carry_uptime_after_days():
    clock = SteppedClock()
    up = Uptime(clock(), ticks=clock)
    log = Log(capacity=4, uptime=up)
    flog = FlashLog()
    log.sinks.append(flog.sink)
    log.info("boot")
    run_days(up, clock, 4)  # 4 days: past 2**28 ms, where ticks_diff(now, boot) turns negative
    log.warning("four days later")
    assert [(e[0] // 1000, e[2]) for e in log.entries()] == [(0, "boot"), (4 * 86400, "four days later")]
    assert "".join(flog.chunks()).splitlines()[1:] == [",0,info,boot", ",345600,warning,four days later"]
