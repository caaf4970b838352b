"""REST routes of the history: /api/v1/history/latest, /recent, /highRes?date=, /lowRes?start=&days= (streamed JSON)."""

import json

from adafruit_httpserver import GET, ChunkedResponse, Response, Route
from adafruit_ticks import ticks_diff, ticks_ms

from core.elapsed import fresh
from core.tz import days_from_civil, is_leap, to_civil
from meter import obis
from meter.decimal import to_str
from services.api.answers import error_response
from services.api.http_parse import ascii_uint

MAX_DAYS = 366        # lowRes days: one leap year, the retention of the LowRes ring
_MDAYS = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_JSON = "application/json"
_STALE_MS = 15000   # a reading older than this is not served even if left on the bus (a dead pipeline)


class BadRequest(Exception):
    """A query parameter is missing or wrong; the message goes to the client."""


def parse_date(text, name):
    """Day number of a strict YYYY-MM-DD between 1970-01-01 and 2105-12-31; BadRequest otherwise."""
    if text is None or text == "":
        raise BadRequest("missing parameter %s (YYYY-MM-DD)" % name)
    if len(text) != 10 or text[4] != "-" or text[7] != "-":
        raise BadRequest("%s must be YYYY-MM-DD" % name)
    # ASCII digits only: CPython's isdigit()/int() also take other scripts' digits ("\u0662\u0660\u0662\u0664").
    y, m, d = ascii_uint(text[:4], 4), ascii_uint(text[5:7], 2), ascii_uint(text[8:], 2)
    if y is None or m is None or d is None:
        raise BadRequest("%s must be YYYY-MM-DD" % name)
    if not 1970 <= y <= 2105:
        raise BadRequest("%s: year out of range 1970..2105" % name)
    if not 1 <= m <= 12:
        raise BadRequest("%s: no such month" % name)
    last = 29 if m == 2 and is_leap(y) else _MDAYS[m - 1]
    if not 1 <= d <= last:
        raise BadRequest("%s: no such day" % name)
    return days_from_civil(y, m, d)


def parse_days(text):
    """lowRes days: an integer 1..MAX_DAYS written in plain digits; BadRequest otherwise."""
    if text is None or text == "":
        raise BadRequest("missing parameter days (1..%d)" % MAX_DAYS)
    n = ascii_uint(text, 4)
    if n is None or not 1 <= n <= MAX_DAYS:
        raise BadRequest("days must be an integer 1..%d" % MAX_DAYS)
    return n


def _bad(request, message):
    return error_response(request, 400, message)


def _unavailable(request, message):
    return error_response(request, 503, message, headers={"Retry-After": "5"})


def latest_body(reading, clock, lang, now_ms, energy_floor=None):
    """JSON text of /history/latest for a reading: timestamp, local datetime, one object per short OBIS code;
    energy totals the floor holds back (zero, negative, falling) are left out, as MQTT leaves them out."""
    ts = 0
    when = ""
    if clock is not None and clock.synced:
        ts = clock.time() - ticks_diff(now_ms, reading.ts_ms) // 1000
        y, mo, d, hh, mm, ss = to_civil(clock.local(ts))
        when = "%04d-%02d-%02dT%02d:%02d:%02d" % (y, mo, d, hh, mm, ss)
    parts = ['{"timestamp":%d,"datetime":"%s"' % (ts, when)]
    values = energy_floor.filter(reading.values) if energy_floor is not None else reading.values
    # The OBIS table's order, never the dict's: CircuitPython's dicts keep no insertion order.
    for code in obis.CODES:
        v = values.get(code)
        if v is None:
            continue
        unit = obis.unit(code)
        if unit is None:
            continue
        # Energies in kWh (exponent shift of Wh, exact), everything else in its base unit.
        text = to_str(v[0], v[1] - 3) if obis.kind(code) == "energy" else to_str(v[0], v[1])
        name = json.dumps(obis.label(code, lang))
        parts.append(',"%s":{"value":%s,"unit":"%s","name":%s}' % (code, text, unit, name))
    parts.append("}")
    return "".join(parts)


def routes(app):
    """The history routes for services/api/service.py; app: core.app.App with bus, clock, settings, history."""

    def latest(request):
        reading = app.bus.latest("reading")
        now = ticks_ms()
        # The pipeline publishes None when the meter is silent; the age check covers a reading it left behind,
        # whose stamp the tick wrap would otherwise turn into "in the future" (a timestamp days ahead).
        if reading is None or not fresh(reading.ts_ms, now, _STALE_MS):
            return Response(request, "", status=(204, "No Content"))  # stale or not yet read: the client shows None
        lang = app.settings.get("language.active", "de")
        return Response(request, latest_body(reading, app.clock, lang, now, app.energy_floor), content_type=_JSON)

    def high_res(request):
        if app.history is None:
            return _unavailable(request, "history not running")
        try:
            day = parse_date(request.query_params.get("date"), "date")
        except BadRequest as exc:
            return _bad(request, str(exc))
        return ChunkedResponse(request, app.history.high_res(day), content_type=_JSON)

    def low_res(request):
        if app.history is None:
            return _unavailable(request, "history not running")
        q = request.query_params
        try:
            first = parse_date(q.get("start"), "start")
            days = parse_days(q.get("days"))
        except BadRequest as exc:
            return _bad(request, str(exc))
        return ChunkedResponse(request, app.history.low_res(first, days), content_type=_JSON)

    def recent(request):
        if app.history is None:
            return _unavailable(request, "history not running")
        clock = app.clock
        utc = clock.time() if clock is not None and clock.synced else None
        return Response(request, app.history.recent_json(utc), content_type=_JSON)

    return [
        Route("/api/v1/history/latest", GET, latest),
        Route("/api/v1/history/recent", GET, recent),
        Route("/api/v1/history/highRes", GET, high_res),
        Route("/api/v1/history/lowRes", GET, low_res),
    ]
