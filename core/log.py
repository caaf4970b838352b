"""Logging into a RAM ring: costs nothing below the level, formats with % only when kept."""

from core.uptime import Uptime

_LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40}


class Log:
    """Keeps the last `capacity` entries (uptime ms, level, text); sinks get every kept entry (e.g. the flash log).

    uptime: a core.uptime.Uptime (code.py has the supervisor poll it). Entries carry uptime rather than ticks: a
    ticks stamp of an entry kept for days cannot be told apart from a recent one after the wrap.
    """

    def __init__(self, capacity=64, level="info", echo=None, uptime=None):
        self.uptime = uptime if uptime is not None else Uptime()
        self._ring = [None] * capacity
        self._next = 0
        self._count = 0
        self.level = _LEVELS[level]
        self._echo = echo  # e.g. print on the host runtime and the serial console
        self.sinks = []
        self.dropped = 0

    def enabled(self, level):
        """True when a message at level would be kept."""
        return _LEVELS.get(level, 40) >= self.level

    def log(self, level, msg, *args):
        """Keep msg % args at level (cheap when the level is off)."""
        if _LEVELS.get(level, 40) < self.level:
            return
        text = (msg % args) if args else msg
        entry = (self.uptime.ms(), level, text)
        if self._count == len(self._ring):
            self.dropped += 1
        else:
            self._count += 1
        self._ring[self._next] = entry
        self._next = (self._next + 1) % len(self._ring)
        if self._echo is not None:
            self._echo("%s: %s" % (level, text))
        for sink in self.sinks:
            sink(entry)

    def info(self, msg, *args):
        self.log("info", msg, *args)

    def warning(self, msg, *args):
        self.log("warning", msg, *args)

    def error(self, msg, *args):
        self.log("error", msg, *args)

    def entries(self):
        """Kept entries, oldest first."""
        n = len(self._ring)
        start = (self._next - self._count) % n
        for i in range(self._count):
            yield self._ring[(start + i) % n]
