"""Button: debounce, short press, 10 s hold, events on the bus."""

from core.bus import Bus
from drivers.button import Button
from tests.steppedclock import SteppedClock


class Pin:
    value = True  # pulled up: released


def make():
    pin, bus, clock = Pin(), Bus(), SteppedClock()
    events = bus.subscribe("event", 16)
    return Button(pin, bus), pin, events, clock


def run(btn, clock, ms, step=10):
    for _ in range(ms // step):
        btn.poll(clock())
        clock.advance(step)


def drain(ring):
    out = []
    while True:
        e = ring.pop()
        if e is None:
            return out
        out.append(e)


def test_short_press_publishes_short():
    btn, pin, ev, clock = make()
    run(btn, clock, 100)
    pin.value = False
    run(btn, clock, 200)
    pin.value = True
    run(btn, clock, 100)
    assert drain(ev) == [("button", "short")]


def test_bouncing_contacts_make_one_press():
    btn, pin, ev, clock = make()
    run(btn, clock, 50)
    for v in (False, True, False, True, False):   # 5 ms bounces
        pin.value = v
        run(btn, clock, 5, step=5)
    run(btn, clock, 300)
    for v in (True, False, True):
        pin.value = v
        run(btn, clock, 5, step=5)
    run(btn, clock, 100)
    assert drain(ev) == [("button", "short")]


def test_glitch_shorter_than_debounce_is_ignored():
    btn, pin, ev, clock = make()
    run(btn, clock, 50)
    pin.value = False
    run(btn, clock, 20)
    pin.value = True
    run(btn, clock, 200)
    assert drain(ev) == []


def test_ten_second_hold_fires_reset_while_held_and_no_short_on_release():
    btn, pin, ev, clock = make()
    run(btn, clock, 50)
    pin.value = False
    run(btn, clock, 9900)
    assert drain(ev) == []
    run(btn, clock, 300)
    assert drain(ev) == [("button", "reset")]
    run(btn, clock, 5000)
    pin.value = True
    run(btn, clock, 200)
    assert drain(ev) == []
    assert btn.counters == {"long_holds": 1}


def test_works_across_the_ticks_wrap():
    btn, pin, ev, clock = make()
    clock.now = (1 << 29) - 3000
    pin.value = False
    run(btn, clock, 10500)
    assert drain(ev) == [("button", "reset")]
