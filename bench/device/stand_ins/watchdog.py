"""watchdog for the device bench: no timer thread; it measures the longest gap between two feeds instead."""

import _hostenv


class WatchDogMode:
    RAISE = "RAISE"
    RESET = "RESET"


class WatchDogTimeout(Exception):
    """Raised in RAISE mode on the device."""


class WatchDogTimer:
    """microcontroller.watchdog: timeout, mode, feed(). Setting the mode arms it, as on the chip, so the gap from
    arming to the first feed counts; longest_gap_ms and tripped (a gap over the timeout) are what the bench reports."""

    def __init__(self):
        self.timeout = 0
        self._mode = None
        self.feeds = 0
        self.longest_gap_ms = 0
        self.tripped = False
        self._last = None

    @property
    def mode(self):
        return self._mode

    @mode.setter
    def mode(self, mode):
        self._mode = mode
        self._last = _hostenv.sim_ms() if mode is not None else None

    def feed(self):
        if self._mode is None:
            raise ValueError("WatchDogTimer is not initialized")
        now = _hostenv.sim_ms()
        if self._last is not None:
            gap = now - self._last
            if gap > self.longest_gap_ms:
                self.longest_gap_ms = gap
            if self._mode == WatchDogMode.RESET and self.timeout and gap > self.timeout * 1000:
                self.tripped = True
        self._last = now
        self.feeds += 1

    def deinit(self):
        self._mode = None
        self._last = None
