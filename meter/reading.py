"""A meter reading: timestamp, exact decimal values per short OBIS code, server id, source."""


class Reading:
    """Values map "1.8.0" -> (mantissa, exp10) in the OBIS table's base unit (Wh, W, V, A, Hz)."""

    def __init__(self, ts_ms, values, server_id=None, source="sml"):
        self.ts_ms = ts_ms
        self.values = values
        self.server_id = server_id
        self.source = source

    def get(self, code, default=None):
        """(mantissa, exp10) of a short code, or default."""
        return self.values.get(code, default)

    def __repr__(self):
        return "Reading(%r, %r, %r, %r)" % (self.ts_ms, self.values, self.server_id, self.source)
