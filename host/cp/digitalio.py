"""Stand-in for digitalio: DigitalInOut whose input level the host (or a test) sets."""

import _hostenv

_levels = {}  # pin name -> bool, set by host tests to press buttons


class Direction:
    INPUT = "INPUT"
    OUTPUT = "OUTPUT"


class Pull:
    UP = "UP"
    DOWN = "DOWN"


class DriveMode:
    PUSH_PULL = "PUSH_PULL"
    OPEN_DRAIN = "OPEN_DRAIN"


def set_level(pin, value):
    """Host hook: drive the level a pin reads (a pressed BOOT button reads False)."""
    _levels[repr(pin)] = bool(value)


class DigitalInOut:
    """A pin as input (with pull) or output."""

    def __init__(self, pin):
        self._pin = pin
        self.direction = Direction.INPUT
        self.pull = None
        self._out = False

    def switch_to_input(self, pull=None):
        self.direction = Direction.INPUT
        self.pull = pull

    def switch_to_output(self, value=False, drive_mode=DriveMode.PUSH_PULL):
        self.direction = Direction.OUTPUT
        self._out = value

    @property
    def value(self):
        if self.direction == Direction.OUTPUT:
            return self._out
        name = repr(self._pin)
        # A test presses a button from outside the process by writing 0/1 to .host_control/pin_<NAME>.
        ctl = _hostenv.control("pin_" + name.split(".")[-1])
        if ctl in ("0", "1"):
            return ctl == "1"
        return _levels.get(name, self.pull == Pull.UP)

    @value.setter
    def value(self, v):
        if self.direction != Direction.OUTPUT:
            raise AttributeError("Cannot set value when direction is input.")
        self._out = bool(v)

    def deinit(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.deinit()
