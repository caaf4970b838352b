"""The book of day-ahead prices: quarter-hour prices per local day (int arrays), kept on the flash as a small text
document. Pure."""

from array import array

from micropython import const

MISSING = const(-0x80000000)   # no price for this quarter hour: cost unknown, never 0
_Q = const(900)


class PriceBook:
    """Quarter-hour market prices (µ-units per kWh, MISSING where none is known) of a few local days.

    day_start(day) -> UTC second of a local day number's midnight; days hold 92, 96 or 100 quarter hours."""

    KEEP = 3   # days kept: yesterday (the price of a quarter booked after midnight), today, tomorrow

    def __init__(self, day_start):
        self.day_start = day_start
        self.days = []   # [day, start utc, array("i")], ascending

    def quarters(self, day):
        return (self.day_start(day + 1) - self.day_start(day)) // _Q

    def _day(self, day, make):
        for d in self.days:
            if d[0] == day:
                return d
        if not make:
            return None
        n = self.quarters(day)
        d = [day, self.day_start(day), array("i", [MISSING] * n)]
        self.days.append(d)
        self.days.sort(key=lambda x: x[0])
        return d

    def price(self, t):
        """µ/kWh of the quarter hour holding UTC second t, or None."""
        for d in self.days:
            i = (t - d[1]) // _Q
            if 0 <= i < len(d[2]):
                v = d[2][i]
                return None if v == MISSING else v
        return None

    def day_prices(self, day):
        """The array of a local day (MISSING where unknown), or None."""
        d = self._day(day, False)
        return d[2] if d is not None else None

    def merge(self, rows, first_day, last_day, local_day):
        """Take rows (start, seconds, µ or None) falling on local days first_day..last_day (local_day(t) -> day);
        a null price leaves the quarter as it was. Returns the days touched."""
        touched = []
        for start, secs, p in rows:
            t = start
            while t < start + secs:
                day = local_day(t)
                if first_day <= day <= last_day:
                    d = self._day(day, True)
                    i = (t - d[1]) // _Q
                    if 0 <= i < len(d[2]) and p is not None:
                        d[2][i] = p
                        if day not in touched:
                            touched.append(day)
                t += _Q
        return touched

    def prune(self, today):
        self.days = [d for d in self.days if today - self.KEEP + 2 <= d[0] <= today + 1]

    def complete(self, day):
        """True when every quarter hour of the day has a price."""
        d = self._day(day, False)
        if d is None:
            return False
        for v in d[2]:
            if v == MISSING:
                return False
        return True

    # -- on the flash: one line per day, "day start n" then the n prices, "-" for a missing one --

    def text(self):
        lines = ["P1"]
        for d in self.days:
            lines.append("%d %d %d %s" % (d[0], d[1], len(d[2]), ",".join("-" if v == MISSING else str(v)
                                                                           for v in d[2])))
        return "\n".join(lines) + "\n"

    def load_text(self, text):
        """Days from text(); raises ValueError for a document it did not write (the caller keeps none then)."""
        lines = text.split("\n")
        if lines[0] != "P1":
            raise ValueError("not a price book")
        days = []
        for line in lines[1:]:
            if not line:
                continue
            day, start, n, vals = line.split(" ")
            vals = vals.split(",")
            if len(vals) != int(n) or int(n) not in (92, 96, 100):
                raise ValueError("bad day line")
            days.append([int(day), int(start), array("i", [MISSING if v == "-" else int(v) for v in vals])])
        days.sort(key=lambda x: x[0])
        self.days = days
