"""Outputs whose order a person or a text comparison sees never follow a dict's order: CircuitPython's dicts keep no
insertion order. Each builder gets dicts that iterate in a scrambled order and must produce the same text."""

import json

import pytest

from core.settings import Settings
from meter.reading import Reading
from services.history.routes import latest_body
from services.modbus.sunspec_map import SunSpecMap, registers_json
from services.mqtt.ha_discovery import state_json
from services.system.routes import _section, info_json


class ScrambledDict(dict):
    """A dict that iterates its keys in reverse order of insertion, as a stand-in for CircuitPython's."""

    def __iter__(self):
        return iter(list(dict.keys(self))[::-1])

    def keys(self):
        return list(self)

    def items(self):
        return [(k, self[k]) for k in self]

    def values(self):
        return [self[k] for k in self]


VALUES = {"1.8.0": (123456789, -1), "2.8.0": (4321000, -1), "16.7.0": (-1234, 0), "36.7.0": (-500, 0),
          "32.7.0": (2301, -1), "14.7.0": (4998, -2)}


def test_the_scrambled_dict_really_scrambles():
    d = ScrambledDict(a=1, b=2, c=3)
    assert list(d) == ["c", "b", "a"] and list(d.items())[0] == ("c", 3)


class _Clock:
    synced = True

    def time(self):
        return 1_790_000_000

    def local(self, ts):
        return ts + 3600


@pytest.mark.parametrize("lang", ["de", "en"])
def test_history_latest_keeps_the_obis_table_order(lang):
    plain = latest_body(Reading(0, dict(VALUES)), _Clock(), lang, 0)
    scrambled = latest_body(Reading(0, ScrambledDict(VALUES)), _Clock(), lang, 0)
    assert plain == scrambled
    assert list(json.loads(plain))[:5] == ["timestamp", "datetime", "1.8.0", "2.8.0", "16.7.0"]


def test_settings_changes_are_listed_in_a_fixed_order():
    patch = {"ledEnable": False, "device_name": "Keller", "mqtt": {"enable": True, "host": "broker.lan"},
             "language": {"active": "en"}}
    s1 = Settings(None, zone_ok=lambda z: True)
    s2 = Settings(None, zone_ok=lambda z: True)
    scrambled = ScrambledDict(patch)
    scrambled["mqtt"] = ScrambledDict(patch["mqtt"])
    _doc1, changed1, err1 = s1.prepare(patch)
    _doc2, changed2, err2 = s2.prepare(scrambled)
    assert err1 == err2 == {} and changed1 == changed2 == sorted(changed1)


def test_system_info_sections_and_entries_keep_their_order():
    describe = {"state": "OK", "telegrams_ok": 5, "crc_errors": 0, "protocol": "sml"}
    text1 = info_json([("meter", _section(describe)), ("clock", _section({"synced": True}))])
    text2 = info_json([("meter", _section(ScrambledDict(describe))), ("clock", _section({"synced": True}))])
    assert text1 == text2
    doc = json.loads(text1)
    assert list(doc) == ["meter", "clock"] and list(doc["meter"][0]) == ["name", "value", "unit"]


def test_modbus_status_rows_and_mqtt_state_do_not_follow_the_readings_dict():
    m1, m2 = SunSpecMap(203), SunSpecMap(203)
    m1.update(Reading(1, dict(VALUES)))
    m2.update(Reading(1, ScrambledDict(VALUES)))
    assert registers_json(m1.registers()) == registers_json(m2.registers())
    codes = ["1.8.0", "2.8.0", "16.7.0"]
    assert state_json(dict(VALUES), codes) == state_json(ScrambledDict(VALUES), codes)
