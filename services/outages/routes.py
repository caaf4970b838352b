"""GET /api/v1/system/outages: the outage journal, newest first."""

import json

from adafruit_httpserver import GET, Response, Route

from services.api.answers import ApiError
from services.outages.journal import REASONS

PATH = "/api/v1/system/outages"


def entry_json(r):
    """One entry's text, keys in the order the API fixes: down, up, duration_s, reason, detail."""
    down, up = r[1], r[2]
    duration = str(up - down) if down and up and up >= down else "null"
    reason = REASONS[r[3]] if r[3] < len(REASONS) else "unknown"
    return '{"down":%d,"up":%d,"duration_s":%s,"reason":"%s","detail":%s}' % (down, up, duration, reason,
                                                                                json.dumps(r[5]))


def outages_json(entries, capacity):
    return '{"outages":[%s],"capacity":%d}' % (",".join(entry_json(r) for r in entries), capacity)


def routes(app):
    """The route; app.outages is the Outages module (None on a build without it)."""

    def outages(request):
        mod = getattr(app, "outages", None)
        if mod is None:
            raise ApiError(503, "outage journal not running")
        try:
            entries = mod.journal.entries()
        except OSError as exc:
            raise ApiError(503, "outage journal unreadable: %s" % exc)
        return Response(request, outages_json(entries, mod.journal.capacity), content_type="application/json")

    return [Route(PATH, GET, outages)]
