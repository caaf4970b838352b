"""Issue 39 against a real Home Assistant (Core 2025.4.4 on Python 3.13.0, tools/ha_core_env.sh): the owner adds
Meter Plus through the Shelly integration's own config flow (the emulated Pro 3EM on the host runtime's port); for
five minutes its power and energy entities follow /api/v1/history/latest within 2 s (the simulated meter sends every
second), a stopped meter makes them unavailable, and they come back with the meter."""

import time
from decimal import Decimal

import pytest

from tests.ha_core import HaCore, ha_venv
from tests.hostproc import HostProcess

pytestmark = pytest.mark.slow   # Home Assistant + the host runtime, five minutes of following: mostly waiting

FOLLOW_S = 300          # the five minutes
WITHIN_S = 2.0          # a value Home Assistant shows was the device's within the last 2 s
POWER = "-em:0-total_act_power"
IMPORT = "-emdata:0-total_act"
EXPORT = "-emdata:0-total_act_ret"
KINDS = (POWER, IMPORT, EXPORT)


@pytest.fixture(scope="module")
def venv():
    return ha_venv()      # builds or finds the cached venv; its failure fails the test (CI runs the script first)


def add_shelly(hass, port):
    """The Shelly integration through its config flow, as the UI does it: host and port of the device."""
    code, flow = hass.rest("POST", "/api/config/config_entries/flow", {"handler": "shelly"})
    assert code == 200 and flow.get("type") == "form", (code, flow)
    code, flow = hass.rest("POST", "/api/config/config_entries/flow/" + flow["flow_id"],
                           {"host": "127.0.0.1", "port": port})
    assert code == 200 and flow.get("type") == "create_entry", (code, flow, hass.log()[-4000:])
    hass.wait_for(lambda: any(e["domain"] == "shelly" and e["state"] == "loaded"
                              for e in hass.rest("GET", "/api/config/config_entries/entry")[1]))
    return flow["result"]["entry_id"]


def entity_ids(hass):
    """The entity_ids of the emulated Pro 3EM's power, import and export (KINDS), found by their unique_ids."""
    def find():
        ids = {}
        for e in hass.entities(platform="shelly"):
            for suffix in KINDS:
                if e["unique_id"].endswith(suffix):
                    ids[suffix] = e["entity_id"]
        return ids if len(ids) == len(KINDS) else None
    ids = hass.wait_for(find, timeout=60)
    return [ids[k] for k in KINDS]


def ha_state(hass, entity_id):
    code, doc = hass.rest("GET", "/api/states/" + entity_id, timeout=10)
    assert code == 200, (code, doc)
    return doc["state"]


def device_values(host):
    """(power W, import kWh, export kWh) of /api/v1/history/latest as Decimals, or None."""
    status, doc, _ = host.get("/api/v1/history/latest")
    if status != 200:
        return None
    return tuple(Decimal(str(doc[code]["value"])) for code in ("16.7.0", "1.8.0", "2.8.0"))


def same(state, value):
    """Home Assistant's state (text; energies converted from the device's Wh to kWh) equals the device's value."""
    return state not in ("unknown", "unavailable") and abs(Decimal(state) - value) < Decimal("0.000001")


def test_home_assistants_shelly_entities_follow_the_meter_and_go_unavailable_when_it_stops(venv, tmp_path):
    host = HostProcess(tmp_path / "drive", settings={"emulation": {"shelly": True}})
    hass = HaCore(tmp_path / "ha", venv)
    try:
        host.start()
        host.wait_for(lambda: device_values(host) is not None)
        hass.start()
        add_shelly(hass, host.port)
        ids = entity_ids(hass)
        power_id = ids[0]
        assert hass.wait_for(lambda: ha_state(hass, power_id) not in ("unknown", "unavailable"), timeout=30)

        # Follow for five minutes. The device's values with the moment each was first seen; at every sample Home
        # Assistant's must be one the device had within the last WITHIN_S (or the one it has a poll later: a
        # reading can reach Home Assistant between our poll of the device and our look at Home Assistant).
        seen = []               # [(first seen, power, import, export)]
        late = []
        end = time.monotonic() + FOLLOW_S
        samples = 0
        while time.monotonic() < end:
            now_values = device_values(host)
            t = time.monotonic()
            if now_values is not None and (not seen or seen[-1][1:] != now_values):
                seen.append((t,) + now_values)
            states = [ha_state(hass, i) for i in ids]
            t_ha = time.monotonic()
            after = device_values(host)     # Home Assistant may have a reading the first poll was too early for
            if after is not None and (not seen or seen[-1][1:] != after):
                seen.append((time.monotonic(),) + after)
            ok = [False] * len(KINDS)
            for k, row in enumerate(seen):
                until = seen[k + 1][0] if k + 1 < len(seen) else t_ha
                if until < t_ha - WITHIN_S:
                    continue                      # the device left these values more than 2 s ago
                ok = [ok[j] or same(states[j], row[1 + j]) for j in range(len(KINDS))]
            if not all(ok):
                late.append((round(t_ha - end + FOLLOW_S, 1), states, [[str(v) for v in r[1:]] for r in seen[-3:]]))
            samples += 1
            time.sleep(0.25)
        assert len(seen) >= FOLLOW_S / 4, "the device's values changed only %d times" % len(seen)
        assert len({r[2:] for r in seen}) > 1, "the energies never moved: nothing to follow"
        assert not late, "%d of %d samples not within %s s: %r" % (len(late), samples, WITHIN_S, late[:5])

        # The meter stops: no old value stays current in Home Assistant.
        host.control("meter", "off")
        hass.wait_for(lambda: all(ha_state(hass, i) == "unavailable" for i in ids), timeout=45)
        # ... and comes back: Home Assistant reconnects on its own (its Shelly integration retries every 60 s).
        host.control("meter", None)
        hass.wait_for(lambda: ha_state(hass, power_id) not in ("unknown", "unavailable"), timeout=100)
    finally:
        host.control("meter", None)
        hass.stop()
        host.stop()
