"""digitalio for the device bench: host/cp/digitalio.py without its test hooks (a pin name built per read, a
control file looked up), which made a button poll cost 3 ms of S3 time here where the device reads a register."""


class Direction:
    INPUT = "INPUT"
    OUTPUT = "OUTPUT"


class Pull:
    UP = "UP"
    DOWN = "DOWN"


class DriveMode:
    PUSH_PULL = "PUSH_PULL"
    OPEN_DRAIN = "OPEN_DRAIN"


class DigitalInOut:
    """A pin as input (it reads its pull: nobody presses the bench's button) or output."""

    def __init__(self, pin):
        self._pin = pin
        self.direction = Direction.INPUT
        self.pull = None
        self._out = False
        self._level = False

    def switch_to_input(self, pull=None):
        self.direction = Direction.INPUT
        self.pull = pull
        self._level = pull == Pull.UP

    def switch_to_output(self, value=False, drive_mode=DriveMode.PUSH_PULL):
        self.direction = Direction.OUTPUT
        self._out = value

    @property
    def value(self):
        return self._out if self.direction == Direction.OUTPUT else self._level

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
