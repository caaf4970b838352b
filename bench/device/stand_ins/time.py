"""CircuitPython's time on the unix port, whose built-in time is MicroPython's (no monotonic, no struct_time).

runner.py imports the built-in module before hw/ is on sys.path and hands it over as _rt.
"""

_rt = None   # the unix port's built-in time module, set by runner.py


def monotonic():
    """Seconds as a float (on the device a 30-bit float, which is why the firmware uses ticks instead), on the
    bench's device clock (_hostenv)."""
    import _hostenv

    return _hostenv.sim_ms() / 1000


def monotonic_ns():
    import _hostenv

    return _hostenv.device_us() * 1000


def time():
    return _rt.time()


def sleep(seconds):
    """Device time passes (the bench does not wait: its clock is the device's, see _hostenv)."""
    import _hostenv

    _hostenv.advance(int(seconds * 1000000))


def gmtime(secs=None):
    return struct_time(_rt.gmtime(secs) if secs is not None else _rt.gmtime())


def localtime(secs=None):
    return gmtime(secs)   # CircuitPython keeps no time zone: localtime is UTC


def mktime(t):
    return _rt.mktime(tuple(t))


class struct_time:
    """time.struct_time((year, month, mday, hour, minute, second, weekday, yearday, isdst))."""

    def __init__(self, values):
        values = tuple(values)
        if len(values) < 8:
            raise TypeError("time.struct_time() takes a 9-sequence")
        self._v = values[:8] + ((values[8],) if len(values) > 8 else (-1,))
        (self.tm_year, self.tm_mon, self.tm_mday, self.tm_hour, self.tm_min, self.tm_sec, self.tm_wday,
         self.tm_yday, self.tm_isdst) = self._v

    def __getitem__(self, i):
        return self._v[i]

    def __len__(self):
        return 9

    def __iter__(self):
        return iter(self._v)
