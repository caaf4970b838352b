"""watchdog for the device bench: no timer thread; it measures the longest gap between two feeds instead."""

import _hostenv


class WatchDogMode:
    RAISE = "RAISE"
    RESET = "RESET"


class WatchDogTimeout(Exception):
    """Raised in RAISE mode on the device."""


class WatchDogTimer:
    """microcontroller.watchdog: timeout, mode, feed(); longest_gap_ms is what the bench reports."""

    def __init__(self):
        self.timeout = 0
        self.mode = None
        self.feeds = 0
        self.longest_gap_ms = 0
        self._last = None

    def feed(self):
        if self.mode is None:
            raise ValueError("WatchDogTimer is not initialized")
        now = _hostenv.sim_ms()
        if self._last is not None:
            gap = now - self._last
            if gap > self.longest_gap_ms:
                self.longest_gap_ms = gap
        self._last = now
        self.feeds += 1

    def deinit(self):
        self.mode = None
