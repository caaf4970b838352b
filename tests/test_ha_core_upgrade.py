"""Issue 30 against a real Home Assistant (Core 2025.4.4 on Python 3.13.0, tools/ha_core_env.sh): a Meter Plus that
ran the firmware before issue 30 (discovery under homeassistant/sensor/meterplus_<id>/, unique_ids
meterplus_<id>_<key>) is upgraded; Home Assistant must keep the entity_ids, their history, the long-term statistics
and the one device. The old firmware is played by paho-mqtt with its exact discovery payloads (OLD_CONFIG below);
the new one is the host runtime (python -m host) with MQTT pointing at the same mosquitto."""

import json
import time
from datetime import datetime, timedelta, timezone

import pytest

from tests.ha_core import HaCore, ha_venv
from tests.hostproc import HostProcess
from tests.mqtt_peers import Broker, Subscriber

pytestmark = pytest.mark.slow   # Home Assistant + the host runtime + mosquitto; mostly waiting (~7 s CPU), so not alone

DEV = "024d50000001"              # the host runtime's device id (host/cp/_hostenv.py's MAC)
PREFIX = "meterplus/" + DEV
DISCOVERY = "homeassistant"
# the host meter's capture sends these; the old firmware announced each with these labels (language de)
OLD = {"import_total": ("Bezug gesamt", "energy", "total_increasing", "kWh"),
       "export_total": ("Einspeisung gesamt", "energy", "total_increasing", "kWh"),
       "power": ("Wirkleistung", "power", "measurement", "W")}
ENERGY = ("import_total", "export_total")


def old_config(key):
    """services/mqtt/ha_discovery.config_payload as the firmware before issue 30 built it (commit b10b5a8^:
    unique_id and node id meterplus_<id>, no object_id), for device name "Meter Plus", language de."""
    name, device_class, state_class, unit = OLD[key]
    dev = {"identifiers": ["meterplus_" + DEV], "name": "Meter Plus", "manufacturer": "Meter Plus",
           "model": "Meter Plus IR reader (ESP32-S3)", "sw_version": "0.9.0"}
    cfg = {"name": name, "unique_id": "meterplus_%s_%s" % (DEV, key), "state_topic": "%s/%s" % (PREFIX, key),
           "availability": [{"topic": PREFIX + "/status"}, {"topic": PREFIX + "/meter"}],
           "availability_mode": "all", "device_class": device_class, "state_class": state_class,
           "unit_of_measurement": unit, "device": dev, "origin": {"name": "Meter Plus firmware", "sw_version": "0.9.0"}}
    return "%s/sensor/meterplus_%s/%s/config" % (DISCOVERY, DEV, key), json.dumps(cfg)


# what the old firmware sent: small totals (the new firmware seeds its energy floor from the retained ones and
# never publishes less), one power value per round
OLD_ROUNDS = ({"import_total": "0.5000", "export_total": "0.1000", "power": "150.0"},
              {"import_total": "0.6000", "export_total": "0.1500", "power": "175.0"})


def num(state):
    """A state's number, or None (unknown, unavailable, the empty state of a removed entity)."""
    try:
        return float(state)
    except ValueError:
        return None


def at(iso):
    return datetime.fromisoformat(iso)


def floor5(t):
    return t.replace(minute=t.minute - t.minute % 5, second=0, microsecond=0)


@pytest.fixture(scope="module")
def venv():
    return ha_venv()      # builds or finds the cached venv; its failure fails the test (CI runs the script first)


def test_an_upgraded_meter_plus_keeps_its_entities_history_statistics_and_device(venv, tmp_path):
    broker = Broker(str(tmp_path / "broker")).start()
    hass = HaCore(tmp_path / "ha", venv)
    host = None
    try:
        hass.start()
        started = datetime.now(timezone.utc)
        # ---- the old firmware: retained discovery configs, availability and values, as it left them
        old = Subscriber(broker.port, topics=("x/none",), client_id="old-firmware")
        for key in OLD:
            old.publish(*old_config(key), retain=True)
        old.publish(PREFIX + "/status", "online", retain=True)
        old.publish(PREFIX + "/meter", "online", retain=True)
        hass.add_mqtt(broker.port)
        entry_ids = {}
        for values in OLD_ROUNDS:
            for key, value in values.items():
                old.publish("%s/%s" % (PREFIX, key), value, retain=True)
            want = {key: float(v) for key, v in values.items()}

            def shown(want=want):
                ents = {e["unique_id"]: e["entity_id"] for e in hass.entities()}
                ids = {k: ents.get("meterplus_%s_%s" % (DEV, k)) for k in OLD}
                if None in ids.values():
                    return None
                for k, eid in ids.items():
                    code, st = hass.rest("GET", "/api/states/" + eid)
                    if code != 200 or num(st["state"]) != want[k]:
                        return None
                return ids
            entry_ids = hass.wait_for(shown)
            time.sleep(1.1)       # the next round's states a second apart: each its own row in the history
        old.publish(PREFIX + "/status", "offline", retain=True)     # the old firmware's orderly goodbye
        old.close()
        before = {e["entity_id"]: e for e in hass.entities()}
        assert sorted(before) == sorted(entry_ids.values())
        devices_before = [d for d in hass.devices() if ["mqtt", "meterplus_" + DEV] in d["identifiers"]]
        assert len(devices_before) == 1
        upgrade_at = datetime.now(timezone.utc)
        # ---- the new firmware
        host = HostProcess(tmp_path / "drive", settings={
            "mqtt": {"enable": True, "host": "127.0.0.1", "port": broker.port, "sendInterval": 1}}).start()

        def upgraded():
            ents = hass.entities()
            if any(e["unique_id"].startswith("meterplus_") for e in ents):
                return None
            ids = {e["unique_id"]: e["entity_id"] for e in ents}
            if any("wattwaechter_%s_%s" % (DEV, k) not in ids for k in OLD):
                return None
            for k in OLD:                      # a value of the new firmware has arrived for each
                st = hass.rest("GET", "/api/states/" + ids["wattwaechter_%s_%s" % (DEV, k)])[1]
                if num(st["state"]) is None or at(st["last_changed"]) < upgrade_at:
                    return None
            return ents
        after = hass.wait_for(upgraded, timeout=90)
        time.sleep(2)                         # anything late (a second entity, a device) would show by now
        after = hass.entities()
        # same entity_ids, one entity each, no _2, no orphan
        new_ids = {e["unique_id"]: e["entity_id"] for e in after}
        assert all(u.startswith("wattwaechter_%s_" % DEV) for u in new_ids), after    # the old ones are gone
        for k in OLD:
            assert new_ids["wattwaechter_%s_%s" % (DEV, k)] == entry_ids[k]
        for eid in entry_ids.values():              # no second entity beside the old entity_id (sensor.x_2)
            assert not [i for i in new_ids.values() if i.startswith(eid + "_") and i[len(eid) + 1:].isdigit()]
        # one device, the one from before
        devices = [d for d in hass.devices() if any(i[0] == "mqtt" for i in d["identifiers"])]
        assert [d["id"] for d in devices] == [devices_before[0]["id"]], devices
        assert {e["device_id"] for e in after} == {devices_before[0]["id"]}
        # the new firmware leaves (status offline): no state changes after this, the history and statistics below
        # are complete
        host.stop()
        hass.wait_for(lambda: all(hass.rest("GET", "/api/states/" + e)[1]["state"] == "unavailable"
                                  for e in entry_ids.values()))
        # history: the old values and the new firmware's in one entity's history
        code, hist = hass.rest("GET", "/api/history/period/%s?filter_entity_id=%s&no_attributes"
                               % (started.isoformat().replace("+", "%2B"), ",".join(entry_ids.values())))
        assert code == 200, hist
        by_id = {rows[0]["entity_id"]: rows for rows in hist if rows}
        last = {}
        for k in OLD:
            rows = by_id[entry_ids[k]]
            before_upgrade = [num(r["state"]) for r in rows if at(r["last_changed"]) < upgrade_at]
            since_upgrade = [num(r["state"]) for r in rows if at(r["last_changed"]) > upgrade_at]
            assert [float(v[k]) for v in OLD_ROUNDS] == [v for v in before_upgrade if v is not None], (k, rows)
            since_upgrade = [v for v in since_upgrade if v is not None]
            assert since_upgrade, (k, rows)                  # the new firmware's values, under the same entity_id
            last[k] = since_upgrade[-1]
        # long-term statistics: the recorder compiles each 5-minute period since the start (Home Assistant does it
        # itself 10 s past each boundary; the test probe asks now); the energy sensors keep their statistic_id and
        # their sum runs from the old firmware's first total to the new firmware's
        period = floor5(started)
        while period <= datetime.now(timezone.utc):
            hass.rest("POST", "/api/services/meterplus_probe/compile_statistics", {"start": period.isoformat()})
            period += timedelta(minutes=5)
        ids = [s["statistic_id"] for s in hass.ws({"type": "recorder/list_statistic_ids"})[0]]
        assert sorted(i for i in ids if i.startswith("sensor.")) == sorted(new_ids.values()), ids   # none orphaned
        stats = hass.ws({"type": "recorder/statistics_during_period", "start_time": floor5(started).isoformat(),
                         "statistic_ids": [entry_ids[k] for k in ENERGY], "period": "5minute",
                         "types": ["sum", "state"]})[0]
        for k in ENERGY:
            rows = stats[entry_ids[k]]
            first = float(OLD_ROUNDS[0][k])
            assert rows and rows[-1]["state"] == pytest.approx(last[k]), rows
            assert rows[-1]["sum"] == pytest.approx(last[k] - first, abs=1e-6), (k, rows)   # one series, old to new
        assert not [i for i in hass.ws({"type": "recorder/validate_statistics"})[0] if i.startswith("sensor.")]
    finally:
        if host is not None:
            host.stop()
        hass.stop()
        broker.stop()
