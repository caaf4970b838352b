"""Issue 30: MQTT unique_ids the WattWächter integration recognises (wattwaechter_<id>_<key>), and the old ids'
discovery configs emptied once at the broker so Home Assistant removes those entities before the new ones come
(same device identifier, same names: the same entity_ids, so the history goes on)."""

import json

import pytest

from meter import obis
from services.mqtt import client as m_client
from services.mqtt import ha_discovery as ha
from tests.mqtt_peers import Broker, Subscriber
from tests.test_mqtt_broker import DEV, Device

pytestmark = pytest.mark.slow


def integration_owns(unique_id, device_id):
    """The WattWächter integration's check for MQTT entities of its own device (issue 30): a unique_id starting
    with wattwaechter_<id>_ or WWP-<id>_ is that device already, not a second one."""
    return unique_id.startswith("wattwaechter_%s_" % device_id) or unique_id.startswith("WWP-%s_" % device_id)


def test_every_sensor_id_is_one_the_integration_recognises():
    for code in obis.CODES:
        uid = ha.unique_id(DEV, code)
        assert integration_owns(uid, DEV), uid
        assert not integration_owns(ha.old_unique_id(DEV, code), DEV)       # what it saw before: a second device
        cfg = json.loads(ha.config_payload(code, DEV, "meterplus/" + DEV, "de", "Meter Plus", "1", None))
        assert cfg["unique_id"] == uid and cfg["device"]["identifiers"] == ["meterplus_" + DEV]   # device kept


def test_old_config_topics_are_recognised_and_nothing_else():
    assert ha.is_old_config("homeassistant/sensor/meterplus_%s/power/config" % DEV, "homeassistant", DEV)
    assert not ha.is_old_config("homeassistant/sensor/wattwaechter_%s/power/config" % DEV, "homeassistant", DEV)
    assert not ha.is_old_config("homeassistant/sensor/meterplus_%s/a/b/config" % DEV, "homeassistant", DEV)
    assert not ha.is_old_config("homeassistant/sensor/meterplus_other/power/config", "homeassistant", DEV)


@pytest.fixture
def broker(tmp_path):
    b = Broker(str(tmp_path / "broker")).start()
    yield b
    b.stop()


def test_an_upgrade_empties_the_old_configs_once_before_announcing_the_new_ones(broker, tmp_path):
    old_topics = ["homeassistant/sensor/meterplus_%s/%s/config" % (DEV, k) for k in ("import_total", "power")]
    seed = Subscriber(broker.port, topics=("x/none",), client_id="seed")
    for t in old_topics:      # what the firmware before issue 30 left retained at the broker
        seed.publish(t, json.dumps({"unique_id": "meterplus_%s_x" % DEV}), retain=True)
    seed.close()
    ha_side = Subscriber(broker.port, topics=("homeassistant/sensor/#",), client_id="ha")
    ha_side.wait_for(lambda t, p: t == old_topics[-1])
    dev = Device(tmp_path, port=broker.port, sendInterval=1)
    try:
        dev.reading({"1.8.0": (123456789, -1), "16.7.0": (-2345, -1)})
        dev.run(until=dev.connected)
        new = "homeassistant/sensor/wattwaechter_%s/import_total/config" % DEV
        ha_side.wait_for(lambda t, p: t == new, idle=dev.tick, timeout=20)
        seq = [(t, p) for t, p, _r, _ in ha_side.snapshot()]
        emptied = [i for i, (t, p) in enumerate(seq) if t in old_topics and p == b""]
        assert len(emptied) == 2                                       # each old config emptied
        assert max(emptied) < seq.index((new, [p for t, p in seq if t == new][0]))     # before the new one
        assert json.loads([p for t, p in seq if t == new][0])["unique_id"] == "wattwaechter_%s_import_total" % DEV
        assert dev.svc.counters["old_ids_removed"] == 2
    finally:
        dev.close()
    # the broker keeps none of the old configs: a Home Assistant starting later never sees the old entities
    late = Subscriber(broker.port, topics=("homeassistant/sensor/#",), client_id="late")
    try:
        late.wait_for(lambda t, p: t.startswith("homeassistant/sensor/wattwaechter_"))
        import time
        time.sleep(0.5)
        assert not [t for t, p, r, _ in late.snapshot() if "meterplus_" in t]
    finally:
        late.close()
    # the next start looks again, finds nothing and removes nothing
    dev2 = Device(tmp_path, port=broker.port, sendInterval=1)
    try:
        dev2.reading({"1.8.0": (123456799, -1)})
        dev2.run(until=dev2.connected)
        dev2.run(1.0)
        assert "old_ids_removed" not in dev2.svc.counters
    finally:
        dev2.close()


def test_the_old_firmwares_real_configs_are_emptied_too(broker, tmp_path):
    """The configs the firmware before issue 30 left are 550-700 bytes (device block, availability, origin), more
    than the MQTT client keeps of a packet (rx_max 512): found by the real Home Assistant test
    (test_ha_core_upgrade), which the tiny stand-in payloads above never showed. The topic alone is enough."""
    keys = ("import_total", "export_total", "power")
    old_topics = ["homeassistant/sensor/meterplus_%s/%s/config" % (DEV, k) for k in keys]
    seed = Subscriber(broker.port, topics=("x/none",), client_id="seed")
    for k, t in zip(keys, old_topics):
        cfg = json.loads(ha.config_payload(ha.code_of_key(k), DEV, "meterplus/" + DEV, "de", "Meter Plus Keller",
                                           "0.9.0", "http://meterplus-%s.local/" % DEV))
        cfg["unique_id"] = ha.old_unique_id(DEV, ha.code_of_key(k))     # as the old firmware built it
        payload = json.dumps(cfg)
        assert len(payload) > m_client.HardenedMQTT.rx_max
        seed.publish(t, payload, retain=True)
    seed.close()
    ha_side = Subscriber(broker.port, topics=("homeassistant/sensor/#",), client_id="ha")
    ha_side.wait_for(lambda t, p: t == old_topics[-1])
    dev = Device(tmp_path, port=broker.port, sendInterval=1)
    try:
        dev.reading({"1.8.0": (123456789, -1), "2.8.0": (5, -1), "16.7.0": (-2345, -1)})
        dev.run(until=dev.connected)
        new = "homeassistant/sensor/wattwaechter_%s/power/config" % DEV
        ha_side.wait_for(lambda t, p: t == new, idle=dev.tick, timeout=20)
        seq = [(t, p) for t, p, _r, _ in ha_side.snapshot()]
        emptied = [i for i, (t, p) in enumerate(seq) if t in old_topics and p == b""]
        assert len(emptied) == 3, seq
        first_new = min(i for i, (t, p) in enumerate(seq) if "wattwaechter_" in t)
        assert max(emptied) < first_new                                  # emptied before any new one
        assert dev.svc.counters["old_ids_removed"] == 3
    finally:
        dev.close()
