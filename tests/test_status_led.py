"""Status LED: the spec's priority table, solid/dimmed/pulsing modes, ledEnable, pixel writes."""

import pytest

import neopixel
from drivers.status_led import STATES, StatusLed

SPEC = [  # device-api.md "Status LED states": state, colour, mode, priority
    ("OK", "green", "solid", 1),
    ("STARTUP", "yellow", "solid", 2),
    ("INFO", "yellow", "dimmed", 3),
    ("BLE_ACTIVE", "blue", "pulsing", 4),
    ("BLE_CONNECTED", "magenta", "pulsing", 5),
    ("OTA_ACTIVE", "magenta", "solid", 6),
    ("ERROR", "red", "pulsing", 7),
    ("RESET_PENDING", "red", "solid", 8),
]


def make():
    px = neopixel.NeoPixel(None, 1, auto_write=False)
    return StatusLed(px), px


def test_table_matches_spec():
    assert len(STATES) == 8
    for name, colour, mode, prio in SPEC:
        p, c, _rgb, m = STATES[name]
        assert (p, c, m) == (prio, colour, mode), name


@pytest.mark.parametrize("low,high", [(a[0], b[0]) for a in SPEC for b in SPEC if a[3] < b[3]])
def test_highest_priority_wins(low, high):
    led, _ = make()
    led.set("STARTUP", False)
    led.set(high)
    led.set(low)
    assert led.current() == high
    led.set(high, False)
    assert led.current() == low


def test_starts_in_startup_and_unknown_state_is_an_error():
    led, _ = make()
    assert led.current() == "STARTUP"
    with pytest.raises(ValueError):
        led.set("PARTY")


def test_solid_and_dimmed_colours():
    led, px = make()
    led.poll(0)
    assert px.shown[0] == (255, 180, 0)          # STARTUP: yellow solid
    led.set("INFO")
    led.poll(10)
    r, g, b = px.shown[0]
    assert 0 < r < 255 and 0 < g < 180 and b == 0  # dimmed yellow: same hue, lower level
    assert abs(r / g - 255 / 180) < 0.05


def test_pulse_is_smooth_not_a_blink():
    led, _ = make()
    led.set("ERROR")
    levels = [led.color_at(t)[0] for t in range(0, 2000, 10)]
    assert max(levels) >= 250 and min(levels) > 0          # never fully off within a period
    steps = [abs(b - a) for a, b in zip(levels, levels[1:])]
    assert max(steps) <= 12                                # 10 ms apart: small changes only
    assert len(set(levels)) > 30                           # many intermediate levels
    assert led.color_at(0) == led.color_at(2000)           # periodic


def test_disabled_led_is_dark_whatever_the_state():
    led, px = make()
    led.set("ERROR")
    led.enabled = False
    for t in (0, 500, 1000):
        led.poll(t)
        assert px.shown[0] == (0, 0, 0)
    assert led.info()["enabled"] is False and led.info()["rgb"] == [0, 0, 0]


def test_pixel_written_only_on_change():
    led, px = make()
    led.poll(0)
    led.poll(100)
    led.poll(200)
    assert px.show_count == 1


def test_info_document():
    led, _ = make()
    led.set("OK")
    led.set("BLE_ACTIVE")
    info = led.info()
    assert info == {
        "status": "BLE_ACTIVE", "priority": 4, "color": "blue", "mode": "pulsing",
        "rgb": [0, 0, 255], "enabled": True, "active_statuses": ["BLE_ACTIVE", "STARTUP", "OK"],
    }
