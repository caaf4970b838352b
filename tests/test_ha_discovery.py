"""HA discovery payloads from the OBIS table: keys, classes and units as Home Assistant's MQTT sensor discovery
documents them, stable ids, language, exact values; the same module inside MicroPython."""

import json

import pytest

from meter import obis
from services.mqtt import ha_discovery as ha
from tools.mpvm import MicroVM

DEV = "024d50000001"
PREFIX = "meterplus/" + DEV

# Home Assistant's MQTT sensor options (full names) and the device/origin/availability maps we may use.
SENSOR_KEYS = {"availability", "availability_mode", "availability_template", "availability_topic", "device",
               "device_class", "enabled_by_default", "encoding", "entity_category", "expire_after", "force_update",
               "icon", "json_attributes_template", "json_attributes_topic", "last_reset_value_template", "name",
               "object_id", "default_entity_id", "origin", "payload_available", "payload_not_available",
               "platform", "qos", "state_class", "state_topic", "suggested_display_precision", "unique_id",
               "unit_of_measurement", "value_template"}
DEVICE_KEYS = {"configuration_url", "connections", "hw_version", "identifiers", "manufacturer", "model",
               "model_id", "name", "serial_number", "suggested_area", "sw_version", "via_device"}
ORIGIN_KEYS = {"name", "sw_version", "support_url"}
# Units HA accepts per sensor device class, and the state classes it allows with them.
UNITS = {"energy": {"Wh", "kWh", "MWh", "GWh", "J", "kJ", "MJ", "GJ"}, "power": {"mW", "W", "kW", "MW", "GW"},
         "voltage": {"mV", "V", "kV"}, "current": {"mA", "A"}, "frequency": {"Hz", "kHz", "MHz", "GHz"}}
STATE_CLASSES = {"energy": {"total", "total_increasing"}, "power": {"measurement"}, "voltage": {"measurement"},
                 "current": {"measurement"}, "frequency": {"measurement"}}


def payload(code, lang="de"):
    text = ha.config_payload(code, DEV, PREFIX, lang, "Keller \"Zähler\"", "1.2.3", "http://10.0.0.5/")
    return json.loads(text)


@pytest.mark.parametrize("code", obis.CODES)
def test_every_table_code_gives_a_valid_ha_sensor_config(code):
    cfg = payload(code)
    assert set(cfg) <= SENSOR_KEYS
    assert set(cfg["device"]) <= DEVICE_KEYS and set(cfg["origin"]) <= ORIGIN_KEYS
    dc = cfg["device_class"]
    assert cfg["unit_of_measurement"] in UNITS[dc]
    assert cfg["state_class"] in STATE_CLASSES[dc]
    assert cfg["state_topic"] == PREFIX + "/" + obis.lookup(code)["key"]
    assert cfg["availability_mode"] == "all"
    assert [a["topic"] for a in cfg["availability"]] == [PREFIX + "/status", PREFIX + "/meter"]
    dev = cfg["device"]
    assert dev["identifiers"] == ["meterplus_" + DEV] and dev["name"] == "Keller \"Zähler\""
    assert dev["sw_version"] == "1.2.3" and dev["configuration_url"] == "http://10.0.0.5/"
    assert dev["manufacturer"] and dev["model"]
    assert ha.config_topic("homeassistant", DEV, code) == "homeassistant/sensor/wattwaechter_%s/%s/config" % (
        DEV, obis.lookup(code)["key"])


def test_the_issue_sensors():
    imp, exp, pw = payload("1.8.0"), payload("2.8.0"), payload("16.7.0")
    assert (imp["device_class"], imp["state_class"], imp["unit_of_measurement"]) == ("energy", "total_increasing",
                                                                                     "kWh")
    assert (exp["device_class"], exp["state_class"], exp["unit_of_measurement"]) == ("energy", "total_increasing",
                                                                                     "kWh")
    assert (pw["device_class"], pw["state_class"], pw["unit_of_measurement"]) == ("power", "measurement", "W")
    assert payload("32.7.0")["unit_of_measurement"] == "V" and payload("31.7.0")["unit_of_measurement"] == "A"


def test_names_follow_the_language_ids_do_not():
    de, en = payload("1.8.0", "de"), payload("1.8.0", "en")
    assert de["name"] == "Bezug gesamt" and en["name"] == "Import total"
    assert de["unique_id"] == en["unique_id"] == "wattwaechter_%s_import_total" % DEV
    ids = [payload(c)["unique_id"] for c in obis.CODES]
    assert len(set(ids)) == len(ids)


def test_unknown_code_has_no_config_and_no_url_is_left_out():
    assert ha.config_payload("99.9.9", DEV, PREFIX, "de", "x", "1", None) is None
    cfg = json.loads(ha.config_payload("1.8.0", DEV, PREFIX, "de", "x", "1", None))
    assert "configuration_url" not in cfg["device"]


def test_values_are_exact_in_edge_units():
    assert ha.value_text("1.8.0", 123456789, -1) == "12345.6789"      # Wh -> kWh by exponent shift
    assert ha.value_text("1.8.0", 99999999999999999, 0) == "99999999999999.999"
    assert ha.value_text("16.7.0", -2345, -1) == "-234.5"
    assert ha.value_text("32.7.0", 2301, -1) == "230.1"
    text = ha.state_json({"1.8.0": (1, 0), "16.7.0": (5, 2), "2.8.0": (7, 0)}, ["1.8.0", "16.7.0"])
    assert text == '{"import_total":0.001,"power":500}'
    assert json.loads(ha.state_json({}, ["1.8.0"])) == {}


def test_defaults_from_the_device_id():
    assert ha.default_client_id(DEV) == "meterplus-" + DEV and len(ha.default_client_id(DEV)) <= 23
    assert ha.default_prefix(DEV) == PREFIX


def test_same_payloads_inside_micropython():
    codes = list(obis.CODES)
    with MicroVM(packages=("core", "meter", "services")) as vm:
        out, _fuel = vm.run("""
from services.mqtt import ha_discovery as ha
from meter import obis
for code in obis.CODES:
    print("@@", ha.config_topic("homeassistant", "%s", code), ha.config_payload(code, "%s", "%s", "en", "M", "1",
          "http://x/"))
print("@@S", ha.state_json({"1.8.0": (123456789, -1), "16.7.0": (-2345, -1)}, ["1.8.0", "16.7.0"]))
""" % (DEV, DEV, PREFIX))
        fuel, heap = vm.measure("from services.mqtt import ha_discovery as ha",
                                'ha.config_payload("1.8.0", "%s", "%s", "de", "M", "1", "http://x/")' % (DEV, PREFIX))
    lines = [line for line in out.splitlines() if line.startswith("@@ ")]
    assert len(lines) == len(codes)
    for code, line in zip(codes, lines):
        topic, text = line[3:].split(" ", 1)
        assert topic == ha.config_topic("homeassistant", DEV, code)
        assert json.loads(text) == json.loads(ha.config_payload(code, DEV, PREFIX, "en", "M", "1", "http://x/"))
    state = [line for line in out.splitlines() if line.startswith("@@S")][0][4:]
    assert state == '{"import_total":12345.6789,"power":-234.5}'
    assert fuel > 0 and heap > 0
    print("one discovery payload in MicroPython: fuel %d, heap %d bytes" % (fuel, heap))
