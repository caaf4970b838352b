"""Decides which LED states are active from the firmware's health: startup, OK, meter or module error, and the
note (INFO) while the WiFi is set up but not joined."""

from core.elapsed import fresh
from core.module import FAILED, WARN, Module


class StatusPolicy(Module):
    """bus (latest "reading"), led (StatusLed), supervisor (combined module state), wifi: a callable giving the
    WifiManager or None (it is wired after this policy)."""

    name = "status"
    poll_every_ms = 100     # the LED's meaning changes at human pace
    startup_ms = 15000   # yellow until the first reading or this long: the meter needs a few telegrams
    wifi_grace_ms = 30000   # a WiFi set up but not joined this long dims the LED yellow (a reconnect takes seconds)

    def __init__(self, bus, led, supervisor, wifi=None):
        Module.__init__(self)
        self._bus = bus
        self._led = led
        self._sup = supervisor
        self._wifi = wifi
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
        # Off the network (a wrong password saved, the router gone): not "fine · green" (issue 37). WARN: profiles
        # exist and the station is not joined; a stamp older than the ticks can tell counts as old (core/elapsed).
        w = self._wifi() if self._wifi is not None else None
        down = w is not None and w.state == WARN and w.down_since is not None
        led.set("INFO", down and not fresh(w.down_since, now_ms, self.wifi_grace_ms))

    def describe(self):
        d = Module.describe(self)
        d["led"] = self._led.current()
        return d
