"""Stand-in for watchdog: a real timer that resets the runtime when the firmware stops feeding it."""

import os
import sys
import threading


EXIT_WATCHDOG = 75


class WatchDogMode:
    RAISE = "RAISE"
    RESET = "RESET"


class WatchDogTimeout(Exception):
    """Raised in RAISE mode on the device."""


class WatchDogTimer:
    """microcontroller.watchdog: set timeout (real seconds) and mode, then feed()."""

    def __init__(self):
        self.timeout = 0.0
        self.mode = None
        self.feeds = 0
        self._timer = None

    def feed(self):
        if self.mode is None:
            raise ValueError("WatchDogTimer is not initialized")
        self.feeds += 1
        self._arm()

    def _arm(self):
        if self._timer:
            self._timer.cancel()
            self._timer = None
        if self.mode == WatchDogMode.RESET and self.timeout > 0:
            self._timer = threading.Timer(self.timeout, self._expired)
            self._timer.daemon = True
            self._timer.start()

    def _expired(self):
        sys.stderr.write("host: watchdog expired (loop stalled %.1f s): resetting\n" % self.timeout)
        sys.stderr.flush()
        os._exit(EXIT_WATCHDOG)

