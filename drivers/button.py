"""Reset button: debounced; a short press and a 10 s hold become events on the bus."""

from adafruit_ticks import ticks_diff

from core.module import Module


class Button(Module):
    """pin: anything with .value (False while pressed: the BOOT button pulls to ground); bus gets ("button", kind)."""

    name = "button"
    poll_every_ms = 50     # debouncing needs tens of ms, not every cycle
    debounce_ms = 30
    hold_ms = 10000       # spec: factory reset after 10 s
    short_min_ms = 50     # shorter contacts are noise

    def __init__(self, pin, bus, active_low=True):
        Module.__init__(self)
        self._pin = pin
        self._bus = bus
        self._active_low = active_low
        self._raw = False
        self._raw_since = None
        self.pressed = False
        self._pressed_at = None
        self._held_fired = False

    def _read(self):
        v = bool(self._pin.value)
        return (not v) if self._active_low else v

    def poll(self, now_ms):
        raw = self._read()
        if raw != self._raw or self._raw_since is None:
            self._raw = raw
            self._raw_since = now_ms
        stable = ticks_diff(now_ms, self._raw_since) >= self.debounce_ms
        if stable and raw != self.pressed:
            self.pressed = raw
            if raw:
                self._pressed_at = self._raw_since
                self._held_fired = False
            else:
                held = ticks_diff(self._raw_since, self._pressed_at)
                if not self._held_fired and held >= self.short_min_ms:
                    self.count("short_presses")
                    self._bus.publish("event", ("button", "short"))
        if self.pressed and not self._held_fired and ticks_diff(now_ms, self._pressed_at) >= self.hold_ms:
            # Fire while still held: the LED turns red at 10 s, the user need not guess when to let go.
            self._held_fired = True
            self.count("long_holds")
            self._bus.publish("event", ("button", "reset"))
