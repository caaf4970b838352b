"""rtc for the device bench: the host stand-in's RTC in integers (30-bit floats cannot hold Unix seconds) and
without CPython's calendar module."""

import time

import _hostenv

_offset = None  # seconds: wall = device seconds + _offset; None until the firmware sets it


class RTC:
    """RTC().datetime reads/writes a time.struct_time in UTC."""

    calibration = 0

    @property
    def datetime(self):
        if _offset is None:
            return time.gmtime(946684800)  # an unset RTC reads 2000-01-01 like the device
        return time.gmtime(_hostenv.sim_ms() // 1000 + _offset)

    @datetime.setter
    def datetime(self, value):
        global _offset
        _offset = time.mktime(tuple(value)[:8] + (-1,)) - _hostenv.sim_ms() // 1000


def set_time_source(rtc):
    """Not used by this firmware (it sets the RTC after its own NTP query)."""
