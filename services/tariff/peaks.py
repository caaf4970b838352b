"""Monthly import peaks from the quarter-hour records: the highest quarter-hour average power with its time (the
capacity-tariff way) and the three highest hourly import energies on three different days with their mean (the
Norwegian grid-tariff way). Pure; the closed months are kept as a small text document."""

from core.tz import civil_from_days, days_from_civil
from services.history import store as hs

KEEP_MONTHS = 12


def month_of(day):
    """Month number (year * 12 + month - 1) of a local day number."""
    y, m, _d = civil_from_days(day)
    return y * 12 + m - 1


def month_first_day(month):
    return days_from_civil(month // 12, month % 12 + 1, 1)


class Month:
    """One month's peaks: q = (energy of the top quarter hour in 0.1 Wh, its UTC start) or None; days maps a local
    day to its top hour (energy 0.1 Wh, UTC start of the hour)."""

    def __init__(self, month):
        self.month = month
        self.q = None
        self.days = {}

    def top3(self):
        """[(energy, hour start, day)] of the three days with the highest hourly energy, highest first (ties: the
        earlier hour first; dict order never matters)."""
        rows = sorted(((e, t, d) for d, (e, t) in self.days.items()), key=lambda r: (-r[0], r[1]))
        return rows[:3]

    def text(self):
        parts = [str(self.month)]
        parts.append("%d %d" % self.q if self.q is not None else "- -")
        for e, t, d in self.top3():
            parts.append("%d %d %d" % (d, e, t))
        return " ".join(parts)

    @staticmethod
    def parse(line):
        f = line.split(" ")
        m = Month(int(f[0]))
        if f[1] != "-":
            m.q = (int(f[1]), int(f[2]))
        i = 3
        while i + 2 < len(f):
            m.days[int(f[i])] = (int(f[i + 1]), int(f[i + 2]))
            i += 3
        return m


class Peaks:
    """Fed every closed quarter-hour record (quarter(rec)); months: closed months, oldest first (at most 12);
    cur: the month being counted. A record whose energy spans a gap (F_GAP) is left out: its energy belongs to
    quarter hours nobody measured one by one."""

    def __init__(self):
        self.months = []
        self.cur = None
        self._hour = None    # [key (local hour, offset), UTC start of the hour, energy, local day]
        self.dirty = False   # a month closed since the last save

    def quarter(self, rec):
        if rec[5] & hs.F_GAP:
            return
        t = rec[1]
        day = rec[2]
        c = rec[8]
        month = month_of(day)
        cur = self.cur
        if cur is None or cur.month != month:
            if cur is not None and month < cur.month:
                return   # older than the month being counted (a replay overlap): already in a closed month
            self._close_hour()
            if cur is not None:
                self.months.append(cur)
                self.months = self.months[-KEEP_MONTHS:]
                self.dirty = True
            cur = self.cur = Month(month)
        if c > 0 and (cur.q is None or c > cur.q[0]):
            cur.q = (c, t)
        local = t + rec[4] * 60
        key = (local // 3600, rec[4])
        h = self._hour
        if h is not None and h[0] != key:
            self._close_hour()
            h = None
        if h is None:
            h = self._hour = [key, t - (local % 3600), 0, day]
        h[2] += c

    def _close_hour(self):
        h = self._hour
        self._hour = None
        if h is None or self.cur is None or h[2] <= 0:
            return
        best = self.cur.days.get(h[3])
        if best is None or h[2] > best[0]:
            self.cur.days[h[3]] = (h[2], h[1])

    def current(self):
        """The month being counted, with its open hour counted as it stands."""
        cur = self.cur
        h = self._hour
        if cur is None or h is None or h[2] <= 0:
            return cur
        best = cur.days.get(h[3])
        if best is not None and best[0] >= h[2]:
            return cur
        m = Month(cur.month)
        m.q = cur.q
        m.days = dict(cur.days)
        m.days[h[3]] = (h[2], h[1])
        return m

    def text(self):
        return "K1\n" + "".join(m.text() + "\n" for m in self.months)

    def load_text(self, text):
        lines = text.split("\n")
        if lines[0] != "K1":
            raise ValueError("not a peaks document")
        months = [Month.parse(line) for line in lines[1:] if line]
        months.sort(key=lambda m: m.month)
        self.months = months[-KEEP_MONTHS:]


def power_text(dwh):
    """Average power (W, one decimal, exact) of a quarter hour's energy in 0.1 Wh: W = 0.1 Wh * 4 per hour."""
    w10 = dwh * 4          # tenths of a watt
    return "%d.%d" % (w10 // 10, w10 % 10) if w10 >= 0 else "-%d.%d" % (-w10 // 10, -w10 % 10)
