"""Lifecycle: short press flushes and opens BLE, 10 s hold wipes settings and restarts, reboot flushes first."""

import os

from core.bus import Bus
from drivers.status_led import StatusLed
from services.system.lifecycle import Lifecycle
from tests.steppedclock import SteppedClock


class Pixels(list):
    def __init__(self):
        list.__init__(self, [(0, 0, 0)])

    def show(self):
        pass


class Flushable:
    def __init__(self, fail=False):
        self.flushes = 0
        self.fail = fail

    def flush(self):
        self.flushes += 1
        if self.fail:
            raise OSError(28, "no space")


def make(tmp_path, flushables):
    bus = Bus()
    led = StatusLed(Pixels())
    resets = []
    paths = []
    for name in ("settings.json", "tokens.json", "mqtt_ca.pem"):
        p = tmp_path / name
        p.write_text("{}")
        paths.append(str(p))
    history = tmp_path / "history_hr.bin"
    history.write_bytes(b"records")
    lc = Lifecycle(bus, led, lambda: resets.append(1), flushables=flushables, wipe_paths=paths)
    return lc, bus, led, resets, paths, history


def test_short_press_flushes_and_opens_ble_window(tmp_path):
    f = Flushable()
    lc, bus, _led, resets, paths, _h = make(tmp_path, [f])
    out = bus.subscribe("event", 8)
    bus.publish("event", ("button", "short"))
    lc.poll(0)
    assert f.flushes == 1
    assert out.pop() == ("button", "short") and out.pop() == ("ble", "open_window")
    assert resets == [] and all(os.path.exists(p) for p in paths)


def test_factory_reset_shows_red_wipes_settings_keeps_history_then_restarts(tmp_path):
    f = Flushable()
    lc, bus, led, resets, paths, history = make(tmp_path, [f])
    # the copies a cut save leaves (core/durable_file.py): a left .new would bring the settings back
    copies = [p + suffix for p in paths for suffix in (".new", ".tmp", ".bak")]
    for c in copies:
        open(c, "w").write("{}")
    clock = SteppedClock()
    bus.publish("event", ("button", "reset"))
    lc.poll(clock())
    assert led.current() == "RESET_PENDING"
    assert f.flushes == 1
    assert not any(os.path.exists(p) for p in paths + copies)
    assert history.read_bytes() == b"records"
    clock.advance(1000)
    lc.poll(clock())
    assert resets == []                       # the red LED stays visible first
    clock.advance(1100)
    lc.poll(clock())
    assert resets == [1]


def test_reboot_request_flushes_then_restarts_after_delay(tmp_path):
    f = Flushable()
    lc, _bus, _led, resets, paths, _h = make(tmp_path, [f])
    clock = SteppedClock()
    lc.poll(clock())
    lc.request_reboot("api")
    assert f.flushes == 1 and resets == []
    lc.request_reboot("api")                  # a second request does not flush twice
    assert f.flushes == 1
    clock.advance(600)
    lc.poll(clock())
    assert resets == [1]
    assert all(os.path.exists(p) for p in paths)


def test_failing_flush_does_not_stop_the_others_or_the_restart(tmp_path):
    bad, good = Flushable(fail=True), Flushable()
    lc, _bus, _led, resets, _paths, _h = make(tmp_path, [bad, good])
    clock = SteppedClock()
    lc.poll(clock())
    lc.request_reboot("api")
    assert good.flushes == 1 and lc.counters["flush_errors"] == 1
    clock.advance(600)
    lc.poll(clock())
    assert resets == [1]


def test_factory_reset_with_files_already_missing(tmp_path):
    lc, bus, _led, resets, paths, _h = make(tmp_path, [])
    for p in paths:
        os.remove(p)
    bus.publish("event", ("button", "reset"))
    lc.poll(0)
    lc.poll(5000)
    assert resets == [1]
