"""The message queue: drop-oldest rings, counters, latest-value store."""

import pytest

from core.bus import Bus, Ring


def test_ring_is_fifo():
    r = Ring(3)
    for i in range(3):
        r.push(i)
    assert [r.pop(), r.pop(), r.pop(), r.pop()] == [0, 1, 2, None]
    assert r.dropped == 0


def test_full_ring_drops_oldest_and_counts():
    r = Ring(3)
    for i in range(7):
        r.push(i)
    assert len(r) == 3
    assert r.dropped == 4
    assert r.pushed == 7
    assert [r.pop(), r.pop(), r.pop()] == [4, 5, 6]


def test_ring_wraps_many_times_without_growing():
    r = Ring(4)
    out = []
    for i in range(1000):
        r.push(i)
        if i % 3 == 0:
            out.append(r.pop())
    assert len(r._items) == 4
    assert out == sorted(out)


def test_ring_rejects_zero_capacity():
    with pytest.raises(ValueError):
        Ring(0)


def test_bus_delivers_to_every_subscriber_and_keeps_latest():
    bus = Bus()
    a = bus.subscribe("reading", 2)
    b = bus.subscribe("reading", 5)
    other = bus.subscribe("event", 2)
    for i in range(4):
        bus.publish("reading", i)
    assert bus.latest("reading") == 3
    assert [a.pop(), a.pop(), a.pop()] == [2, 3, None]
    assert [b.pop() for _ in range(4)] == [0, 1, 2, 3]
    assert other.pop() is None
    assert bus.dropped() == {"reading": 2, "event": 0}


def test_publish_without_subscribers_only_sets_latest():
    bus = Bus()
    bus.publish("x", {"a": 1})
    assert bus.latest("x") == {"a": 1}
    assert bus.latest("missing", "dflt") == "dflt"


def test_none_is_a_valid_latest_value():
    # A stale meter publishes None: readers must see None, not the old reading.
    bus = Bus()
    bus.publish("reading", 5)
    bus.publish("reading", None)
    assert bus.latest("reading", "dflt") is None
