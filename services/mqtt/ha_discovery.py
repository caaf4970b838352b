"""Home Assistant MQTT discovery and telemetry payloads, built from the OBIS table (pure, no sockets)."""

import json

from meter import obis
from meter.decimal import to_str

MANUFACTURER = "Meter Plus"
MODEL = "Meter Plus IR reader (ESP32-S3)"
ORIGIN = "Meter Plus firmware"
ONLINE = "online"
OFFLINE = "offline"


def node_id(device_id):
    """The Home Assistant device identifier: stable per device (kept through the unique_id change of issue 30, so
    the device, its area and its name stay)."""
    return "meterplus_" + device_id


def entity_node(device_id):
    """The discovery topics' node id and the sensors' unique_id prefix: wattwaechter_<device id>.

    The WattWächter integration recognises entities of its device by a unique_id starting with
    wattwaechter_<id>_ or WWP-<id>_ and then does not add the device a second time. We take wattwaechter_: it is
    the integration's own domain, lower case like every other id here, and does not pose as a WattWächter Plus
    serial (WWP- is that hardware's device-id prefix)."""
    return "wattwaechter_" + device_id


def default_client_id(device_id):
    """MQTT client id used when the setting is empty (23 bytes at most, as MQTT 3.1.1 servers must accept)."""
    return "meterplus-" + device_id


def default_prefix(device_id):
    """Topic prefix used when the setting is empty."""
    return "meterplus/" + device_id


def unique_id(device_id, code):
    """Stable unique_id of a sensor: wattwaechter_<id>_ and the OBIS key, never the language-dependent name."""
    return "%s_%s" % (entity_node(device_id), key(code))


def old_unique_id(device_id, code):
    """The unique_id before issue 30 (meterplus_<id>_<key>): its discovery configs are removed once (migration)."""
    return "%s_%s" % (node_id(device_id), key(code))


def key(code):
    """The topic leaf and JSON key of a short OBIS code ("1.8.0" -> "import_total")."""
    i = obis.slot(code)
    return obis.ROWS[i][1] if i >= 0 else code.replace(".", "_")


def code_of_key(k):
    """The short OBIS code of a topic leaf / JSON key, or None."""
    for row in obis.ROWS:
        if row[1] == k:
            return row[0]
    return None


def value_topic(prefix, code):
    """Per-value topic, e.g. meterplus/<id>/import_total."""
    return "%s/%s" % (prefix, key(code))


def state_topic(prefix):
    """Topic of the one JSON state message."""
    return prefix + "/state"


def status_topic(prefix):
    """Device availability (online/offline, the retained last will)."""
    return prefix + "/status"


def meter_topic(prefix):
    """Meter availability: offline while the meter is stale, so HA shows the sensors unavailable."""
    return prefix + "/meter"


def config_topic(discovery_prefix, device_id, code):
    """<discovery_prefix>/sensor/wattwaechter_<id>/<key>/config."""
    return "%s/sensor/%s/%s/config" % (discovery_prefix, entity_node(device_id), key(code))


def old_config_filter(discovery_prefix, device_id):
    """The retained discovery configs of the old unique_ids (<discovery_prefix>/sensor/meterplus_<id>/+/config):
    read back at connect; each one found is emptied, which makes Home Assistant remove that entity before the
    new one (same device, same name, so the same entity_id and its history) is announced."""
    return "%s/sensor/%s/+/config" % (discovery_prefix, node_id(device_id))


def is_old_config(topic, discovery_prefix, device_id):
    """Whether topic is one of the old discovery config topics (old_config_filter)."""
    head = "%s/sensor/%s/" % (discovery_prefix, node_id(device_id))
    return topic.startswith(head) and topic.endswith("/config") and "/" not in topic[len(head):-7]


def birth_topic(discovery_prefix):
    """Home Assistant announces itself here with "online" after it (re)starts."""
    return discovery_prefix + "/status"


def value_text(code, m, e):
    """Exact decimal text of a value in its edge unit: energy Wh -> kWh by an exponent shift, others as is."""
    if obis.kind(code) == "energy":
        e -= 3
    return to_str(m, e)


def config_payload(code, device_id, prefix, lang, device_name, sw_version, web_url):
    """JSON discovery config of one sensor; None for codes outside the OBIS table (no class or unit known)."""
    meta = obis.lookup(code)
    if meta is None:
        return None
    dev = {
        "identifiers": [node_id(device_id)],
        "name": device_name,
        "manufacturer": MANUFACTURER,
        "model": MODEL,
        "sw_version": sw_version,
    }
    if web_url:
        dev["configuration_url"] = web_url
    cfg = {
        "name": meta["label_de"] if lang == "de" else meta["label_en"],
        "unique_id": unique_id(device_id, code),
        "state_topic": value_topic(prefix, code),
        "availability": [{"topic": status_topic(prefix)}, {"topic": meter_topic(prefix)}],
        "availability_mode": "all",
        "device_class": meta["ha_device_class"],
        "state_class": meta["ha_state_class"],
        "unit_of_measurement": meta["unit"],
        "device": dev,
        "origin": {"name": ORIGIN, "sw_version": sw_version},
    }
    return json.dumps(cfg)


def state_json(values, codes, ts=None):
    """One JSON object with the given codes' values as exact JSON numbers in edge units, keyed by OBIS key; ts,
    when the clock knows it, the reading's UTC seconds as "timestamp" (first)."""
    parts = [] if ts is None else ['"timestamp":%d' % ts]
    for code in codes:
        mv = values.get(code)
        if mv is not None:
            parts.append('"%s":%s' % (key(code), value_text(code, mv[0], mv[1])))
    return "{" + ",".join(parts) + "}"


# Money entities (issue 29): (key, name de, name en, unit ("$" = the currency), device_class, state_class). The
# price is what Home Assistant's Energy dashboard takes as "an entity with the current price" (currency/kWh).
MONEY = (
    ("price", "Strompreis", "Energy price", "$/kWh", None, "measurement"),
    ("cost_today", "Stromkosten heute", "Energy cost today", "$", "monetary", "total"),
    ("cost_month", "Stromkosten Monat", "Energy cost this month", "$", "monetary", "total"),
    ("peak_month", "Leistungsspitze Monat", "Power peak this month", "W", "power", "measurement"),
)


def money_topic(prefix, k):
    """Topic of a money entity, e.g. meterplus/<id>/cost_today."""
    return "%s/%s" % (prefix, k)


def money_config_topic(discovery_prefix, device_id, k):
    return "%s/sensor/%s/%s/config" % (discovery_prefix, entity_node(device_id), k)


def money_config_payload(row, device_id, prefix, lang, device_name, sw_version, web_url, currency):
    """JSON discovery config of one money entity (unique_id wattwaechter_<id>_<key>); available with the device
    (status topic), not with the meter: a booked cost stays true while the meter is silent."""
    k, de, en, unit, dclass, sclass = row
    dev = {"identifiers": [node_id(device_id)], "name": device_name, "manufacturer": MANUFACTURER, "model": MODEL,
           "sw_version": sw_version}
    if web_url:
        dev["configuration_url"] = web_url
    cfg = {"name": de if lang == "de" else en, "unique_id": "%s_%s" % (entity_node(device_id), k),
           "state_topic": money_topic(prefix, k), "availability": [{"topic": status_topic(prefix)}],
           "state_class": sclass, "unit_of_measurement": unit.replace("$", currency), "device": dev,
           "origin": {"name": ORIGIN, "sw_version": sw_version}}
    if dclass is not None:
        cfg["device_class"] = dclass
    if k == "price":
        cfg["suggested_display_precision"] = 4
    return json.dumps(cfg)
