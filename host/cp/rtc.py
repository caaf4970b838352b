"""Stand-in for rtc.RTC: a wall clock the firmware sets after NTP; the host's own clock is untouched."""

import time

import _hostenv

_offset = None  # seconds: wall = sim_seconds + _offset; None until the firmware sets it


class RTC:
    """RTC().datetime reads/writes a time.struct_time in UTC."""

    calibration = 0

    @property
    def datetime(self):
        if _offset is None:
            return time.gmtime(946684800)  # an unset RTC reads 2000-01-01 like the device
        return time.gmtime(int(_hostenv.sim_seconds() + _offset))

    @datetime.setter
    def datetime(self, value):
        global _offset
        _offset = _epoch(value) - _hostenv.sim_seconds()


def _epoch(st):
    import calendar

    return calendar.timegm(tuple(st)[:6] + (0, 0, 0))


def set_time_source(rtc):
    """Not used by this firmware (it sets the RTC after its own NTP query)."""
