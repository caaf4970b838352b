"""Milliseconds since boot that never wrap: tick differences folded into a plain integer every poll."""

from adafruit_ticks import ticks_diff, ticks_ms

from core.module import Module


class Uptime(Module):
    """boot_ticks: ticks at boot; ticks: the ticks source (stepped in tests).

    ticks_diff(now, boot) is only meaningful for 2**28 ms (~3.1 days): uptime computed that way went negative after
    three days and started over every 6.2. Folding the difference in at every poll keeps each step tiny.
    """

    name = "uptime"
    poll_every_ms = 1000     # folding ticks into the uptime once a second stays far inside the tick wrap

    def __init__(self, boot_ticks=None, ticks=ticks_ms):
        Module.__init__(self)
        self._ticks = ticks
        self._at = ticks() if boot_ticks is None else boot_ticks
        self._ms = 0

    def poll(self, now_ms):
        self._fold(now_ms)

    def _fold(self, now_ms):
        step = ticks_diff(now_ms, self._at)
        if step > 0:  # a caller's slightly older stamp (read before the last poll) is not a step back
            self._ms += step
            self._at = now_ms

    def ms(self, now_ms=None):
        """Uptime in ms at now_ms (default: now)."""
        self._fold(self._ticks() if now_ms is None else now_ms)
        return self._ms

    def describe(self):
        d = Module.describe(self)
        d["uptime_s"] = self._ms // 1000
        return d
