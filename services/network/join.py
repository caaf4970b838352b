"""POST /api/v1/wifi/join: try WiFi credentials before they are stored, with the access point kept up, and answer
with the address the device has on the new network (or, plainly, why it could not join)."""

import json

from adafruit_httpserver import POST, Response, Route

from services.api.answers import ApiError, read_json, status

JOIN_PATH = "/api/v1/wifi/join"
PROFILES = ("primary", "secondary")
STATIC_KEYS = ("static_ip", "ip", "subnet", "gateway", "dns")
_JSON = "application/json"

# CircuitPython's wifi.Radio.connect() raises ConnectionError with these texts (ports/espressif Radio.c); the stable
# reason codes are what the web interface translates.
WRONG_PASSWORD = "wrong_password"
NOT_FOUND = "network_not_found"
FAILED = "failed"


def reason_of(error_text):
    """(reason code, message for a person) for the text of a failed connect()."""
    low = error_text.lower()
    if "authentication" in low or "auth" in low and "fail" in low:
        return WRONG_PASSWORD, "The WiFi password is wrong."
    if "no network" in low or "not found" in low:
        return NOT_FOUND, "No network with this name is in range."
    return FAILED, "The device could not join this network (%s)." % error_text


def _profile_patch(doc, stored):
    """The settings patch for the asked profile; ApiError 400 for a malformed request."""
    name = doc.get("profile", "primary")
    if name not in PROFILES:
        raise ApiError(400, "profile must be primary or secondary", fields={"profile": "primary or secondary"})
    ssid = doc.get("ssid")
    if not isinstance(ssid, str) or not ssid:
        raise ApiError(400, "ssid is required", fields={"ssid": "must be a non-empty string"})
    password = doc.get("password", "")
    if password is not None and not isinstance(password, str):
        raise ApiError(400, "password must be a string", fields={"password": "must be a string"})
    entry = {"ssid": ssid, "enable": True}
    same_network = isinstance(stored, dict) and stored.get("ssid") == ssid
    # An empty password keeps the stored one only for the same network; for another one it means an open network
    # (the stored secret belongs to the old network and must never be sent to a new one).
    entry["password"] = password if password else ("" if same_network else None)
    for key in STATIC_KEYS:
        if key in doc:
            entry[key] = doc[key]
    if "static_ip" not in doc:
        entry["static_ip"] = False
    return name, {"wifi": {name: entry}}


def joined_body(name, ssid, ip, hostname, ap_active):
    """JSON text of a successful join, keys in a fixed order."""
    return ('{"joined":true,"profile":"%s","ssid":%s,"ip":%s,"mdns_name":%s,"url":%s,"ap_active":%s}'
            % (name, json.dumps(ssid), json.dumps(ip), json.dumps(hostname + ".local"),
               json.dumps("http://%s/" % ip if ip else ""), "true" if ap_active else "false"))


def failed_body(reason, message, ssid):
    """JSON text of a refused join, keys in a fixed order."""
    return '{"joined":false,"reason":"%s","error":%s,"ssid":%s}' % (reason, json.dumps(message), json.dumps(ssid))


def routes(app):
    """The join route; app.wifi is the WifiManager (None on a build without WiFi), app.settings, app.bus, app.log."""
    settings = app.settings

    def join(request):
        wifi = getattr(app, "wifi", None)
        if wifi is None:
            raise ApiError(503, "WiFi is not running")
        doc = read_json(request)
        name, patch = _profile_patch(doc, settings.get("wifi." + name_of(doc)))
        full, changed, errors = settings.prepare(patch)
        if errors:
            raise ApiError(400, "Invalid WiFi settings", fields=errors)
        ssid = patch["wifi"][name]["ssid"]
        err = wifi.try_credentials(full["wifi"][name], name)
        if err is not None:
            reason, message = reason_of(err)
            if app.log is not None:
                app.log.warning("wifi: joining %s failed (%s); nothing stored", ssid, err)
            return Response(request, failed_body(reason, message, ssid), content_type=_JSON, status=status(422))
        if changed:
            try:
                settings.commit(full)
            except OSError as exc:
                raise ApiError(500, "Joined %s, but the settings could not be stored (%s)" % (ssid, exc),
                               code="storage_failed")
            app.bus.publish("settings", changed)
        if app.log is not None:
            app.log.info("wifi: joined %s from the web interface, %s", ssid, wifi.ip())
        return Response(request, joined_body(name, ssid, wifi.ip(), wifi.hostname, wifi.ap_active()),
                        content_type=_JSON)

    return [Route(JOIN_PATH, POST, join)]


def name_of(doc):
    """The profile a request names (validated later by _profile_patch)."""
    name = doc.get("profile", "primary") if isinstance(doc, dict) else "primary"
    return name if name in PROFILES else "primary"
