"""Day-ahead prices: a streaming reader of the two public answer formats (loaded only while a fetch runs; the book
of prices is services/tariff/book.py). Pure: no sockets, no clock of its own."""

from micropython import const

from services.tariff.book import MISSING, PriceBook  # noqa: F401  (the tests take them from here too)

MAX_ENTRIES = const(400)       # an answer with more entries is refused as it streams in (3 days of quarter hours fit)
MAX_DEPTH = const(6)
MAX_TOKEN = const(160)         # a string or number longer than this is not part of a price answer
MIN_EUR_MWH = const(-1000)     # EPEX's harmonised day-ahead limits are -500 and +4000 EUR/MWh: beyond these
MAX_EUR_MWH = const(10000)     # ranges the number is not a market price
_Q = const(900)

_WS = b" \t\r\n"
_NUM = b"-+.0123456789eE"
_LIT = b"truefalsn"


class PriceError(Exception):
    """An answer that is not a usable price list: nothing of it is taken."""


def unit_ok(text):
    """EUR per MWh as either source writes it ("EUR / MWh", "Eur/MWh")."""
    return text.replace(" ", "").lower() == "eur/mwh"


def micro_per_kwh(tok):
    """µ-units per kWh of a price in EUR/MWh given as JSON number text (1 EUR/MWh = 1000 µEUR/kWh), rounded half
    away from zero past the third decimal; PriceError for anything but a plain JSON number in range."""
    t = tok
    exp = 0
    e = t.find("e")
    if e < 0:
        e = t.find("E")
    if e >= 0:
        try:
            exp = int(t[e + 1:])
        except ValueError:
            raise PriceError("bad number %s" % tok)
        t = t[:e]
        if not -20 <= exp <= 20:
            raise PriceError("price %s out of range" % tok)
    neg = t.startswith("-")
    if neg:
        t = t[1:]
    whole, _dot, frac = t.partition(".")
    digits = whole + frac
    if not whole or not digits or len(digits) > 30:
        raise PriceError("bad number %s" % tok)
    for ch in digits:
        if not "0" <= ch <= "9":
            raise PriceError("bad number %s" % tok)
    m = int(digits)
    shift = exp - len(frac) + 3          # value * 1000 = m * 10**shift
    if shift >= 0:
        v = m * 10 ** shift
    else:
        d = 10 ** (-shift)
        v = (m + d // 2) // d
    if neg:
        v = -v
    if not MIN_EUR_MWH * 1000 <= v <= MAX_EUR_MWH * 1000:
        raise PriceError("price %s EUR/MWh outside %d..%d" % (tok, MIN_EUR_MWH, MAX_EUR_MWH))
    return v


class PriceParser:
    """Reads an energy-charts ({"unix_seconds": [...], "price": [...], "unit": "EUR / MWh"}) or aWATTar
    ({"data": [{"start_timestamp": ms, "end_timestamp": ms, "marketprice": x, "unit": "Eur/MWh"}]}) answer chunk by
    chunk without holding it: write(chunk) as it arrives, finish() -> [(utc start, seconds, µ/kWh or None)] sorted.
    Raises PriceError for anything else (HTML, wrong unit, too many entries, duplicates, misaligned times...)."""

    def __init__(self):
        self._carry = b""
        self._stack = []     # [kind ("o"/"a"), key of the current member]
        self._want_key = False
        self._ts = []        # energy-charts: unix_seconds
        self._px = []        # energy-charts: prices (µ/kWh or None)
        self._unit = None
        self._rows = []      # aWATTar: (start s, end s, µ or None)
        self._row = None
        self._started = False
        self.done = False
        self.bytes = 0

    # -- the sink interface of services/ota/http_get.HttpGet --

    def write(self, chunk):
        self.bytes += len(chunk)
        data = self._carry + bytes(chunk) if self._carry else bytes(chunk)
        self._carry = b""
        i = self._scan(data)
        if i < len(data):
            if len(data) - i > MAX_TOKEN:
                raise PriceError("token longer than %d bytes: not a price answer" % MAX_TOKEN)
            self._carry = data[i:]

    def abort(self):
        self._carry = b""

    def finish(self):
        if self._carry.strip(_WS) or self._stack or not self._started:
            raise PriceError("answer ends before its JSON does")
        self.done = True
        if self._ts or self._px or self._unit is not None and not self._rows:
            return self._energy_charts()
        if self._rows:
            return self._checked(self._rows)
        raise PriceError("no prices in the answer (neither unix_seconds/price nor data[])")

    # -- tokens --

    def _scan(self, data):
        n = len(data)
        i = 0
        while i < n:
            c = data[i]
            if c in _WS:
                i += 1
                continue
            if c == 0x22:  # "
                j = i + 1
                while True:
                    j = data.find(b'"', j)
                    if j < 0:
                        return i
                    k = j - 1
                    bs = 0
                    while data[k] == 0x5C:
                        bs += 1
                        k -= 1
                    if bs % 2 == 0:
                        break
                    j += 1
                s = data[i + 1:j]
                if len(s) > MAX_TOKEN:
                    s = b""   # a long string (a licence text) is of no use here
                self._token(s.decode(), True)
                i = j + 1
                continue
            if c in _NUM or c in _LIT:
                j = i
                while j < n and (data[j] in _NUM or data[j] in _LIT):
                    j += 1
                if j == n:
                    return i   # the number may go on in the next chunk
                self._token(data[i:j].decode(), False)
                i = j
                continue
            if c == 0x7B or c == 0x5B:  # { [
                if not self._started:
                    if c != 0x7B:
                        raise PriceError("the answer is not a JSON object")
                    self._started = True
                elif not self._stack:
                    raise PriceError("data after the JSON object")
                if len(self._stack) >= MAX_DEPTH:
                    raise PriceError("JSON nested too deep")
                self._stack.append(["o" if c == 0x7B else "a", None])
                self._want_key = c == 0x7B
                if c == 0x7B and self._in_data_row():
                    self._row = [None, None, None, None, False]
            elif c == 0x7D or c == 0x5D:  # } ]
                if not self._stack:
                    raise PriceError("unbalanced JSON")
                top = self._stack.pop()
                if (top[0] == "o") != (c == 0x7D):
                    raise PriceError("unbalanced JSON")
                if c == 0x7D and self._row is not None and len(self._stack) == 2:
                    self._end_row()
                self._want_key = False
            elif c == 0x2C:  # ,
                self._want_key = bool(self._stack) and self._stack[-1][0] == "o"
            elif c == 0x3A:  # :
                self._want_key = False
            else:
                what = "HTML" if c == 0x3C else "not JSON"
                raise PriceError("the answer is %s" % what)
            i += 1
        return n

    def _in_data_row(self):
        st = self._stack
        return len(st) == 3 and st[0][1] == "data" and st[1][0] == "a"

    def _token(self, tok, is_str):
        if not self._started:
            raise PriceError("the answer is not a JSON object")
        st = self._stack
        if not st:
            raise PriceError("data after the JSON object")
        top = st[-1]
        if self._want_key:
            if not is_str:
                raise PriceError("not JSON: a key must be a string")
            top[1] = tok
            self._want_key = False
            return
        depth = len(st)
        if depth == 1 and top[1] == "unit":
            self._unit = tok
        elif depth == 2 and top[0] == "a":
            key = st[0][1]
            if key == "unix_seconds":
                self._count()
                self._ts.append(self._int(tok, is_str, "unix_seconds"))
            elif key == "price":
                self._count()
                self._px.append(None if tok == "null" and not is_str else self._price(tok, is_str))
        elif depth == 3 and self._row is not None and top[0] == "o":
            key = top[1]
            row = self._row
            if key == "start_timestamp":
                row[0] = self._int(tok, is_str, key)
            elif key == "end_timestamp":
                row[1] = self._int(tok, is_str, key)
            elif key == "marketprice":
                row[2] = None if tok == "null" and not is_str else self._price(tok, is_str)
                row[4] = True
            elif key == "unit":
                row[3] = tok

    def _count(self):
        if max(len(self._ts), len(self._px)) + 1 > MAX_ENTRIES:
            raise PriceError("more than %d prices in one answer" % MAX_ENTRIES)

    @staticmethod
    def _int(tok, is_str, what):
        if is_str or not tok or not (tok.isdigit() or (tok[0] == "-" and tok[1:].isdigit())):
            raise PriceError("%s must be whole numbers" % what)
        return int(tok)

    @staticmethod
    def _price(tok, is_str):
        if is_str:
            raise PriceError("a price must be a number")
        return micro_per_kwh(tok)

    def _end_row(self):
        r = self._row
        self._row = None
        if r[0] is None or r[1] is None or not r[4]:
            raise PriceError("a data entry lacks start_timestamp, end_timestamp or marketprice")
        if r[3] is None or not unit_ok(r[3]):
            raise PriceError("unit %r is not EUR/MWh" % r[3])
        if r[0] % 1000 or r[1] % 1000:
            raise PriceError("timestamps must be whole seconds")
        if len(self._rows) + 1 > MAX_ENTRIES:
            raise PriceError("more than %d prices in one answer" % MAX_ENTRIES)
        self._rows.append((r[0] // 1000, r[1] // 1000, r[2]))

    # -- checks on the whole answer --

    def _energy_charts(self):
        if self._unit is None or not unit_ok(self._unit):
            raise PriceError("unit %r is not EUR/MWh" % self._unit)
        ts = self._ts
        px = self._px
        if len(ts) != len(px):
            raise PriceError("%d timestamps but %d prices" % (len(ts), len(px)))
        # Each entry lasts the answer's resolution (the smallest step between its timestamps): a missing entry is
        # a gap (cost unknown there), never a longer price.
        res = 0
        for i in range(1, len(ts)):
            step = ts[i] - ts[i - 1]
            if step <= 0:
                raise PriceError("two prices for the time at %d (duplicate or out of order)" % ts[i])
            if res == 0 or step < res:
                res = step
        if res == 0:
            res = _Q
        if res not in (_Q, 4 * _Q):
            raise PriceError("prices every %d s (only 900 or 3600)" % res)
        rows = [(ts[i], ts[i] + res, px[i]) for i in range(len(ts))]
        return self._checked(rows)

    @staticmethod
    def _checked(rows):
        rows.sort()
        out = []
        prev_end = None
        for start, end, p in rows:
            if start % _Q:
                raise PriceError("a price starts at %d, not on a quarter hour" % start)
            if end - start not in (_Q, 4 * _Q):
                raise PriceError("a price at %d lasts %d s (only 900 or 3600)" % (start, end - start))
            if prev_end is not None and start < prev_end:
                raise PriceError("two prices for the time at %d (duplicate or overlapping entries)" % start)
            prev_end = end
            out.append((start, end - start, p))
        return out
