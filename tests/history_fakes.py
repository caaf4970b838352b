"""Fakes for the history tests: a clock with a real tz rule and the time a test sets, readings of a simulated meter."""

from core.tz import Rule
from meter.reading import Reading

BERLIN = "CET-1CEST,M3.5.0,M10.5.0/3"


class FakeClock:
    """core.clock.Clock's interface: synced, time() (UTC s or None), offset_min(utc), local(utc)."""

    def __init__(self, utc=None, rule=BERLIN):
        self.rule = Rule(rule)
        self.utc = utc
        self.synced = utc is not None

    def time(self):
        return self.utc if self.synced else None

    def offset_min(self, utc):
        return self.rule.offset_min(utc)

    def local(self, utc):
        return self.rule.local(utc)


class FakeSettings:
    """settings.get(dotted, default) over a flat dict."""

    def __init__(self, values=None):
        self.values = dict(values or {})

    def get(self, key, default=None):
        return self.values.get(key, default)


def reading(imp_wh10, exp_wh10=None, power_w=None, ts_ms=0):
    """A Reading with import/export in 0.1 Wh (exp10 -1, as SML meters send them) and power in W."""
    values = {"1.8.0": (imp_wh10, -1)}
    if exp_wh10 is not None:
        values["2.8.0"] = (exp_wh10, -1)
    if power_w is not None:
        values["16.7.0"] = (power_w, 0)
    return Reading(ts_ms, values)
