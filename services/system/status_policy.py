"""Decides which LED states are active from the firmware's health: startup, OK, meter or module error."""

from core.elapsed import fresh
from core.module import FAILED, Module


class StatusPolicy(Module):
    """bus (latest "reading"), led (StatusLed), supervisor (combined module state)."""

    name = "status"
    poll_every_ms = 100     # the LED's meaning changes at human pace
    startup_ms = 15000   # yellow until the first reading or this long: the meter needs a few telegrams

    def __init__(self, bus, led, supervisor):
        Module.__init__(self)
        self._bus = bus
        self._led = led
        self._sup = supervisor
        self._started = None
        self._grace_over = False

    def poll(self, now_ms):
        if self._started is None:
            self._started = now_ms
        reading = self._bus.latest("reading")
        if reading is not None:
            self._grace_over = True
        if not self._grace_over and not fresh(self._started, now_ms, self.startup_ms):
            self._grace_over = True  # for good: days without a meter must not wrap back to it
        starting = not self._grace_over
        led = self._led
        led.set("STARTUP", starting)
        # A silent meter (no telegram for 10 s: the pipeline publishes None) or a failed module is an error.
        error = (not starting and reading is None) or self._sup.state() == FAILED
        led.set("ERROR", error)
        led.set("OK", not starting and not error)

    def describe(self):
        d = Module.describe(self)
        d["led"] = self._led.current()
        return d
