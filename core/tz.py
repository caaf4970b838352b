"""POSIX TZ rules on integer seconds: civil dates, UTC offsets, local time, day boundaries, the zone table."""

# Semantics follow RFC 8536 section 3.3 (POSIX TZ plus hours -167..167) and CPython's zoneinfo:
# the rule of a UTC instant is evaluated for that instant's UTC year; local wall times resolve
# like PEP 495 with fold=0 unless told otherwise (gap: read with the offset before the jump, so
# the time moves forward; overlap: the first occurrence).

_DAY = 86400


def _table_path():
    # Beside this file: /core/tz.dat on the device; the sources on the host, whose runtime chdirs away.
    f = globals().get("__file__") or ""
    cut = f.rfind("/")
    return f[:cut + 1] + "tz.dat" if cut >= 0 else "core/tz.dat"


TABLE = _table_path()  # built by tools/build_tz.py


def days_from_civil(y, m, d):
    """Days since 1970-01-01 of a proleptic Gregorian date (any year)."""
    if m <= 2:
        y -= 1
    era = y // 400
    yoe = y - era * 400
    mp = (m + 9) % 12
    doy = (153 * mp + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def civil_from_days(z):
    """(year, month, day) of a day number counted from 1970-01-01."""
    z += 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = mp + 3 if mp < 10 else mp - 9
    return (yoe + era * 400 + (1 if m <= 2 else 0), m, d)


def is_leap(y):
    """True for Gregorian leap years."""
    return y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)


def weekday(days):
    """Day of week of a day number, 0 = Sunday as in POSIX rules."""
    return (days + 4) % 7


def to_civil(secs):
    """(year, month, day, hour, minute, second) of epoch seconds (UTC, or local seconds from Rule.local)."""
    days = secs // _DAY
    rem = secs - days * _DAY
    y, m, d = civil_from_days(days)
    return (y, m, d, rem // 3600, rem // 60 % 60, rem % 60)


def from_civil(y, m, d, hh=0, mm=0, ss=0):
    """Epoch seconds of a civil date and time read as UTC (or as local seconds)."""
    return days_from_civil(y, m, d) * _DAY + hh * 3600 + mm * 60 + ss


# The parser walks the rule as bytes: indexing gives ints, so no per-character string is allocated.
_PLUS, _MINUS, _COLON, _COMMA, _DOT, _SLASH, _LT, _GT = 43, 45, 58, 44, 46, 47, 60, 62


def _digits(b, i):
    # (value, next index, digit count) of the decimal digits at b[i:].
    v = 0
    j = i
    n = len(b)
    while j < n and 48 <= b[j] <= 57:
        v = v * 10 + b[j] - 48
        j += 1
    return v, j, j - i


def _bad(b, what):
    return ValueError("bad %s in TZ rule %r" % (what, b.decode()))


def _parse_hms(b, i, lo, hi, what):
    # [+-]hh[:mm[:ss]] at b[i]; returns (seconds, next index).
    sign = 1
    if i < len(b) and (b[i] == _PLUS or b[i] == _MINUS):
        if b[i] == _MINUS:
            sign = -1
        i += 1
    h, i, n = _digits(b, i)
    if not 1 <= n <= 3 or not lo <= h <= hi:
        raise _bad(b, what)
    m = sec = 0
    if i < len(b) and b[i] == _COLON:
        m, i, n = _digits(b, i + 1)
        if n != 2 or m > 59:
            raise _bad(b, what)
        if i < len(b) and b[i] == _COLON:
            sec, i, n = _digits(b, i + 1)
            if n != 2 or sec > 59:
                raise _bad(b, what)
    return sign * (h * 3600 + m * 60 + sec), i


def _parse_name(b, i):
    # Either <...> (quoted: letters, digits, + and -) or three or more letters.
    if i < len(b) and b[i] == _LT:
        j = b.find(b">", i)
        if j - i - 1 < 3:
            raise _bad(b, "quoted zone name")
        return b[i + 1:j].decode(), j + 1
    j = i
    while j < len(b) and (65 <= b[j] <= 90 or 97 <= b[j] <= 122):
        j += 1
    if j - i < 3:
        raise _bad(b, "zone name")
    return b[i:j].decode(), j


def _parse_date(b, i):
    # Mm.w.d | Jn | n, then optional /time; returns ((kind, a, b, c, secs), next index).
    if i < len(b) and b[i] == 77:  # M
        m, i, n1 = _digits(b, i + 1)
        if i >= len(b) or b[i] != _DOT:
            raise _bad(b, "M date")
        w, i, n2 = _digits(b, i + 1)
        if i >= len(b) or b[i] != _DOT:
            raise _bad(b, "M date")
        d, i, n3 = _digits(b, i + 1)
        if not (n1 and n2 and n3 and 1 <= m <= 12 and 1 <= w <= 5 and 0 <= d <= 6):
            raise _bad(b, "M date")
        kind, x, y, z = 0, m, w, d
    else:
        kind = 2
        lo = 0
        if i < len(b) and b[i] == 74:  # J
            kind = 1
            lo = 1
            i += 1
        x, i, n = _digits(b, i)
        if not n or not lo <= x <= 365:
            raise _bad(b, "day")
        y = z = 0
    secs = 7200
    if i < len(b) and b[i] == _SLASH:
        secs, i = _parse_hms(b, i + 1, 0, 167, "transition time")
    return (kind, x, y, z, secs), i


class Rule:
    """A parsed POSIX TZ rule such as CET-1CEST,M3.5.0,M10.5.0/3; offsets are seconds east of UTC."""

    def __init__(self, text):
        self.text = text
        s = text.encode()
        self.std_name, i = _parse_name(s, 0)
        posix, i = _parse_hms(s, i, 0, 24, "offset")
        self.std = -posix
        self.dst = None
        self.dst_name = None
        self.start = self.end = None
        self._year = None
        self._tr = None
        self._lo = self._hi = self._off = 0
        if i == len(s):
            return
        self.dst_name, i = _parse_name(s, i)
        self.dst = self.std + 3600
        if i < len(s) and s[i] != _COMMA:
            posix, i = _parse_hms(s, i, 0, 24, "DST offset")
            self.dst = -posix
        if i >= len(s) or s[i] != _COMMA:
            # POSIX leaves the default rule to the implementation; zoneinfo refuses it too.
            raise ValueError("TZ rule %r names DST but gives no start and end" % text)
        self.start, i = _parse_date(s, i + 1)
        if i >= len(s) or s[i] != _COMMA:
            raise ValueError("TZ rule %r lacks a DST end" % text)
        self.end, i = _parse_date(s, i + 1)
        if i != len(s):
            raise ValueError("trailing characters in TZ rule %r" % text)

    def _wall(self, spec, y):
        # Local wall seconds (as if UTC) of a transition in year y.
        kind = spec[0]
        if kind == 0:
            m = spec[1]
            first = days_from_civil(y, m, 1)
            nxt = days_from_civil(y + 1, 1, 1) if m == 12 else days_from_civil(y, m + 1, 1)
            day = first + (spec[3] - weekday(first)) % 7 + (spec[2] - 1) * 7
            if day >= nxt:
                day -= 7
        elif kind == 1:
            # Jn counts 1..365 and never names February 29.
            n = spec[1]
            day = days_from_civil(y, 1, 1) + n - 1
            if n >= 60 and is_leap(y):
                day += 1
        else:
            day = days_from_civil(y, 1, 1) + spec[1]
        return day * _DAY + spec[4]

    def transitions(self, y):
        """UTC instants (dst_start, dst_end) that year y's rule names, or None for a rule without DST."""
        if self.dst is None:
            return None
        # Start time is given in standard time, end time in daylight time.
        return (self._wall(self.start, y) - self.std, self._wall(self.end, y) - self.dst)

    def _edges(self, y):
        # Transitions named by years y-1..y+1 in time order, as (times, offsets after each). A year's rule
        # may reach into the next one (J365/25, or a southern summer), so the neighbours count too; on a
        # tie the later year's event wins, which makes "0/0,J365/25" daylight time all year (RFC 8536).
        if self._year != y:
            ev = []
            for k in (y - 1, y, y + 1):
                a, b = self.transitions(k)
                ev.append((a, k, 0, self.dst))
                ev.append((b, k, 1, self.std))
            ev.sort()
            self._tr = ([e[0] for e in ev], [e[3] for e in ev])
            self._year = y
        return self._tr

    def utc_offset(self, utc):
        """Seconds east of UTC in effect at a UTC instant (epoch seconds)."""
        if self.dst is None:
            return self.std
        if self._lo <= utc < self._hi:
            return self._off
        days = utc // _DAY
        y = civil_from_days(days)[0]
        times, offs = self._edges(y)
        i = len(times) - 1
        while i >= 0 and times[i] > utc:
            i -= 1
        off = offs[i] if i >= 0 else self._other(offs[0])
        # Remember the stretch of this UTC year with this offset: consecutive calls skip the date maths.
        ys = days_from_civil(y, 1, 1) * _DAY
        ye = days_from_civil(y + 1, 1, 1) * _DAY
        self._lo = max(times[i] if i >= 0 else ys, ys)
        self._hi = min(times[i + 1] if i + 1 < len(times) else ye, ye)
        self._off = off
        return off

    def _other(self, off):
        return self.std if off == self.dst else self.dst

    def offset_min(self, utc):
        """utc_offset in minutes, rounded towards minus infinity (every shipped zone is whole minutes)."""
        return self.utc_offset(utc) // 60

    def is_dst(self, utc):
        """True when the rule's daylight time is in effect at a UTC instant."""
        return self.dst is not None and self.utc_offset(utc) == self.dst

    def local(self, utc):
        """Local wall seconds (epoch seconds read as if UTC) of a UTC instant."""
        return utc + self.utc_offset(utc)

    def _resolve(self, local):
        # (earliest, latest) UTC instants showing this wall time, or (None, k) when it falls in the gap
        # opened by transition k.
        times, offs = self._edges(civil_from_days(local // _DAY)[0])
        first = last = None
        before = self._other(offs[0])
        n = len(times)
        for i in range(-1, n):
            off = offs[i] if i >= 0 else before
            u = local - off
            if (i < 0 or times[i] <= u) and (i + 1 >= n or u < times[i + 1]):
                if first is None:
                    first = u
                last = u
        if first is not None:
            return first, last
        for k in range(n):
            prev = offs[k - 1] if k else before
            if times[k] + prev <= local < times[k] + offs[k]:
                return None, k
        raise ValueError("wall time %d not resolved" % local)

    def to_utc(self, local, fold=0):
        """UTC instant of local wall seconds; fold as in PEP 495 (0: gap moves forward, overlap takes the first)."""
        if self.dst is None:
            return local - self.std
        first, last = self._resolve(local)
        if first is not None:
            return last if fold else first
        times, offs = self._tr
        # In the gap: fold=0 reads the wall time with the offset before the jump, fold=1 with the one after.
        off = offs[last] if fold else (offs[last - 1] if last else self._other(offs[0]))
        return local - off

    def day_start(self, y, m, d):
        """First UTC instant whose local date is y-m-d (the transition itself when midnight is skipped)."""
        midnight = days_from_civil(y, m, d) * _DAY
        if self.dst is None:
            return midnight - self.std
        first, k = self._resolve(midnight)
        if first is not None:
            return first
        return self._tr[0][k]

    def __repr__(self):
        return "Rule(%r)" % self.text


def local_day_start_utc(rule, y, m, d):
    """First UTC instant of local day y-m-d under rule (a Rule)."""
    return rule.day_start(y, m, d)


def local_date(rule, utc):
    """(year, month, day) of a UTC instant in local time under rule."""
    return civil_from_days(rule.local(utc) // _DAY)


# --- The zone table (tools/build_tz.py): "#" comments, then "=N RULE" lines, then "NAME N" lines sorted.

def _lines(f):
    # Data lines of the open table, one at a time: the file is never read whole.
    while True:
        line = f.readline()
        if not line:
            return
        line = line.strip()
        if line and line[0] != "#":
            yield line


def _open(src):
    # A path is opened (and closed by the caller); an open file or StringIO is used as it is.
    if isinstance(src, str):
        return open(src), True
    src.seek(0)
    return src, False


def rule_text(name, src=TABLE):
    """POSIX rule string of a zone name from the table (a path or an open file), or None when not listed."""
    f, own = _open(src)
    try:
        return _rule_text(f, name)
    finally:
        if own:
            f.close()


def _rule_text(f, name):
    # One readline per line and no other allocation while scanning: this runs on a small heap.
    key = name + " "
    want = None
    while True:
        line = f.readline()
        if not line:
            return None
        if line.startswith(key):
            want = "=" + line[len(key):].strip() + " "
            break
        if line[0] not in "#=" and line > key:  # zone lines are sorted: it is not there
            return None
    f.seek(0)
    while True:
        line = f.readline()
        if not line or line[0] not in "#=":
            raise ValueError("zone table: rule %s of %s missing" % (want, name))
        if line.startswith(want):
            return line[len(want):].strip()


def load(name, src=TABLE):
    """Parsed Rule of a zone name; ValueError when the name is not in the table."""
    text = rule_text(name, src)
    if text is None:
        raise ValueError("unknown time zone %r" % name)
    return Rule(text)


def list_zones(now_utc, src=TABLE):
    """Yield (name, utc offset in minutes at now_utc) for every zone of the table, sorted by name."""
    offsets = []  # per rule index: one int, so the walk holds no parsed rules
    f, own = _open(src)
    try:
        for line in _lines(f):
            if line[0] == "=":
                offsets.append(Rule(line[line.find(" ") + 1:]).offset_min(now_utc))
                continue
            sp = line.rfind(" ")
            yield line[:sp], offsets[int(line[sp + 1:])]
    finally:
        if own:
            f.close()
