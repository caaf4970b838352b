"""Status LED: the spec's eight states by priority, with solid, dimmed and smoothly pulsing modes."""

import math

from core.module import Module

# name: (priority, colour name, (r, g, b), mode) — device-api.md "Status LED states".
STATES = {
    "OK": (1, "green", (0, 255, 0), "solid"),
    "STARTUP": (2, "yellow", (255, 180, 0), "solid"),
    "INFO": (3, "yellow", (255, 180, 0), "dimmed"),
    "BLE_ACTIVE": (4, "blue", (0, 0, 255), "pulsing"),
    "BLE_CONNECTED": (5, "magenta", (255, 0, 255), "pulsing"),
    "OTA_ACTIVE": (6, "magenta", (255, 0, 255), "solid"),
    "ERROR": (7, "red", (255, 0, 0), "pulsing"),
    "RESET_PENDING": (8, "red", (255, 0, 0), "solid"),
}

_STEPS = 64
# One pulse period as a raised cosine (0..255): brightness changes smoothly, never jumps like a blink.
_PULSE = bytes(int(round(255 * (1 - math.cos(2 * math.pi * i / _STEPS)) / 2)) for i in range(_STEPS))


def _scale(rgb, level):
    return ((rgb[0] * level) // 255, (rgb[1] * level) // 255, (rgb[2] * level) // 255)


class StatusLed(Module):
    """pixels: anything indexable with show() (a neopixel.NeoPixel with auto_write=False)."""

    name = "led"
    poll_every_ms = 50     # blinks are 100 ms and slower
    pulse_period_ms = 2000
    dim_level = 40          # of 255: "dimmed"
    pulse_floor = 24        # a pulsing LED never goes fully dark, so it is not mistaken for off

    def __init__(self, pixels, enabled=True):
        Module.__init__(self)
        self._pixels = pixels
        self.enabled = enabled
        self._active = {"STARTUP"}
        self._shown = None
        self._phase_origin = None

    def set(self, state, on=True):
        """Turn a state on or off; unknown names are an error."""
        if state not in STATES:
            raise ValueError("unknown LED state: %s" % state)
        if on:
            self._active.add(state)
        else:
            self._active.discard(state)

    def is_active(self, state):
        return state in self._active

    def current(self):
        """The highest-priority active state, or None."""
        best = None
        for s in self._active:
            if best is None or STATES[s][0] > STATES[best][0]:
                best = s
        return best

    def color_at(self, now_ms):
        """RGB the LED shows at now_ms."""
        state = self.current()
        if not self.enabled or state is None:
            return (0, 0, 0)
        _prio, _name, rgb, mode = STATES[state]
        if mode == "solid":
            return rgb
        if mode == "dimmed":
            return _scale(rgb, self.dim_level)
        idx = ((now_ms % self.pulse_period_ms) * _STEPS) // self.pulse_period_ms
        level = self.pulse_floor + (_PULSE[idx] * (255 - self.pulse_floor)) // 255
        return _scale(rgb, level)

    def poll(self, now_ms):
        """Write the pixel only when its colour changes (a NeoPixel write costs ~30 µs and a redraw)."""
        rgb = self.color_at(now_ms)
        if rgb != self._shown:
            self._pixels[0] = rgb
            self._pixels.show()
            self._shown = rgb

    def stop(self):
        try:
            self._pixels[0] = (0, 0, 0)
            self._pixels.show()
        except Exception:
            pass
        self._shown = None

    def info(self):
        """The /system/led document."""
        state = self.current() or "OK"
        prio, colour, rgb, mode = STATES[state]
        active = sorted(self._active, key=lambda s: -STATES[s][0])
        return {
            "status": state,
            "priority": prio,
            "color": colour,
            "mode": mode,
            "rgb": list(rgb) if self.enabled else [0, 0, 0],
            "enabled": self.enabled,
            "active_statuses": active,
        }

    def describe(self):
        d = Module.describe(self)
        d["status"] = self.current()
        return d
