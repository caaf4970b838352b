"""Settings routes: GET the whole document (no secrets), POST a partial update (all or nothing)."""

import json

from adafruit_httpserver import GET, POST, JSONResponse, Response, Route

from core.money import MONEY_KEYS

from core.settings import SCHEMA, SECRETS, restart_needed
from services.api.answers import ApiError, read_json


def _echo(patch, doc, prefix=""):
    """The request as the answer's "applied" echo, without secret values; settings keys show the stored form
    (a UTF-16 surrogate pair joined, as the MicroPython json module does not)."""
    out = {}
    for key, value in patch.items():
        path = prefix + str(key)
        if path in SECRETS:
            continue
        if isinstance(value, dict):
            out[key] = _echo(value, doc, path + ".")
        elif path in SCHEMA:
            node = doc
            for part in path.split("."):
                node = node[part]
            out[key] = node
        else:
            out[key] = value
    return out


def settings_json(doc):
    """JSON text of a settings document whose tariff money (kept as exact decimal text) is written as JSON numbers:
    the object is spliced in as text, so no value ever passes through a float."""
    tariff = doc.get("tariff")
    if not isinstance(tariff, dict):
        return json.dumps(doc)
    rest = {}
    for k in doc:
        if k != "tariff":
            rest[k] = doc[k]
    parts = []
    for k in sorted(tariff):
        v = tariff[k]
        if k in MONEY_KEYS and isinstance(v, str):
            parts.append('"%s":%s' % (k, v))
        elif k == "tou" and isinstance(v, list):
            parts.append('"tou":[%s]' % ",".join('{"days":%s,"from":"%s","to":"%s","price":%s}' % (
                json.dumps(w["days"]), w["from"], w["to"], w["price"]) for w in v))
        else:
            parts.append('"%s":%s' % (k, json.dumps(v)))
    head = json.dumps(rest)
    return head[:-1] + (", " if len(head) > 2 else "") + '"tariff": {' + ",".join(parts) + "}}"


def routes(app):
    """Route list of /api/v1/settings."""
    settings = app.settings

    def get_settings(request):
        return Response(request, settings_json(settings.public()), content_type="application/json")

    def post_settings(request):
        patch = read_json(request, exact=MONEY_KEYS)
        doc, changed, errors = settings.prepare(patch)
        if not errors and "api_auth_required" in changed and doc["api_auth_required"] and not app.auth.configured():
            errors["api_auth_required"] = ("no confirmed token pair: call /api/v1/auth/tokens/generate and "
                                           "/api/v1/auth/tokens/confirm first")
        if errors:
            raise ApiError(400, "Invalid settings", fields=errors)
        if changed:
            try:
                if "api_auth_required" in changed:
                    app.auth.set_required(doc["api_auth_required"])   # the tokens file keeps it too (fail closed)
                settings.commit(doc)
            except OSError as exc:
                raise ApiError(500, "Settings could not be stored (%s)" % exc, code="storage_failed")
            if "ledEnable" in changed and app.led is not None:
                app.led.enabled = doc["ledEnable"]
            app.bus.publish("settings", changed)
            app.log.info("settings changed: %s", ", ".join(changed))
        later = [k for k in changed if restart_needed(k)]
        now = [k for k in changed if not restart_needed(k)]
        return JSONResponse(request, {
            "success": True,
            "applied": _echo(patch, doc),
            "changed": changed,
            "applied_now": now,
            "after_restart": later,
            "restart_required": bool(later),
        })

    return [
        Route("/api/v1/settings", GET, get_settings),
        Route("/api/v1/settings", POST, post_settings),
    ]

