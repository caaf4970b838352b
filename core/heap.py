"""The free heap as guards and reports read it: gc.mem_free() at most once a second (it walks the whole allocation
table: ~25 ms on an ESP32-S3 with a 1 MB heap, and every HTTP request asked it for the low-heap 503)."""

from adafruit_ticks import ticks_diff


class FreeHeap:
    """read: callable -> free bytes (gc.mem_free); ticks: callable -> ms. Call it for the bytes free, at most
    max_age_ms old."""

    max_age_ms = 1000

    def __init__(self, read, ticks):
        self._read = read
        self._ticks = ticks
        self._at = None
        self._value = 0

    def __call__(self):
        now = self._ticks()
        if self._at is None or not 0 <= ticks_diff(now, self._at) < self.max_age_ms:
            self._value = self._read()
            self._at = now
        return self._value
