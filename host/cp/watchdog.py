"""Stand-in for watchdog: a real timer that resets the runtime when the firmware stops feeding it."""

import os
import sys
import threading
import time


EXIT_WATCHDOG = 75


class WatchDogMode:
    RAISE = "RAISE"
    RESET = "RESET"


class WatchDogTimeout(Exception):
    """Raised in RAISE mode on the device."""


# What an expiry does: None ends the process with EXIT_WATCHDOG; the host runtime sets a function that resets the
# firmware in its main thread instead (a chip reset: boot.py runs again and counts the boot, docs/ota.md).
_on_expire = None


class WatchDogTimer:
    """microcontroller.watchdog: set timeout (real seconds) and mode, then feed(). Setting the mode arms it, as on
    the chip: the countdown runs from there, so a start that hangs before its first feed resets too. A test may
    shorten the timeout through the host control watchdog_s."""

    def __init__(self):
        self.timeout = 0.0
        self._mode = None
        self.feeds = 0
        self._timer = None

    @property
    def mode(self):
        return self._mode

    @mode.setter
    def mode(self, mode):
        self._mode = mode
        self._arm()

    def feed(self):
        if self._mode is None:
            raise ValueError("WatchDogTimer is not initialized")
        self.feeds += 1
        self._arm()

    def _seconds(self):
        import _hostenv

        forced = _hostenv.control("watchdog_s")
        return float(forced) if forced else self.timeout

    def _arm(self):
        # One watching thread per arming, its deadline moved on by each feed: the loop feeds every cycle, and a
        # thread started per feed cost 250 us of real time each (a fifth of a cycle at --speed 3600).
        if self._mode == WatchDogMode.RESET and self.timeout > 0:
            deadline = time.monotonic() + self._seconds()
            if self._timer is None:
                self._timer = _Watch(self._expired, deadline)
                self._timer.start()
            else:
                self._timer.move(deadline)
        elif self._timer:
            self._timer.cancel()
            self._timer = None

    def _expired(self):
        sys.stderr.write("host: watchdog expired (not fed for %.1f s): resetting\n" % self._seconds())
        sys.stderr.flush()
        self._timer = None
        if _on_expire is not None:
            _on_expire()
        else:
            os._exit(EXIT_WATCHDOG)


class _Watch(threading.Thread):
    """Calls expired() once the deadline (time.monotonic) passes, unless cancel() comes first."""

    def __init__(self, expired, deadline):
        threading.Thread.__init__(self, daemon=True)
        self._expired = expired
        self._deadline = deadline
        self._cancelled = False
        self._cond = threading.Condition()

    def move(self, deadline):
        earlier = deadline < self._deadline
        self._deadline = deadline
        if earlier:
            with self._cond:
                self._cond.notify()

    def cancel(self):
        self._cancelled = True
        with self._cond:
            self._cond.notify()

    def run(self):
        while not self._cancelled:
            left = self._deadline - time.monotonic()
            if left <= 0:
                self._expired()
                return
            with self._cond:
                if not self._cancelled:
                    self._cond.wait(left)
