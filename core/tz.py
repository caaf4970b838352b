"""POSIX TZ rules on integer seconds: civil dates, UTC offsets, local time, day boundaries, the zone table."""

# Semantics follow RFC 8536 section 3.3 (POSIX TZ plus hours -167..167) and CPython's zoneinfo:
# the rule of a UTC instant is evaluated for that instant's UTC year; local wall times resolve
# like PEP 495 with fold=0 unless told otherwise (gap: read with the offset before the jump, so
# the time moves forward; overlap: the first occurrence).

_DAY = 86400
TABLE = "core/tz.dat"  # relative to the drive root, built by tools/build_tz.py


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


def _parse_hms(s, i, lo, hi, what):
    # [+-]hh[:mm[:ss]] starting at s[i]; returns (seconds, next index).
    sign = 1
    if i < len(s) and s[i] in "+-":
        if s[i] == "-":
            sign = -1
        i += 1
    parts = []
    while True:
        j = i
        while j < len(s) and "0" <= s[j] <= "9":
            j += 1
        if j == i or (parts and j - i != 2) or j - i > 3:
            raise ValueError("bad %s in TZ rule %r" % (what, s))
        parts.append(int(s[i:j]))
        i = j
        if len(parts) < 3 and i < len(s) and s[i] == ":":
            i += 1
            continue
        break
    if not lo <= parts[0] <= hi or any(p > 59 for p in parts[1:]):
        raise ValueError("%s out of range in TZ rule %r" % (what, s))
    while len(parts) < 3:
        parts.append(0)
    return sign * (parts[0] * 3600 + parts[1] * 60 + parts[2]), i


def _parse_name(s, i):
    # Either <...> (quoted: letters, digits, + and -) or three or more letters.
    if i < len(s) and s[i] == "<":
        j = s.find(">", i)
        if j < 0 or j - i - 1 < 3:
            raise ValueError("bad quoted zone name in TZ rule %r" % s)
        return s[i + 1:j], j + 1
    j = i
    while j < len(s) and ("A" <= s[j] <= "Z" or "a" <= s[j] <= "z"):
        j += 1
    if j - i < 3:
        raise ValueError("bad zone name in TZ rule %r" % s)
    return s[i:j], j


def _parse_date(s, i):
    # Mm.w.d | Jn | n, then optional /time; returns ((kind, a, b, c, secs), next index).
    if i < len(s) and s[i] == "M":
        vals = []
        i += 1
        for k in range(3):
            j = i
            while j < len(s) and "0" <= s[j] <= "9":
                j += 1
            if j == i:
                raise ValueError("bad M date in TZ rule %r" % s)
            vals.append(int(s[i:j]))
            i = j
            if k < 2:
                if i >= len(s) or s[i] != ".":
                    raise ValueError("bad M date in TZ rule %r" % s)
                i += 1
        m, w, d = vals
        if not (1 <= m <= 12 and 1 <= w <= 5 and 0 <= d <= 6):
            raise ValueError("M date out of range in TZ rule %r" % s)
        spec = [0, m, w, d]
    else:
        kind = 2
        lo = 0
        if i < len(s) and s[i] == "J":
            kind = 1
            lo = 1
            i += 1
        j = i
        while j < len(s) and "0" <= s[j] <= "9":
            j += 1
        if j == i:
            raise ValueError("bad day in TZ rule %r" % s)
        n = int(s[i:j])
        if not lo <= n <= 365:
            raise ValueError("day out of range in TZ rule %r" % s)
        i = j
        spec = [kind, n, 0, 0]
    secs = 7200
    if i < len(s) and s[i] == "/":
        secs, i = _parse_hms(s, i + 1, 0, 167, "transition time")
    spec.append(secs)
    return tuple(spec), i


class Rule:
    """A parsed POSIX TZ rule such as CET-1CEST,M3.5.0,M10.5.0/3; offsets are seconds east of UTC."""

    def __init__(self, text):
        self.text = text
        s = text
        self.std_name, i = _parse_name(s, 0)
        posix, i = _parse_hms(s, i, 0, 24, "offset")
        self.std = -posix
        self.dst = None
        self.dst_name = None
        self.start = self.end = None
        self._year = None
        self._tr = None
        if i == len(s):
            return
        self.dst_name, i = _parse_name(s, i)
        self.dst = self.std + 3600
        if i < len(s) and s[i] != ",":
            posix, i = _parse_hms(s, i, 0, 24, "DST offset")
            self.dst = -posix
        if i >= len(s) or s[i] != ",":
            # POSIX leaves the default rule to the implementation; zoneinfo refuses it too.
            raise ValueError("TZ rule %r names DST but gives no start and end" % s)
        self.start, i = _parse_date(s, i + 1)
        if i >= len(s) or s[i] != ",":
            raise ValueError("TZ rule %r lacks a DST end" % s)
        self.end, i = _parse_date(s, i + 1)
        if i != len(s):
            raise ValueError("trailing characters in TZ rule %r" % s)

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
        """UTC instants (dst_start, dst_end) of year y, or None for a rule without DST."""
        if self.dst is None:
            return None
        if self._year != y:
            # Start time is given in standard time, end time in daylight time.
            self._tr = (self._wall(self.start, y) - self.std, self._wall(self.end, y) - self.dst)
            self._year = y
        return self._tr

    def _isdst(self, a, b, t):
        return (a <= t < b) if a < b else not (b <= t < a)

    def utc_offset(self, utc):
        """Seconds east of UTC in effect at a UTC instant (epoch seconds)."""
        if self.dst is None:
            return self.std
        a, b = self.transitions(civil_from_days(utc // _DAY)[0])
        return self.dst if self._isdst(a, b, utc) else self.std

    def offset_min(self, utc):
        """utc_offset in minutes, rounded towards minus infinity (every shipped zone is whole minutes)."""
        return self.utc_offset(utc) // 60

    def is_dst(self, utc):
        """True when the rule's daylight time is in effect at a UTC instant."""
        return self.dst is not None and self.utc_offset(utc) == self.dst

    def local(self, utc):
        """Local wall seconds (epoch seconds read as if UTC) of a UTC instant."""
        return utc + self.utc_offset(utc)

    def to_utc(self, local, fold=0):
        """UTC instant of local wall seconds; fold as in PEP 495 (0: gap moves forward, overlap takes the first)."""
        if self.dst is None:
            return local - self.std
        y = civil_from_days(local // _DAY)[0]
        # Wall-clock transition instants, shifted so gap and overlap fall on the side fold asks for.
        a = self._wall(self.start, y)
        b = self._wall(self.end, y)
        diff = self.dst - self.std
        if (fold == 1) == (diff >= 0):
            b -= diff
        else:
            a += diff
        return local - (self.dst if self._isdst(a, b, local) else self.std)

    def day_start(self, y, m, d):
        """First UTC instant whose local date is y-m-d (the transition itself when midnight is skipped)."""
        midnight = days_from_civil(y, m, d) * _DAY
        u = self.to_utc(midnight, 0)
        got = self.local(u)
        if got == midnight:
            return u
        # Midnight lies in a gap: u was read with the offset before the jump, the jump is in (u - gap, u].
        lo = u - abs(self.dst - self.std)
        hi = u
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.local(mid) >= midnight:
                hi = mid
            else:
                lo = mid
        return hi

    def __repr__(self):
        return "Rule(%r)" % self.text


def local_day_start_utc(rule, y, m, d):
    """First UTC instant of local day y-m-d under rule (a Rule)."""
    return rule.day_start(y, m, d)


def local_date(rule, utc):
    """(year, month, day) of a UTC instant in local time under rule."""
    return civil_from_days(rule.local(utc) // _DAY)


# --- The zone table (tools/build_tz.py): "#" comments, then "=N RULE" lines, then "NAME N" lines sorted.

def _lines(path):
    with open(path) as f:
        while True:
            line = f.readline()
            if not line:
                return
            line = line.strip()
            if line and line[0] != "#":
                yield line


def rule_text(name, path=TABLE):
    """POSIX rule string of a zone name from the table, or None when the name is not listed."""
    want = None
    for line in _lines(path):
        if line[0] == "=":
            continue
        sp = line.rfind(" ")
        key = line[:sp]
        if key == name:
            want = line[sp + 1:]
            break
        if key > name:  # zone lines are sorted
            break
    if want is None:
        return None
    for line in _lines(path):
        if line[0] != "=":
            break
        sp = line.find(" ")
        if line[1:sp] == want:
            return line[sp + 1:]
    raise ValueError("zone table %s: rule %s of %s missing" % (path, want, name))


def load(name, path=TABLE):
    """Parsed Rule of a zone name; ValueError when the name is not in the table."""
    text = rule_text(name, path)
    if text is None:
        raise ValueError("unknown time zone %r" % name)
    return Rule(text)


def list_zones(now_utc, path=TABLE):
    """Yield (name, utc offset in minutes at now_utc) for every zone of the table, sorted by name."""
    offsets = []  # per rule index: one int, so the walk holds no parsed rules
    for line in _lines(path):
        if line[0] == "=":
            offsets.append(Rule(line[line.find(" ") + 1:]).offset_min(now_utc))
            continue
        sp = line.rfind(" ")
        yield line[:sp], offsets[int(line[sp + 1:])]
