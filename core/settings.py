"""The device settings document: defaults, schema validation, all-or-nothing updates, secrets (stored by json_store)."""

import json

from core.durable_file import stored
from core.json_store import read_json_file, write_atomic

# Defaults of the spec's settings table (device-api.md); the wire names follow aio-wattwaechter where the spec
# shows none. Encodings the spec leaves open: language.active "de"/"en", medianFilterSize 0 = Off.
DEFAULTS = {
    "device_name": "Meter Plus",
    "ledEnable": True,
    "wifi": {
        "primary": {"ssid": "", "password": "", "enable": True, "static_ip": False,
                    "ip": "", "subnet": "", "gateway": "", "dns": ""},
        "secondary": {"ssid": "", "password": "", "enable": False, "static_ip": False,
                      "ip": "", "subnet": "", "gateway": "", "dns": ""},
    },
    "accessPoint": {"enable": False, "ssid": "", "password_enable": False, "password": ""},
    "api_auth_required": False,
    "timezone": "Europe/Berlin",
    "ntp_server": "pool.ntp.org",
    "language": {"active": "de"},
    "mqtt": {"enable": False, "host": "", "port": 1883, "use_tls": False, "user": "", "password": "",
             "client_id": "", "topic_prefix": "", "sendInterval": 10, "discovery_prefix": "homeassistant"},
    "modbus": {"enable": False, "port": 502, "model": 203},
    "cloudIotEnabled": False,
    "medianFilterSize": 5,
    "ctRatio": 1,
    "autoOta": True,
    "history": {"flushMinutes": 60},
    # docs/ota.md: a reserved name that never resolves until the owner or vendor sets a real update server
    "ota": {"url": "http://updates.meter-plus.invalid/ota/stable/manifest.json"},
    # docs/cloud.md: the cloud endpoint (TLS); a placeholder until the vendor's service exists
    "cloud": {"host": "cloud.meter-plus.invalid", "port": 8883},
    # docs/emulation.md: the device as a Shelly Pro 3EM and an SMA Energy Meter for batteries; off by default
    "emulation": {"shelly": False, "shellyUdpPort": 1010, "shellyUdpPort2": 2220,
                  "sma": False, "smaSerial": 0, "smaSusyId": 349, "smaTargets": ""},
    # docs/tariff.md: what energy costs; off by default. Money is kept as exact decimal text (never a float) and
    # shown as JSON numbers (tariff_json); prices per kWh, baseFee per month, vatPercent on dynamic prices.
    "tariff": {"mode": "off", "currency": "EUR", "importPrice": "0", "exportPrice": "0", "baseFee": "0",
               "tou": [], "priceUrl": "https://api.energy-charts.info/price?bzn=DE-LU&start={start}&end={end}",
               "surcharge": "0", "vatPercent": "19"},
}

LANGUAGES = (("de", "Deutsch"), ("en", "English"))
SECRETS = ("wifi.primary.password", "wifi.secondary.password", "accessPoint.password", "mqtt.password")
# Where a stored secret goes: changing the destination drops the secret unless the same request gives it again, so a
# crafted backup or a slip never sends the owner's broker password to another broker. The cloud pairing (cloud.json,
# not a setting) follows cloud.host the same way (services/api/routes_settings.py); the OTA server and the access
# point get no secret. Not the WiFi passphrase: WPA2 never sends it, a backup cannot change the WiFi (restore
# refuses those keys) and the page reuses it for a renamed network only after asking (tests/test_web_ui.py).
SECRET_DESTINATIONS = (("mqtt.password", "mqtt.host"),)
# Slots of the stored document (core/durable_file.py): the largest one the rules let through is ~8.2 KB of JSON
# (tests/test_json_store_power_cut.py), so its slots are made once and a save only ever rewrites one in place.
STORE_ROOM = 12288
# Keys that take effect only at the next restart (the radio is configured at boot); everything else applies at once.
RESTART_PREFIXES = ("wifi.", "accessPoint.")

# The rules (the schema, each value's check, the rules between keys) live in core/settings_check.py, imported for a
# job and let go after it (_checks): a save or two a day, and the load at start.
CHECKS = "core.settings_check"


def _checks():
    """(core.settings_check, whether it was imported already): the caller lets it go after its job if it was not."""
    import sys

    was = CHECKS in sys.modules
    from core import settings_check

    return settings_check, was


def _release(was):
    """Let the checks go after a job that imported them (the next collection frees their code; none is made here:
    the caller's answer or the next import makes one)."""
    if not was:
        from core.modules import unload

        unload(CHECKS, collect=False)


def check(key, value, zone_ok):
    """(normalised value, None) when value is valid for key, else (None, reason): core.settings_check.check for one
    value, its module loaded for the call."""
    sc, was = _checks()
    try:
        return sc.check(key, value, zone_ok)
    finally:
        _release(was)


def _copy(tree):
    return json.loads(json.dumps(tree))


def _get(tree, dotted):
    node = tree
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _set(tree, dotted, value):
    parts = dotted.split(".")
    node = tree
    for part in parts[:-1]:
        nxt = node.get(part)
        if not isinstance(nxt, dict):
            nxt = {}
            node[part] = nxt
        node = nxt
    node[parts[-1]] = value


class SettingsError(Exception):
    """A rejected update: fields maps each offending dotted key to its reason; nothing was changed."""

    def __init__(self, fields):
        super().__init__("Invalid settings")
        self.fields = fields


def _zone_from_table(name):
    from core import tz  # imported only when a zone is validated

    for zone, _off in tz.list_zones(0):
        if zone == name:
            return True
    return False


class Settings:
    """Settings document in RAM backed by path (JSON on the flash); zone_ok(name) validates time zones."""

    def __init__(self, path=None, zone_ok=None):
        self.path = path
        self.doc = _copy(DEFAULTS)
        self.zone_ok = zone_ok or _zone_from_table
        self.load_errors = 0
        self.writes = 0
        if path:
            self.load()  # read at construction: every service built after this sees the stored values

    def get(self, dotted, default=None):
        """Value at a dotted path such as "mqtt.host", or default."""
        node = self.doc
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        return node

    def exists(self):
        """True when a stored document was found by load()."""
        return self._found

    _found = False
    damaged = False   # a stored file was there but held no settings document (the defaults are in use)

    def load(self):
        """Defaults overlaid with the stored document; invalid stored keys keep their default and are counted
        (core.settings_check.load_into: the same checks as an update)."""
        self.doc = _copy(DEFAULTS)
        data = read_json_file(self.path) if self.path else None
        self._found = data is not None
        if not isinstance(data, dict):
            if data is not None or stored(self.path):   # stored but none parsed: damaged
                self.load_errors += 1   # zeroed, truncated, `null`, not an object: counted, never silent
                self.damaged = True
            return
        sc, was = _checks()
        try:
            self.load_errors += sc.load_into(self.doc, data)
        finally:
            _release(was)

    def public(self):
        """The GET document: secrets replaced by a password_set flag, installed languages listed."""
        out = _copy(self.doc)
        for key in SECRETS:
            dot = key.rfind(".")
            node = _get(out, key[:dot])
            leaf = key[dot + 1:]
            node["password_set"] = bool(node.pop(leaf, ""))
        out["language"]["installed"] = [{"code": c, "name": n} for c, n in LANGUAGES]
        return out

    def keys_of(self, patch):
        """(dotted keys a patch names, errors of its shape): how it would be read, whatever its spelling."""
        sc, was = _checks()
        try:
            return sc.keys_of(patch)
        finally:
            _release(was)

    def prepare(self, patch):
        """(new document, changed dotted keys, errors) for a partial update; self is not touched (the checks are
        core.settings_check's, loaded for the call)."""
        sc, was = _checks()
        try:
            return sc.prepare(self, patch)
        finally:
            _release(was)

    def commit(self, doc):
        """Persist doc atomically, then make it the live document."""
        if self.path:
            write_atomic(self.path, doc, STORE_ROOM)
            self.writes += 1
        self.doc = doc

    def update(self, patch):
        """Validate and apply a partial update all-or-nothing; return the changed keys or raise SettingsError."""
        doc, changed, errors = self.prepare(patch)
        if errors:
            raise SettingsError(errors)
        if changed:
            self.commit(doc)
        return changed


def restart_needed(key):
    """True for keys that take effect at the next restart."""
    for prefix in RESTART_PREFIXES:
        if key.startswith(prefix):
            return True
    return False
