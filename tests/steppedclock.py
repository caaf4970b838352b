"""A clock tests step by hand, wrapping like adafruit_ticks."""

_PERIOD = 1 << 29


class SteppedClock:
    """ticks_ms() returns a value the test advances; starts just below the wrap to catch unsafe comparisons."""

    def __init__(self, start=_PERIOD - 5000):
        self.now = start % _PERIOD

    def __call__(self):
        return self.now

    def advance(self, ms):
        self.now = (self.now + ms) % _PERIOD
