"""Message queue: bounded drop-oldest rings per subscriber plus a latest-value store."""


class Ring:
    """Fixed-capacity FIFO; pushing into a full ring drops the oldest entry and counts it."""

    def __init__(self, capacity):
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self._items = [None] * capacity
        self._head = 0  # index of the oldest entry
        self._len = 0
        self.capacity = capacity
        self.dropped = 0
        self.pushed = 0

    def __len__(self):
        return self._len

    def push(self, item):
        """Append without blocking; a full ring loses its oldest entry."""
        cap = self.capacity
        if self._len == cap:
            self._items[self._head] = item
            self._head = (self._head + 1) % cap
            self.dropped += 1
        else:
            self._items[(self._head + self._len) % cap] = item
            self._len += 1
        self.pushed += 1

    def pop(self):
        """Remove and return the oldest entry, or None when empty."""
        if not self._len:
            return None
        item = self._items[self._head]
        self._items[self._head] = None
        self._head = (self._head + 1) % self.capacity
        self._len -= 1
        return item

    def clear(self):
        """Drop every entry without counting it as a loss."""
        while self._len:
            self.pop()


class Bus:
    """Topic-based publish/subscribe; publish never blocks and keeps the latest value per topic."""

    def __init__(self):
        self._subs = {}
        self._latest = {}

    def subscribe(self, topic, capacity=8):
        """Return a new ring that receives every later message on topic."""
        ring = Ring(capacity)
        self._subs.setdefault(topic, []).append(ring)
        return ring

    def unsubscribe(self, topic, ring):
        """Stop delivering topic to ring (a subscriber that is let go, e.g. an emulation switched off)."""
        rings = self._subs.get(topic)
        if rings and ring in rings:
            rings.remove(ring)

    def publish(self, topic, message):
        """Deliver message to every subscriber of topic and remember it as the latest."""
        self._latest[topic] = message
        rings = self._subs.get(topic)
        if rings:
            for ring in rings:
                ring.push(message)

    def latest(self, topic, default=None):
        """The last message published on topic (readers such as HTTP and Modbus use this)."""
        return self._latest.get(topic, default)

    def dropped(self):
        """Total messages lost to full rings, per topic."""
        out = {}
        for topic, rings in self._subs.items():
            n = 0
            for ring in rings:
                n += ring.dropped
            out[topic] = n
        return out
