"""Status LED: the spec's eight states by priority, with solid, dimmed and smoothly pulsing modes, and the token
recovery code blinked digit by digit while a recovery window is open (show_code)."""

import math

from adafruit_ticks import ticks_diff

from core.elapsed import fresh
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


# The recovery code (services/api/auth.py: digits 1..9): a cycle starts with CODE_MARK_MS of solid cyan, then
# CODE_GAP_MS dark; each digit is that many flashes (CODE_FLASH_ON_MS lit in every CODE_FLASH_MS), each digit
# followed by CODE_GAP_MS dark. Cyan is no state's colour, so the code cannot be mistaken for a state.
CODE_RGB = (0, 255, 255)
CODE_MARK_MS = 2000
CODE_GAP_MS = 1500
CODE_FLASH_MS = 600
CODE_FLASH_ON_MS = 300


def code_cycle_ms(code):
    """How long one showing of code takes, start mark included."""
    ms = CODE_MARK_MS + CODE_GAP_MS
    for ch in code:
        ms += (ord(ch) - 48) * CODE_FLASH_MS + CODE_GAP_MS
    return ms


def code_lit(code, t):
    """True when the LED is lit t ms (0 <= t) into the showing of code, repeated every code_cycle_ms(code)."""
    t %= code_cycle_ms(code)
    if t < CODE_MARK_MS:
        return True
    t -= CODE_MARK_MS + CODE_GAP_MS
    if t < 0:
        return False
    for ch in code:
        flashes = (ord(ch) - 48) * CODE_FLASH_MS
        if t < flashes:
            return t % CODE_FLASH_MS < CODE_FLASH_ON_MS
        t -= flashes + CODE_GAP_MS
        if t < 0:
            return False
    return False


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
        self._code = None        # (digits, ticks shown from, for how long in ms) while a recovery code is blinked

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

    def show_code(self, code, now_ms, for_ms):
        """Blink the recovery code (digits 1..9) from now_ms for for_ms, or stop with code None. It is shown above
        every state but RESET_PENDING, and also with ledEnable off: the owner pressed the button to read it, and it
        lasts only the recovery window. It never appears in info() or describe()."""
        self._code = None if code is None else (code, now_ms, for_ms)

    def showing_code(self, now_ms):
        """True while a recovery code is blinked (dropped once its time is over, wrap-safe)."""
        c = self._code
        if c is not None and not fresh(c[1], now_ms, c[2]):
            self._code = c = None
        return c is not None

    def color_at(self, now_ms):
        """RGB the LED shows at now_ms."""
        state = self.current()
        if state != "RESET_PENDING" and self.showing_code(now_ms):
            code = self._code[0]
            return CODE_RGB if code_lit(code, ticks_diff(now_ms, self._code[1])) else (0, 0, 0)
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
        d["showing_code"] = self._code is not None   # that one is blinked, never which
        return d
