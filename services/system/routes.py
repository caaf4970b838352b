"""System routes: alive, info, led, wifi_scan, timezones, reboot."""


import json

from adafruit_httpserver import GET, POST, ChunkedResponse, JSONResponse, Response, Route

from core.version import VERSION
from drivers.radio import AP_IP, ap_ssid
from meter.decimal import Exact
from services.api.answers import ApiError, query

_LED_MODE = {"solid": "solid", "dimmed": "dimmed", "pulsing": "pulse"}  # aio-wattwaechter's LedMode names


def _entry(name, value, unit=""):
    """One info row: (name, value, unit); a tuple, not a dict (the page asks every 20 s, ~60 rows each)."""
    return (name, value, unit)


def _value_json(value):
    """A JSON value text: true/false/null, an int or an Exact decimal as its exact number, a text through
    json.dumps (it may need escapes: a device name is the owner's)."""
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return "null"
    if isinstance(value, (int, Exact)):
        return str(value)
    return json.dumps(value)


def _plain(text):
    """True for a name or unit that goes into JSON as it is (the firmware's own identifiers and units)."""
    return '"' not in text and "\\" not in text


def info_json(sections):
    """The /system/info body from [(section, [entry])]: sections and keys in a fixed order (CircuitPython's dicts
    keep none), numbers exact. One %-format a row (an int straight in with %d), one join: json.dumps three times a
    row (a stream writer each on CircuitPython) made this 270 S3 ms and 43 KB of garbage an answer (device bench)."""
    out = ["{"]
    sep = ""
    for section, entries in sections:
        out.append('%s"%s":[' % (sep, section))
        sep = ","
        row_sep = ""
        for name, value, unit in entries:
            if not (_plain(name) and _plain(unit)):
                row = '%s{"name":%s,"value":%s,"unit":%s}' % (row_sep, json.dumps(name), _value_json(value),
                                                              json.dumps(unit))
            elif isinstance(value, int) and not isinstance(value, bool):
                row = '%s{"name":"%s","value":%d,"unit":"%s"}' % (row_sep, name, value, unit)
            else:
                row = '%s{"name":"%s","value":%s,"unit":"%s"}' % (row_sep, name, _value_json(value), unit)
            out.append(row)
            row_sep = ","
        out.append("]")
    out.append("}")
    return "".join(out)


def _section(d):
    """A describe() dict as info entries."""
    out = []
    for key in sorted(d):
        value = d[key]
        if isinstance(value, (dict, list, tuple)):
            continue
        out.append(_entry(key, value))
    return out


def _emulation_section(app):
    """The meter emulations (docs/emulation.md): each module's state and counters under its name."""
    d = {"shelly": bool(app.settings.get("emulation.shelly", False)),
         "sma": bool(app.settings.get("emulation.sma", False))}
    for prefix, module in (("loader", app.emulation), ("shelly_udp", app.shelly_udp), ("shelly_ws", app.shelly_ws),
                           ("sma", app.sma)):
        if module is not None:
            for key, value in module.describe().items():
                d[prefix + "." + key] = value
    return _section(d)


def _wifi_sections(app):
    """The wifi and ap info sections. aio-wattwaechter's Home Assistant integration reads signal_strength,
    ip_address, mdns_name and mac_address; rssi, ip and hostname stay for clients that read the older names."""
    wm = getattr(app, "wifi", None)
    if wm is None:
        return [], []
    connected = wm.connected()
    rssi = wm.rssi() if connected else 0
    ip = wm.ip() if connected else ""
    mdns = getattr(app, "mdns", None)
    wifi = [
        _entry("connected", connected),
        _entry("ssid", wm.ssid()),
        _entry("signal_strength", rssi, "dBm"),
        _entry("rssi", rssi, "dBm"),
        _entry("ip_address", ip),
        _entry("ip", ip),
        _entry("mdns_name", mdns.fqdn() if mdns is not None else ""),
        _entry("hostname", wm.hostname),
        _entry("mac_address", wm.mac()),
        _entry("profile", wm.active or ""),
        _entry("last_error", "" if connected else wm.last_error),   # why the station is not joined (issue 37)
    ]
    ap_on = wm.ap_active()
    ap = [
        _entry("active", ap_on),
        _entry("mode", wm.ap_mode),
        _entry("ssid", ap_ssid(app.settings, app.device_id)),
        _entry("ip", AP_IP if ap_on else ""),
    ]
    return wifi, ap


def _ota_section(ota):
    """What the last update check found (no new check: that is GET /ota/check's job)."""
    if ota is None:
        return []
    available = ota.available
    return [_entry("update_available", available is not None),
            _entry("available_version", available["version"] if available is not None else ""),
            _entry("state", ota.phase)]


def _wall_time(app):
    """UTC now from the NTP clock; before the first sync a fixed January instant (standard time), never the
    unset RTC's invented date."""
    clock = app.clock
    now = clock.time() if clock is not None else None
    if now is None:
        from core.clock import Clock

        return Clock.MIN_EPOCH
    return int(now)


def routes(app):
    """Route list of the system endpoints."""

    def alive(request):
        return JSONResponse(request, {"alive": True, "version": VERSION})

    def info(request):
        up_ms = app.log.uptime.ms()  # wrap-safe: ticks_diff from boot went negative after ~3.1 days
        wifi, ap = _wifi_sections(app)
        heap = []
        if app.mem_free is not None:
            heap.append(_entry("free", app.mem_free(), "B"))
        largest = getattr(app, "heap_largest", None)
        heap.append(_entry("largest_block", largest() if largest is not None else "", "B"))
        sup = app.supervisor
        sup_info = sup.describe() if sup is not None else {"modules": {}}
        supervisor = [_entry("cycles", sup_info.get("cycles", 0)),
                      _entry("worst_cycle_ms", sup_info.get("worst_cycle_ms", 0), "ms"),
                      _entry("state", sup_info.get("state", ""))]
        for name in sorted(sup_info["modules"]):
            m = sup_info["modules"][name]
            supervisor.append(_entry(name + ".worst_poll_ms", m["worst_poll_ms"], "ms"))
            supervisor.append(_entry(name + ".state", m["state"]))
        meter = _section(app.meter.describe()) if app.meter is not None else [_entry("state", "absent")]
        http = getattr(app, "http", None)
        mqtt = getattr(app, "mqtt", None)
        clock = _section(app.clock.describe()) if app.clock is not None else [_entry("synced", False)]
        sections = (
            ("uptime", [_entry("uptime", up_ms // 1000, "s"), _entry("reset_reason", app.reset_reason)]),
            ("wifi", wifi),
            ("ap", ap),
            ("esp", [_entry("esp_id", app.device_id), _entry("os_version", VERSION),
                     _entry("device_name", app.settings.get("device_name", ""))]),
            ("settings", [_entry("load_errors", app.settings.load_errors), _entry("damaged", app.settings.damaged),
                          _entry("auth_required", bool(app.settings.get("api_auth_required", False))),
                          # no settings document stored yet: the factory state (the page's first-run card)
                          _entry("factory", not app.settings.exists()),
                          # a confirmed token pair exists: only then can authentication be switched on
                          _entry("tokens_set", getattr(app, "auth", None) is not None and app.auth.configured())]),
            # Features that are not running and why (e.g. out of memory at start); empty when all run.
            ("features_off", [_entry(name, why) for name, why in sorted(getattr(app, "features_off", {}).items())]),
            ("heap", heap),
            ("meter", meter),
            ("clock", clock),
            ("supervisor", supervisor),
            ("http", _section(http.describe()) if http is not None else []),
            ("mqtt", _section(mqtt.describe()) if mqtt is not None else []),
            ("modbus", _section(app.modbus.describe()) if app.modbus is not None else []),
            ("ota", _ota_section(app.ota)),
            ("emulation", _emulation_section(app)),
            # which mDNS responder runs (own, or system: CircuitPython's, without TXT) and why (fallback_reason)
            ("mdns", _section(app.mdns.describe()) if getattr(app, "mdns", None) is not None else []),
        )
        return Response(request, info_json(sections), content_type="application/json")

    def led(request):
        d = app.led.info()
        on = d["enabled"]
        rgb = d["rgb"]
        return JSONResponse(request, {
            "status": d["status"],
            "priority": d["priority"],
            "color": d["color"] if on else "off",
            "mode": _LED_MODE.get(d["mode"], d["mode"]) if on else "off",
            "rgb": {"r": rgb[0], "g": rgb[1], "b": rgb[2]},
            "enabled": on,
            "active_statuses": dict((s, True) for s in d["active_statuses"]),
        })

    scanner = getattr(app, "wifi_scanner", None)

    def wifi_scan(request):
        refresh = query(request, "refresh")
        if refresh is not None and refresh not in ("true", "false", "1", "0"):
            raise ApiError(400, "refresh must be true or false")
        if scanner is None:
            return JSONResponse(request, {"networks": [], "count": 0, "scanning": False})
        if refresh in ("true", "1") or not (scanner.scanned or scanner.scanning):
            scanner.request()
        nets = scanner.networks
        busy = scanner.scanning or scanner.wanted  # a requested scan starts at the radio's next poll
        return JSONResponse(request, {"networks": nets, "count": len(nets), "scanning": busy})

    def timezones(request):
        from core import tz

        now = _wall_time(app)

        def body():
            # Streamed: ~600 zones are ~25 KB of JSON, too much to build at once without PSRAM.
            first = True
            part = ["["]
            for name, off in tz.list_zones(now):
                part.append('%s{"name":"%s","utcOffsetMin":%d}' % ("" if first else ",", name, off))
                first = False
                if len(part) >= 16:
                    yield "".join(part)
                    part = []
            part.append("]")
            yield "".join(part)

        return ChunkedResponse(request, body, content_type="application/json")

    def reboot(request):
        lifecycle = app.lifecycle
        request.after_sent = lambda: lifecycle.request_reboot("api")
        return JSONResponse(request, {"rebooting": True, "message": "Restarting; back in about 30 seconds"})

    return [
        Route("/api/v1/system/alive", GET, alive),
        Route("/api/v1/system/info", GET, info),
        Route("/api/v1/system/led", GET, led),
        Route("/api/v1/system/wifi_scan", GET, wifi_scan),
        Route("/api/v1/system/timezones", GET, timezones),
        Route("/api/v1/system/reboot", POST, reboot),
    ]
