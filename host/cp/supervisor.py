"""Stand-in for supervisor: ticks_ms on the simulated clock, reload(), runtime."""

import _hostenv

_TICKS_PERIOD = 1 << 29


def ticks_ms():
    """Milliseconds on the simulated clock, wrapping at 2**29 like the device (starts near the wrap to catch bugs)."""
    return (int(_hostenv.sim_seconds() * 1000) + _TICKS_PERIOD - 65_000) % _TICKS_PERIOD


def reload():
    """Soft reload: rerun code.py."""
    raise _hostenv.HostReset("reload")


class _Runtime:
    serial_connected = True
    usb_connected = True
    autoreload = False


runtime = _Runtime()

