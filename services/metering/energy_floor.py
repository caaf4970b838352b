"""The one rule for energy totals leaving the device (MQTT and the REST API): never zero, negative or falling."""

from meter import obis
from meter.decimal import cmp


class EnergyFloor:
    """Remembers the highest energy total handed out per OBIS code (in RAM, across reconnects and requests);
    a value that is zero, negative or lower is held back: Home Assistant and the WattWaechter integration read a
    drop as a meter reset, and the Energy dashboard would show a spike or a negative delta."""

    def __init__(self):
        self.last = {}
        self.suppressed = 0

    def allow(self, code, m, e):
        """True (and remembered) when this total may be handed out; False (and counted) when held back."""
        if m <= 0:
            self.suppressed += 1
            return False
        prev = self.last.get(code)
        if prev is not None and cmp(m, e, prev[0], prev[1]) < 0:
            self.suppressed += 1
            return False
        self.last[code] = (m, e)
        return True

    def seed(self, code, m, e):
        """Raise the floor to a value handed out before (the broker's retained total from an earlier boot)."""
        prev = self.last.get(code)
        if prev is None or cmp(m, e, prev[0], prev[1]) > 0:
            self.last[code] = (m, e)

    def passes(self, code, mv):
        """allow() for energy codes; every other kind of value passes unchecked."""
        return obis.kind(code) != "energy" or self.allow(code, mv[0], mv[1])

    def filter(self, values):
        """values ({code: (m, e)}) without the energy totals held back; the same dict when nothing is held."""
        out = None
        for code in values:
            if not self.passes(code, values[code]):
                if out is None:
                    out = dict(values)
                del out[code]
        return values if out is None else out
