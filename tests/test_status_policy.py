"""The LED follows the firmware's health: startup, OK with readings, error when the meter is silent."""

from core.bus import Bus
from core.module import FAILED, Module
from core.supervisor import Supervisor
from drivers.status_led import StatusLed
from services.system.status_policy import StatusPolicy
from tests.steppedclock import SteppedClock


class Pixels(list):
    def __init__(self):
        list.__init__(self, [(0, 0, 0)])

    def show(self):
        pass


def make():
    clock = SteppedClock()
    bus = Bus()
    led = StatusLed(Pixels())
    sup = Supervisor(clock)
    pol = StatusPolicy(bus, led, sup)
    return pol, bus, led, sup, clock


def test_startup_then_ok_then_error_when_stale_then_ok_again():
    pol, bus, led, _sup, clock = make()
    pol.poll(clock())
    assert led.current() == "STARTUP"
    clock.advance(3000)
    bus.publish("reading", object())
    pol.poll(clock())
    assert led.current() == "OK"
    bus.publish("reading", None)          # the pipeline's stale marker
    pol.poll(clock())
    assert led.current() == "ERROR"
    bus.publish("reading", object())
    pol.poll(clock())
    assert led.current() == "OK"


def test_no_meter_at_all_becomes_error_after_startup_grace():
    pol, _bus, led, _sup, clock = make()
    pol.poll(clock())
    clock.advance(StatusPolicy.startup_ms - 1)
    pol.poll(clock())
    assert led.current() == "STARTUP"
    clock.advance(2)
    pol.poll(clock())
    assert led.current() == "ERROR"


def test_failed_module_is_an_error_and_reset_pending_still_wins():
    pol, bus, led, sup, clock = make()

    class Dead(Module):
        pass

    d = Dead()
    d.state = FAILED
    sup.add(d)
    bus.publish("reading", object())
    pol.poll(clock())
    assert led.current() == "ERROR"
    led.set("RESET_PENDING")
    pol.poll(clock())
    assert led.current() == "RESET_PENDING"


def test_no_meter_for_days_stays_error_across_the_tick_wrap():
    """The startup grace must not come back when the wrap makes the start stamp look recent (or in the future)."""
    pol, _bus, led, _sup, clock = make()
    pol.poll(clock())
    for _ in range(520):  # more than a whole tick period (2**29 ms) without a reading, polled coarsely
        clock.advance(1 << 20)
        pol.poll(clock())
        assert led.current() == "ERROR"
    clock.advance((1 << 29) - 520 * (1 << 20) + 1000)  # the start stamp now looks 1 s old
    pol.poll(clock())
    assert led.current() == "ERROR"


class FakeWifi:
    """What the policy reads of the WifiManager: its state and since when the station is not joined."""
    state = "OK"
    down_since = None


def test_a_wifi_set_up_but_not_joined_dims_the_led_yellow_not_fine_green():
    """Issue 37: a wrong password stored, the device off the network, and the LED said "fine · green"."""
    clock = SteppedClock()
    bus = Bus()
    led = StatusLed(Pixels())
    wifi = FakeWifi()
    pol = StatusPolicy(bus, led, Supervisor(clock), wifi=lambda: wifi)
    bus.publish("reading", object())
    pol.poll(clock())
    assert led.current() == "OK"
    wifi.state, wifi.down_since = "WARN", clock()           # set up, not joined
    clock.advance(StatusPolicy.wifi_grace_ms - 1)
    pol.poll(clock())
    assert led.current() == "OK"                           # a reconnect takes seconds: no note for it
    clock.advance(2)
    pol.poll(clock())
    info = led.info()
    assert led.current() == "INFO" and info["color"] == "yellow" and info["mode"] == "dimmed"
    bus.publish("reading", None)                           # a silent meter still wins
    pol.poll(clock())
    assert led.current() == "ERROR"
    bus.publish("reading", object())
    wifi.state, wifi.down_since = "OK", None               # joined again
    pol.poll(clock())
    assert led.current() == "OK"


def test_no_wifi_manager_yet_is_no_note():
    clock = SteppedClock()
    bus = Bus()
    led = StatusLed(Pixels())
    pol = StatusPolicy(bus, led, Supervisor(clock), wifi=lambda: None)
    bus.publish("reading", object())
    pol.poll(clock())
    assert led.current() == "OK"
