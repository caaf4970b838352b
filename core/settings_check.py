"""Settings validation (core/settings.py's rules): the schema, each value's check, the rules between keys, how a
partial update or a stored document is read. Imported for the job (a save, the load at start, a restore) and let go
after it (core/settings.py): CircuitPython keeps every imported module's code in the heap, and this is the larger
half of the settings code, used on a save or two a day."""

from core.ipv4 import dotted as _dotted, host_reason as _host_reason, parse_ipv4 as _parse_ipv4, \
    prefix_len as _prefix_len
from core.settings import LANGUAGES, SECRET_DESTINATIONS, SECRETS, _copy, _get, _set
from core.sockbudget import problem as _socket_problem
from core.text import ascii_printable as _ascii_printable, escaped as _escaped, is_hostname as _is_hostname, \
    join_surrogates as _unicode, printable as _printable
from core.url import split_url

# dotted key -> (kind, a, b). Every string must be valid Unicode (no lone UTF-16 surrogate). Kinds: bool;
# text (max a characters, no control characters); ssid (max 32 bytes, no NUL); wpa (secret 8..63 bytes, no control
# characters); secret (max a bytes, anything else: an MQTT password is binary data); ipv4/mask (empty allowed);
# host (hostname or IPv4, empty allowed if a); zone; lang; int (a..b); choice (a = allowed values);
# ratio (1..10000 in steps of 0.1); topic (max a characters, no + or #); ipv4list (at most a unicast IPv4 addresses
# separated by commas, empty allowed).
_IP = (("static_ip", ("bool", 0, 0)), ("ip", ("ipv4", 0, 0)), ("subnet", ("mask", 0, 0)),
       ("gateway", ("ipv4", 0, 0)), ("dns", ("ipv4", 0, 0)))
SCHEMA = {
    "device_name": ("text", 31, 0),
    "ledEnable": ("bool", 0, 0),
    "accessPoint.enable": ("bool", 0, 0),
    "accessPoint.ssid": ("ssid", 0, 0),
    "accessPoint.password_enable": ("bool", 0, 0),
    "accessPoint.password": ("wpa", 0, 0),
    "api_auth_required": ("bool", 0, 0),
    "timezone": ("zone", 0, 0),
    "ntp_server": ("host", False, 0),
    "language.active": ("lang", 0, 0),
    "mqtt.enable": ("bool", 0, 0),
    "mqtt.host": ("host", True, 0),
    "mqtt.port": ("int", 1, 65535),
    "mqtt.use_tls": ("bool", 0, 0),
    "mqtt.user": ("text", 64, 0),
    "mqtt.password": ("secret", 64, 0),
    "mqtt.client_id": ("text", 64, 0),
    "mqtt.topic_prefix": ("topic", 64, 0),
    "mqtt.sendInterval": ("int", 1, 3600),
    "mqtt.discovery_prefix": ("topic", 64, 0),
    "modbus.enable": ("bool", 0, 0),
    "modbus.port": ("int", 1, 65535),
    "modbus.model": ("choice", (203, 213), 0),
    "cloudIotEnabled": ("bool", 0, 0),
    "medianFilterSize": ("choice", (0, 3, 5, 7, 9), 0),
    "ctRatio": ("ratio", 0, 0),
    "autoOta": ("bool", 0, 0),
    "history.flushMinutes": ("int", 1, 1440),
    "ota.url": ("url", True, 0),
    "cloud.host": ("host", True, 0),
    "cloud.port": ("int", 1, 65535),
    "emulation.shelly": ("bool", 0, 0),
    "emulation.shellyUdpPort": ("int", 0, 65535),    # 0: this listener off (each costs one of the 8 sockets)
    "emulation.shellyUdpPort2": ("int", 0, 65535),
    "emulation.sma": ("bool", 0, 0),
    "emulation.smaSerial": ("int", 0, 4294967295),   # 0: derived from the device id
    "emulation.smaSusyId": ("int", 1, 65535),
    "emulation.smaTargets": ("ipv4list", 3, 0),      # unicast receivers besides the multicast group
    "tariff.mode": ("enum", ("off", "fixed", "tou", "dynamic"), 0),
    "tariff.currency": ("currency", 0, 0),
    "tariff.importPrice": ("money", 6, 100000000),    # currency per kWh, six decimals, -100..100
    "tariff.exportPrice": ("money", 6, 100000000),
    "tariff.surcharge": ("money", 6, 100000000),      # dynamic: grid fee, levies, margin per kWh (before VAT)
    "tariff.baseFee": ("money", 2, 1000000),          # per month, -10000..10000
    "tariff.vatPercent": ("money", 2, 10000),         # dynamic: VAT on market price + surcharge, -100..100 %
    "tariff.tou": ("tou", 8, 0),
    "tariff.priceUrl": ("url", True, 0),
}
for _p in ("primary", "secondary"):
    SCHEMA["wifi.%s.ssid" % _p] = ("ssid", 0, 0)
    SCHEMA["wifi.%s.password" % _p] = ("wpa", 0, 0)
    SCHEMA["wifi.%s.enable" % _p] = ("bool", 0, 0)
    for _k, _v in _IP:
        SCHEMA["wifi.%s.%s" % (_p, _k)] = _v


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _money(value, places, limit):
    """(normalised decimal text, None) of an exact decimal given as text or integer (a JSON number reaches here as
    text: routes_settings quotes it before the JSON module sees it), at most places decimals, |value| <= limit."""
    from core.money import decimal_text, parse_decimal

    if _is_int(value):
        value = str(value)
    if not isinstance(value, str):
        return None, "must be a number with at most %d decimals" % places
    n = parse_decimal(value, places)
    if n is None:
        return None, "must be a number with at most %d decimals" % places
    if not -limit <= n <= limit:
        return None, "must be %s to %s" % (decimal_text(-limit, places), decimal_text(limit, places))
    return decimal_text(n, places), None


_WEEKDAYS = (1, 2, 3, 4, 5, 6, 7)


def _hhmm(text, end):
    """Minutes of "HH:MM" (00:00..23:59, and 24:00 as an end), or None."""
    if not isinstance(text, str) or len(text) != 5 or text[2] != ":":
        return None
    hh, mm = text[:2], text[3:]
    for ch in hh + mm:
        if not "0" <= ch <= "9":
            return None
    m = int(hh) * 60 + int(mm)
    if int(mm) > 59 or m > (1440 if end else 1439):
        return None
    return m


def _tou(value, most):
    """Time-of-use windows: a list of at most `most` {"days": [1..7 ISO weekdays], "from": "HH:MM", "to": "HH:MM"
    (24:00 allowed; to before from crosses midnight), "price": import price per kWh}."""
    if not isinstance(value, list):
        return None, "must be a list of windows"
    if len(value) > most:
        return None, "at most %d windows" % most
    out = []
    for i, w in enumerate(value):
        if not isinstance(w, dict):
            return None, "window %d must be an object" % (i + 1)
        for k in w:
            if k not in ("days", "from", "to", "price"):
                return None, "window %d: unknown key %s" % (i + 1, _escaped(str(k)))
        days = w.get("days")
        if not isinstance(days, list) or not days or len(days) > 7:
            return None, "window %d: days must be a list of ISO weekdays 1 (Monday) to 7" % (i + 1)
        for d in days:
            if not _is_int(d) or d not in _WEEKDAYS or days.count(d) > 1:
                return None, "window %d: days must be a list of ISO weekdays 1 (Monday) to 7" % (i + 1)
        start = _hhmm(w.get("from"), False)
        end = _hhmm(w.get("to"), True)
        if start is None or end is None or start == end:
            return None, "window %d: from and to must be HH:MM and differ (to may be 24:00)" % (i + 1)
        price, err = _money(w.get("price"), 6, 100000000)
        if err is not None:
            return None, "window %d: price %s" % (i + 1, err)
        out.append({"days": sorted(days), "from": w["from"], "to": w["to"], "price": price})
    return out, None


def check(key, value, zone_ok):
    """(normalised value, None) when value is valid for key, else (None, reason)."""
    kind, a, b = SCHEMA[key]
    if kind == "bool":
        return (value, None) if isinstance(value, bool) else (None, "must be true or false")
    if kind in ("int", "choice"):
        if not _is_int(value):
            return None, "must be an integer"
        if kind == "int" and not a <= value <= b:
            return None, "must be %d to %d" % (a, b)
        if kind == "choice" and value not in a:
            return None, "must be one of %s" % ", ".join(str(x) for x in a)
        return value, None
    if kind == "enum":
        if not isinstance(value, str) or value not in a:
            return None, "must be one of %s" % ", ".join(a)
        return value, None
    if kind == "money":
        return _money(value, a, b)
    if kind == "tou":
        return _tou(value, a)
    if kind == "currency":
        if not isinstance(value, str) or len(value) != 3 or not ("A" <= value[0] <= "Z" and "A" <= value[1] <= "Z"
                                                                 and "A" <= value[2] <= "Z"):
            return None, "must be an ISO 4217 code of three capital letters (EUR)"
        return value, None
    if kind == "ratio":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None, "must be a number"
        if not 1 <= value <= 10000:
            return None, "must be 1 to 10000"
        tenths = value * 10
        if abs(tenths - round(tenths)) > 1e-6:
            return None, "must be a multiple of 0.1"
        tenths = int(round(tenths))
        return (tenths // 10 if tenths % 10 == 0 else tenths / 10), None
    if not isinstance(value, str):
        if value is None and kind in ("wpa", "secret"):
            return None, None  # null clears a secret
        return None, "must be a string"
    value, err = _unicode(value)
    if err is not None:
        return None, err
    if kind == "text" or kind == "topic":
        if len(value) > a:
            return None, "at most %d characters" % a
        if not _printable(value):
            return None, "control characters are not allowed"
        if kind == "topic" and ("+" in value or "#" in value or value.endswith("/")):
            return None, "must not contain the MQTT wildcards + or # nor end with /"
        return value, None
    if kind == "ssid":
        if len(value.encode()) > 32:
            return None, "at most 32 bytes"
        if "\x00" in value:
            return None, "must not contain NUL (the WiFi driver ends the name there)"
        return value, None  # any other byte is a legal SSID octet
    if kind == "wpa":
        n = len(value.encode())
        if n and not 8 <= n <= 63:
            return None, "must be 8 to 63 bytes (WPA2); empty keeps the stored one, null clears it"
        if not _printable(value):
            return None, "control characters are not allowed in a WPA2 passphrase"
        return value, None
    if kind == "secret":
        if len(value.encode()) > a:
            return None, "at most %d bytes" % a
        return value, None
    if kind in ("ipv4", "mask"):
        if value == "":
            return value, None
        n = _parse_ipv4(value)
        if n is None:
            return None, "must be an IPv4 address like 192.168.1.10 (ASCII digits)"
        if kind == "mask":
            bits = _prefix_len(n)
            if bits < 1:
                return None, "must be a netmask of contiguous ones like 255.255.255.0"
            if bits > 30:
                return None, "/%d leaves no room for a host and a gateway: at most 255.255.255.252 (/30)" % bits
            return value, None
        reason = _host_reason(n)
        if reason is not None:
            return None, "%s %s" % (value, reason)
        return value, None
    if kind == "ipv4list":
        parts = [p.strip() for p in value.split(",")] if value.strip() else []
        if len(parts) > a:
            return None, "at most %d addresses" % a
        for part in parts:
            n = _parse_ipv4(part)
            if n is None:
                return None, "must be IPv4 addresses like 192.168.1.10, separated by commas"
            reason = _host_reason(n) if n >> 24 != 127 else None   # loopback stays: a receiver on the host runtime
            if reason is not None:
                return None, "%s %s" % (part, reason)
        return ",".join(parts), None
    if kind == "host":
        if value == "":
            return (value, None) if a else (None, "must not be empty")
        if not _is_hostname(value):
            return None, "must be a host name or IPv4 address"
        numeric = True  # a top-level domain is never all digits: this is meant as an IPv4 address
        for ch in value[value.rfind(".") + 1:]:
            if not "0" <= ch <= "9":
                numeric = False
        if numeric:
            n = _parse_ipv4(value)
            if n is None:
                return None, "must be a host name or IPv4 address"
            first = n >> 24
            if first == 0 or first >= 224:  # loopback stays: a broker on the same host (host runtime)
                return None, "%s %s" % (value, _host_reason(n))
        return value, None
    if kind == "zone":
        if not value or len(value) > 64 or not _ascii_printable(value) or not zone_ok(value):
            return None, "unknown time zone (see /api/v1/system/timezones)"
        return value, None
    if kind == "url":  # http(s) URL (core/url.py); empty allowed if a
        if value == "":
            return (value, None) if a else (None, "must not be empty")
        try:
            split_url(value)
        except ValueError as exc:
            return None, "must be an http:// or https:// URL: %s" % exc
        return value, None
    if kind == "lang":
        for code, _name in LANGUAGES:
            if value == code:
                return value, None
        return None, "must be de or en"
    return None, "unknown key"


def _groups():
    out = set()
    for key in SCHEMA:
        parts = key.split(".")
        for i in range(1, len(parts)):
            out.add(".".join(parts[:i]))
    return out


_GROUPS = _groups()


# Keys that decide which features hold sockets all the time (core/sockbudget.py standing()).
_SOCKET_KEYS = ("mqtt.enable", "modbus.enable", "emulation.shelly", "emulation.shellyUdpPort",
                "emulation.shellyUdpPort2", "emulation.sma", "accessPoint.enable")


def _address_errors(doc, base, errors):
    """Add to errors what makes the static addressing of one WiFi profile (base "wifi.primary.") unusable.

    Runs only when static_ip is true in doc, and compares only keys that are valid on their own (not in errors).
    """
    if not _get(doc, base + "static_ip"):
        return
    vals = {}
    for leaf in ("ip", "subnet", "gateway", "dns"):
        key = base + leaf
        if key in errors:
            continue
        text = _get(doc, key) or ""
        if text:
            vals[leaf] = _parse_ipv4(text)
        elif leaf != "dns":  # an empty dns means: the gateway answers DNS
            errors[key] = "required when static_ip is true"
    ip = vals.get("ip")
    mask = vals.get("subnet")
    if ip is None or mask is None:
        return
    net = ip & mask
    last = net | ((~mask) & 0xFFFFFFFF)
    subnet = "%s/%d" % (_dotted(net), _prefix_len(mask))
    for leaf in ("ip", "gateway", "dns"):
        n = vals.get(leaf)
        if n is None:
            continue
        what = "%s %s" % (leaf, _dotted(n))
        if leaf != "ip" and n == ip:
            errors[base + leaf] = "%s is the device's own address (ip)" % what
        elif n & mask != net:
            if leaf == "gateway":
                errors[base + leaf] = "%s is outside the subnet %s" % (what, subnet)
        elif n == net:
            errors[base + leaf] = "%s is the network address of the subnet %s" % (what, subnet)
        elif n == last:
            errors[base + leaf] = "%s is the broadcast address of the subnet %s" % (what, subnet)


def load_into(doc, data):
    """Overlay a stored document (data) onto doc (the defaults); the number of stored keys that failed their check.

    The stored file passes the same checks as an update (a value written by an older firmware, such as a lone
    surrogate, must not reach a service that would then fail at every restart); a static addressing that does not
    hold together falls back to DHCP (static_ip false)."""
    errors_n = 0
    for key in SCHEMA:
        value = _get(data, key)
        if value is None:
            continue
        norm, err = check(key, value, lambda z: True)  # a zone stored earlier stays (the table may change)
        if err is None and norm is not None:
            _set(doc, key, norm)
        else:
            errors_n += 1
    for p in ("primary", "secondary"):
        errors = {}
        _address_errors(doc, "wifi.%s." % p, errors)
        if errors:  # stored by an older firmware: DHCP keeps the device reachable, unusable addresses do not
            _set(doc, "wifi.%s.static_ip" % p, False)
            errors_n += 1
    return errors_n


def _flatten(tree, prefix, flat, errors):
    for key, value in tree.items():
        path = prefix + key
        if _unicode(key)[1] is not None:  # named in fields as text: a surrogate would make the answer bad UTF-8
            errors[_escaped(path)] = "unknown key (not valid Unicode)"
            continue
        if not key or path in flat:
            errors[path or "(empty)"] = "unknown key" if not key else "given twice"
            continue
        if "." in key and prefix:
            # Two spellings, never mixed: nested objects as GET answers, or dotted keys at the top level.
            # {"wifi": {"primary.ssid": ...}} is neither (a restore filter looking for objects misses it).
            errors[path] = "dotted key %s inside an object: nest it, or give the whole dotted key at the top " \
                           "level" % _escaped(key)
            continue
        if path in _GROUPS:
            if isinstance(value, dict):
                _flatten(value, path + ".", flat, errors)
            else:
                errors[path] = "must be an object"
            continue
        flat[path] = value


def keys_of(patch):
    """(dotted keys a patch names, errors of its shape): how it would be read, whatever its spelling."""
    flat, errors = {}, {}
    if isinstance(patch, dict):
        _flatten(patch, "", flat, errors)
    return sorted(flat), errors


def _read_only(settings, key, value):
    """None when key is a read-only key of the GET document posted back unchanged, else a reason."""
    if key == "language.installed":
        return None if value == settings.public()["language"]["installed"] else "read-only"
    if key.endswith(".password_set") and key[:-4] in SECRETS:
        return None if value == bool(settings.get(key[:-4])) else "read-only"
    return "unknown key"


def prepare(settings, patch):
    """(new document, changed dotted keys, errors) for a partial update of settings (core.settings.Settings); it is
    not touched."""
    errors = {}
    if not isinstance(patch, dict):
        return None, [], {"(body)": "must be a JSON object"}
    flat = {}
    _flatten(patch, "", flat, errors)
    doc = _copy(settings.doc)
    changed = []
    for key, value in flat.items():
        if key not in SCHEMA:
            reason = _read_only(settings, key, value)
            if reason is not None:
                errors[key] = reason
            continue
        norm, err = check(key, value, settings.zone_ok)
        if err is not None:
            errors[key] = err
            continue
        kind = SCHEMA[key][0]
        if kind in ("wpa", "secret"):
            if value == "":
                continue  # empty keeps the stored secret
            norm = "" if value is None else norm
        if _get(doc, key) != norm:
            _set(doc, key, norm)
            changed.append(key)
    for secret, dest in SECRET_DESTINATIONS:
        if dest in changed and not flat.get(secret) and _get(doc, secret):
            _set(doc, secret, "")   # a new destination and the secret not given again: dropped, never sent on
            changed.append(secret)
    _cross_checks(doc, flat, errors)
    changed.sort()   # the patch's key order is the dict's, which CircuitPython does not keep: answers and logs
    return doc, changed, errors


def _cross_checks(doc, flat, errors):
    """Rules between keys, checked on the resulting document for the groups the request touched."""
    for p in ("primary", "secondary"):
        base = "wifi.%s." % p
        for key in flat:
            if key.startswith(base):
                _address_errors(doc, base, errors)
                break
    if ("mqtt.enable" in flat or "mqtt.host" in flat) and _get(doc, "mqtt.enable") and not _get(doc, "mqtt.host"):
        if "mqtt.host" not in errors:
            errors["mqtt.host"] = "required when mqtt.enable is true"
    for key in _SOCKET_KEYS:
        if key in flat:
            # Checked only when the request touches a feature that holds sockets: a stored document of an
            # older firmware that does not fit still takes other changes (the run-time budget protects HTTP).
            found = _socket_problem(lambda k, d=None: _get(doc, k), flat)
            if found is not None and found[0] not in errors:
                errors[found[0]] = found[1]
            break
