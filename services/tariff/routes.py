"""REST routes of the tariff: /api/v1/cost (booked cost), /api/v1/tariff (prices, cheapest window), /api/v1/peaks.
Money is written from integers as decimal text (cents for cost, six places for prices): never through a float."""

from adafruit_httpserver import GET, ChunkedResponse, Response, Route

from core.money import cents_text, div_round, price_text
from core.tz import civil_from_days, days_from_civil
from services.api.answers import error_response, query
from services.api.http_parse import ascii_uint
from services.history import store as hs
from services.history.routes import BadRequest, parse_date
from services.tariff import peaks as pk

_JSON = "application/json"
_Q = 900
AHEAD_S = 36 * 3600


def _money(micro, known):
    return cents_text(micro) if known else "null"


class Sums:
    """Running totals of records (HighRes or LowRes): energies as the history books them, money in micro-units."""

    def __init__(self):
        self.imp = self.exp = self.ic = self.ec = self.flags = self.n = 0

    def add(self, r):
        self.imp += r[8]
        self.exp += r[9]
        self.ic += r[10]
        self.ec += r[11]
        f = r[5]
        self.n += 1
        self.flags |= f
        if r[8] and not f & hs.F_IC:
            self.flags |= hs.F_IC_PART
        if r[9] and not f & (hs.F_EC | hs.F_NO_EXPORT):
            self.flags |= hs.F_EC_PART

    def json(self, unknown_empty=False):
        """The totals object: money to the cent, null where no price was known; complete is false when some
        energy had no price. unknown_empty: without any record every value is null (a day or month the history
        holds nothing of: its energy is unknown, not 0)."""
        if unknown_empty and not self.n:
            return _UNKNOWN
        flags = self.flags
        has_ic = bool(flags & hs.F_IC)
        has_ec = bool(flags & hs.F_EC) or (self.n > 0 and not self.exp and has_ic)
        net = cents_text(self.ic - (self.ec if has_ec else 0)) if has_ic else "null"
        complete = self.n > 0 and not flags & (hs.F_IC_PART | hs.F_EC_PART) and has_ic
        return ('{"import_kwh":%s,"import_cost":%s,"export_kwh":%s,"export_revenue":%s,"net":%s,"complete":%s}'
                % (hs.kwh(self.imp), _money(self.ic, has_ic), hs.kwh(self.exp), _money(self.ec, has_ec), net,
                   "true" if complete else "false"))


_UNKNOWN = ('{"import_kwh":null,"import_cost":null,"export_kwh":null,"export_revenue":null,"net":null,'
            '"complete":false}')


def sums_json(recs):
    """The totals object of records (see Sums.json)."""
    s = Sums()
    for r in recs:
        s.add(r)
    return s.json()


def _stamp(t, off):
    local = t + off * 60
    y, m, d = civil_from_days(local // 86400)
    mins = local % 86400 // 60
    return "%04d-%02d-%02dT%02d:%02d" % (y, m, d, mins // 60, mins % 60)


def _month_first(day):
    y, m, _d = civil_from_days(day)
    return days_from_civil(y, m, 1)


def _next_month_first(day):
    y, m, _d = civil_from_days(day)
    return days_from_civil(y + (m == 12), m % 12 + 1, 1)


def _with_fee(obj, micro):
    return obj[:-1] + ',"base_fee":%s}' % cents_text(micro)


def cost_chunks(history, tariff, today, day, resolution):
    """Chunks of /api/v1/cost: today, this month, this year (LowRes sums), day (its day record: also a day whose
    quarter hours the 30-day ring no longer holds) and the items of day. The flash is read a batch at a time with
    an empty chunk between batches (the server sends none): the loop gets the CPU back between reads, and nothing
    but the running sums and the day's item texts is held."""
    y, _m, _d = civil_from_days(today)
    month0 = _month_first(today)
    year0 = days_from_civil(y, 1, 1)
    t = tariff.tariff
    s_today = Sums()
    s_month = Sums()
    s_year = Sums()
    s_day = Sums()
    months = 0
    seen = -1
    for r in history.days_between(day if day < year0 else year0, today + 1, True):
        if r is None:
            yield ""
            continue
        if r[2] == day:
            s_day.add(r)
        if r[2] < year0:
            continue
        s_year.add(r)
        if r[2] >= month0:
            s_month.add(r)
        if r[2] == today:
            s_today.add(r)
        mk = pk.month_of(r[2])
        if mk != seen:
            seen = mk
            months += 1
    fee = t.base_fee if t.on else 0
    parts = []
    s_quarters = Sums()
    group = None     # [key, start, offset, Sums]

    def item(g):
        return '{"start":"%s","timestamp":%d,%s' % (_stamp(g[1], g[2]), g[1], g[3].json()[1:])

    for r in history.quarter_records(day, True):
        if r is None:
            yield ""
            continue
        s_quarters.add(r)
        key = r[1] if resolution == "quarter" else ((r[1] + r[4] * 60) // 3600, r[4])
        if group is None or group[0] != key:
            if group is not None:
                parts.append(item(group))
            start = r[1] if resolution == "quarter" else r[1] - (r[1] + r[4] * 60) % 3600
            group = [key, start, r[4], Sums()]
        group[3].add(r)
    if group is not None:
        parts.append(item(group))
    price = None
    clock = tariff.clock
    if clock is not None and clock.synced and t.on:
        now = clock.time()
        q = now - now % _Q
        price = t.import_at(q, (clock.local(q) - q) // 60)
    now_text = price_text(price) if price is not None else "null"
    if not s_day.n:
        s_day = s_quarters    # no day record (a RAM-only history cut short): what the quarter hours hold
    yield ('{"currency":"%s","mode":"%s","price_now":%s,"today":%s,"month":%s,"year":%s,"date":"%s",'
           '"resolution":"%s","day":%s,"quarter_hours_kept":%s,"items":[%s]}' % (
               t.currency, t.mode, now_text, s_today.json(), _with_fee(s_month.json(), fee),
               _with_fee(s_year.json(), fee * months), hs.date_str(day), resolution, s_day.json(True),
               "true" if s_quarters.n else "false", ",".join(parts)))


def _month_text(mk):
    return "%04d-%02d" % (mk // 12, mk % 12 + 1)


def period_chunks(history, tariff, today, first_day, end_day, by_month):
    """Chunks of /api/v1/cost?month= (items per day, by_month False) or ?year= (items per month) for the local days
    [first_day, end_day): the totals and an item per day or month that has a day record, from the day records
    (LowRes, two years) read a batch at a time like cost_chunks. Each month with records carries the base fee."""
    t = tariff.tariff
    fee = t.base_fee if t.on else 0
    total = Sums()
    parts = []
    group = None    # [month, Sums]
    months = 0
    if end_day > today + 1:
        end_day = today + 1
    for r in history.days_between(first_day, end_day, True):
        if r is None:
            yield ""
            continue
        total.add(r)
        mk = pk.month_of(r[2])
        if group is None or group[0] != mk:
            if group is not None and by_month:
                parts.append('{"month":"%s",%s' % (_month_text(group[0]), _with_fee(group[1].json(), fee)[1:]))
            group = [mk, Sums()]
            months += 1
        if by_month:
            group[1].add(r)
        else:
            one = Sums()
            one.add(r)
            parts.append('{"date":"%s","timestamp":%d,%s' % (hs.date_str(r[2]), r[1], one.json()[1:]))
    if group is not None and by_month:
        parts.append('{"month":"%s",%s' % (_month_text(group[0]), _with_fee(group[1].json(), fee)[1:]))
    if by_month:
        period = "%04d" % civil_from_days(first_day)[0]
    else:
        period = _month_text(pk.month_of(first_day))
    total_text = _with_fee(total.json(), fee * months) if total.n else total.json(True)
    yield '{"currency":"%s","mode":"%s","period":"%s","resolution":"%s","total":%s,"items":[%s]}' % (
        t.currency, t.mode, period, "month" if by_month else "day", total_text, ",".join(parts))


def parse_month(text):
    """(first day, end day) of a strict YYYY-MM (1970..2105); BadRequest otherwise."""
    if text is None or len(text) != 7 or text[4] != "-":
        raise BadRequest("month must be YYYY-MM")
    y, m = ascii_uint(text[:4], 4), ascii_uint(text[5:], 2)
    if y is None or m is None:
        raise BadRequest("month must be YYYY-MM")
    if not 1970 <= y <= 2105:
        raise BadRequest("month: year out of range 1970..2105")
    if not 1 <= m <= 12:
        raise BadRequest("month: no such month (01..12)")
    first = days_from_civil(y, m, 1)
    return first, _next_month_first(first)


def parse_year(text):
    """(first day, end day) of a strict YYYY (1970..2105); BadRequest otherwise."""
    y = ascii_uint(text, 4) if text is not None and len(text) == 4 else None
    if y is None:
        raise BadRequest("year must be YYYY")
    if not 1970 <= y <= 2105:
        raise BadRequest("year out of range 1970..2105")
    return days_from_civil(y, 1, 1), days_from_civil(y + 1, 1, 1)


def check_period(name, text, span, today, first):
    """BadRequest for a month or year that has not begun (after today) or ended before the oldest day record
    (first: its day, None when the history holds none yet)."""
    if span[0] > today:
        raise BadRequest("%s %s is in the future" % (name, text))
    if first is None:
        if span[1] <= today:
            raise BadRequest("%s %s: no history recorded yet" % (name, text))
    elif span[1] <= first:
        raise BadRequest("%s %s: no history before %s" % (name, text, hs.date_str(first)))


def cost_body(history, tariff, today, day, resolution):
    """The whole text of /api/v1/cost (see cost_chunks)."""
    return "".join(cost_chunks(history, tariff, today, day, resolution))


def cheapest(prices, first_q, n_q):
    """(index of the first quarter, sum) of the cheapest run of n_q priced quarter hours in prices[first_q:],
    or None. Ties: the earliest."""
    best = None
    run = 0
    s = 0
    for i in range(first_q, len(prices)):
        p = prices[i]
        if p is None:
            run = 0
            s = 0
            continue
        run += 1
        s += p
        if run > n_q:
            s -= prices[i - n_q]
            run = n_q
        if run == n_q and (best is None or s < best[1]):
            best = (i - n_q + 1, s)
    return best


def _day_prices(svc, day):
    start = svc._day_start(day)
    n = (svc._day_start(day + 1) - start) // _Q
    t = svc.tariff
    out = []
    for i in range(n):
        q = start + i * _Q
        off = (svc.clock.local(q) - q) // 60
        out.append(t.import_at(q, off))
    return start, out


def tariff_body(svc, now, hours, from_today=False):
    """The price now, the prices from now (or, from_today, from today's local midnight: the page's curve of the
    whole day) to 36 h ahead, the cheapest window of `hours` today (from now) and tomorrow, the fetch's state."""
    t = svc.tariff
    clock = svc.clock
    q0 = now - now % _Q
    off = (clock.local(q0) - q0) // 60
    imp = t.import_at(q0, off)
    exp = t.export_at(q0, off)
    rows = []
    q = svc._day_start(svc.local_day(now)) if from_today else q0
    while q < q0 + AHEAD_S:
        o = (clock.local(q) - q) // 60
        p = t.import_at(q, o)
        mk = t.market(q) if t.mode == "dynamic" else None
        rows.append('{"start":"%s","timestamp":%d,"import_price":%s%s}' % (
            _stamp(q, o), q, price_text(p) if p is not None else "null",
            (',"market_price":%s' % price_text(mk)) if mk is not None else ""))
        q += _Q
    today = svc.local_day(now)
    windows = []
    for name, day in (("today", today), ("tomorrow", today + 1)):
        start, prices = _day_prices(svc, day)
        first = (q0 - start) // _Q if day == today else 0
        best = cheapest(prices, max(0, first), hours * 4) if t.on else None
        if best is None:
            windows.append('"%s":null' % name)
            continue
        a = start + best[0] * _Q
        b = a + hours * 3600
        oa = (clock.local(a) - a) // 60
        ob = (clock.local(b) - b) // 60
        windows.append('"%s":{"start":"%s","timestamp":%d,"end":"%s","end_timestamp":%d,"mean_price":%s}' % (
            name, _stamp(a, oa), a, _stamp(b, ob), b, price_text(div_round(best[1], hours * 4))))
    fetch = '{"state":"%s","error":%s,"at":%d,"days":[%s]}' % (
        svc.fetch_state, _jstr(svc.fetch_error) if svc.fetch_error else "null", svc.fetched_at,
        ",".join('"%s"' % hs.date_str(d[0]) for d in svc.book.days))
    return ('{"currency":"%s","mode":"%s","now":{"timestamp":%d,"import_price":%s,"export_price":%s},'
            '"prices":[%s],"cheapest":{"hours":%d,%s},"fetch":%s}' % (
                t.currency, t.mode, q0, price_text(imp) if imp is not None else "null",
                price_text(exp) if exp is not None else "null", ",".join(rows), hours, ",".join(windows), fetch))


def _jstr(text):
    import json
    return json.dumps(text)


def _month_json(m, local=None):
    """A month's peaks; local(t) -> local seconds of a UTC instant (the device's zone) for the "start" texts."""
    if m is None:
        return "null"
    if local is None:
        local = _utc
    y = m.month // 12
    mo = m.month % 12 + 1
    if m.q is None:
        q = "null"
    else:
        q = '{"power_W":%s,"start":"%s","timestamp":%d}' % (pk.power_text(m.q[0]), _stamp(m.q[1], _off(local, m.q[1])),
                                                            m.q[1])
    top = m.top3()
    tops = ",".join('{"date":"%s","start":"%s","timestamp":%d,"energy_kWh":%s}' % (
        hs.date_str(d), _stamp(t, _off(local, t)), t, hs.kwh(e)) for e, t, d in top)
    mean = hs.kwh(div_round(sum(e for e, _t, _d in top), len(top))) if top else "null"
    return '{"month":"%04d-%02d","quarter_peak":%s,"hourly_top3":[%s],"hourly_top3_mean_kWh":%s}' % (
        y, mo, q, tops, mean)


def _utc(t):
    return t


def _off(local, t):
    return (local(t) - t) // 60


def peaks_body(svc):
    p = svc.peaks
    local = svc.clock.local
    return '{"current":%s,"months":[%s]}' % (_month_json(p.current(), local),
                                              ",".join(_month_json(m, local) for m in reversed(p.months)))


def routes(app):
    """[Route] of the money endpoints; app: core.app.App with history, tariff, clock."""

    def ready(request):
        if app.tariff is None or app.history is None:
            return error_response(request, 503, "tariff or history not running", headers={"Retry-After": "5"})
        clock = app.clock
        if clock is None or not clock.synced:
            return error_response(request, 503, "the clock is not set yet", headers={"Retry-After": "5"})
        app.tariff.follow_settings()   # a change POSTed just before counts in this answer
        return None

    def cost(request):
        bad = ready(request)
        if bad is not None:
            return bad
        svc = app.tariff
        today = svc.local_day(app.clock.time())
        history = app.history
        try:
            date = query(request, "date")
            month = query(request, "month")
            year = query(request, "year")
            res = query(request, "resolution")
            if (date is not None) + (month is not None) + (year is not None) > 1:
                raise BadRequest("give one of date, month, year")
            if month is not None or year is not None:
                if res is not None:
                    raise BadRequest("resolution goes with date only")
                if month is not None:
                    span = parse_month(month)
                    check_period("month", month, span, today, history.first_day())
                else:
                    span = parse_year(year)
                    check_period("year", year, span, today, history.first_day())
                by_month = year is not None
                return ChunkedResponse(request, lambda: period_chunks(history, svc, today, span[0], span[1],
                                                                      by_month), content_type=_JSON)
            day = today if date is None else parse_date(date, "date")
            res = res or "hour"
            if res not in ("hour", "quarter"):
                raise BadRequest("resolution must be hour or quarter")
        except BadRequest as exc:
            return error_response(request, 400, str(exc))
        return ChunkedResponse(request, lambda: cost_chunks(history, svc, today, day, res), content_type=_JSON)

    def tariff(request):
        bad = ready(request)
        if bad is not None:
            return bad
        text = query(request, "hours")
        hours = 1 if text is None else ascii_uint(text, 2)
        if hours is None or not 1 <= hours <= 12:
            return error_response(request, 400, "hours must be an integer 1..12")
        since = query(request, "from")
        if since is not None and since != "today":
            return error_response(request, 400, "from must be today (or left out: from now)")
        return Response(request, tariff_body(app.tariff, app.clock.time(), hours, since == "today"),
                        content_type=_JSON)

    def peaks(request):
        bad = ready(request)
        if bad is not None:
            return bad
        return Response(request, peaks_body(app.tariff), content_type=_JSON)

    return [
        Route("/api/v1/cost", GET, cost),
        Route("/api/v1/tariff", GET, tariff),
        Route("/api/v1/peaks", GET, peaks),
    ]
