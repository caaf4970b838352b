"""Wrap-safe age checks on adafruit_ticks stamps: a stamp that appears to lie in the future is stale, never recent."""

from adafruit_ticks import ticks_diff


def fresh(stamp, now_ms, limit_ms):
    """True while stamp is less than limit_ms old.

    Ticks wrap every 2**29 ms and ticks_diff is only meaningful within +-2**28 ms: a stamp older than that comes
    out negative ("in the future"), and that can only mean it is very old. The caller must still drop a stale
    stamp when it sees it (in poll), since 2**29 ms later the same stamp looks recent again.
    """
    age = ticks_diff(now_ms, stamp)
    return 0 <= age < limit_ms
