"""The settings routes' work: GET the whole document (no secrets), POST a partial update (all or nothing), restore a
backup. Imported for a request and let go after it (services/api/routes_settings.py)."""

import json

from adafruit_httpserver import JSONResponse, Response

from core.money import MONEY_KEYS
from core.settings import SECRET_DESTINATIONS, SECRETS, restart_needed
from services.api.answers import ApiError, read_json


def _echo(patch, doc, prefix=""):
    """The request as the answer's "applied" echo, without secret values; settings keys show the stored form
    (a UTF-16 surrogate pair joined, as the MicroPython json module does not)."""
    from core.settings_check import SCHEMA   # loaded by _apply already (a GET needs none of the checks)

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


# What a backup never changes: the device must stay on the network the owner reaches it through, and stay locked.
NOT_RESTORED = ("wifi", "accessPoint", "api_auth_required")


def _given(patch, dotted):
    """True when the patch gives a value at dotted (nested or as a top-level dotted key); "" means "keep", not given."""
    if dotted in patch:
        return patch[dotted] != ""
    node = patch
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return node != ""


def get_settings(app, request):
    return Response(request, settings_json(app.settings.public()), content_type="application/json")


def post_settings(app, request):
    return _apply(app, request, read_json(request, exact=MONEY_KEYS))


def restore(app, request):
    """A backup's settings: everything but what keeps the device reachable and locked (NOT_RESTORED), whatever the
    spelling (nested or dotted); such a key refuses the whole backup (400 naming it), nothing changes."""
    from core import settings_check  # noqa: F401  (held for keys_of() and _apply(): one import)

    patch = read_json(request, exact=MONEY_KEYS)
    keys, _shape = app.settings.keys_of(patch)
    refused = {}
    for key in keys:
        for prefix in NOT_RESTORED:
            if key == prefix or key.startswith(prefix + "."):
                refused[key] = ("not restored from a backup: the WiFi, the access point and authentication are "
                                "changed through their own settings")
    if refused:
        raise ApiError(400, "Invalid settings", fields=refused)
    return _apply(app, request, patch)


def _apply(app, request, patch):
    from core import settings_check  # noqa: F401  (held for the whole request: prepare() and _echo() use it)

    settings = app.settings
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
    # A secret whose destination changed and that the request did not give again (core/settings.py)
    dropped = [s for s, dest in SECRET_DESTINATIONS if dest in changed and s in changed and not _given(patch, s)]
    pairing = getattr(app, "cloud_pairing", None)
    if "cloud.host" in changed and pairing is None:
        from services.cloud.pairing import Pairing     # the cloud is off (its code not loaded): the stored pairing

        pairing = Pairing("cloud.json")
        pairing.load()
        app.cloud_pairing = pairing
    if "cloud.host" in changed and pairing.paired:
        try:
            pairing.unpair()   # the pairing credential goes to cloud.host: another host gets none of it
        except OSError as exc:
            app.log.error("cloud pairing not removed: %s", exc)
        dropped.append("cloud pairing")
    later = [k for k in changed if restart_needed(k)]
    now = [k for k in changed if not restart_needed(k)]
    answer = {
        "success": True,
        "applied": _echo(patch, doc),
        "changed": changed,
        "applied_now": now,
        "after_restart": later,
        "restart_required": bool(later),
    }
    if dropped:
        answer["secrets_dropped"] = dropped
        answer["message"] = ("%s removed: its destination changed and the request did not give it again"
                             % ", ".join(dropped))
    if not changed:
        answer["message"] = "Nothing changed: every value given equals the stored one"
    txt = _discovery_warning(doc, changed)
    if txt is not None:
        answer["warnings"] = [txt]
    return JSONResponse(request, answer)


def _discovery_warning(doc, changed):
    """What a change of the features that hold sockets costs mDNS discovery: with them all on, our responder may not
    have a socket (core/sockbudget.py responder_fits), CircuitPython's answers without TXT records, and Home
    Assistant's WattWaechter integration cannot be set up by discovery (issue 36 finding 6)."""
    from core.settings import _get
    from core.settings_check import _SOCKET_KEYS   # held for the save already: the keys whose features hold sockets
    from core.sockbudget import responder_fits

    if not any(k in changed for k in _SOCKET_KEYS):
        return None

    def get(key, default=None):
        v = _get(doc, key)
        return default if v is None else v

    if responder_fits(get):
        return None
    return ("mdns_txt: with these features on every socket may be in use, so the device is announced by "
            "CircuitPython's responder, without TXT records: Home Assistant's WattWaechter integration then finds it "
            "but cannot set it up by discovery (add it by its address). Turn off Modbus, or the Shelly/SMA emulation, "
            "or the always-on access point to keep discovery complete")
