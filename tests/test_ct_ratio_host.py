"""ctRatio changes on the whole firmware (host runtime, --speed 60, simulated meter): /history/latest and the MQTT
state (mosquitto, read with paho) never hide or jump a total, quarter hours and the day hold real energy, and a
restart keeps the totals where they were."""

import json
import time
from decimal import Decimal

import pytest

from host.ntp_server import scaled_clock, start_ntp_server
from tests.hostproc import HostProcess, http_request, meter_time_args
from tests.mqtt_peers import Subscriber

pytestmark = pytest.mark.slow

EPOCH0 = 1_782_000_000 + 6 * 3600      # 2026-06-21 08:00 local (Berlin summer time)
SPEED = 60
# The simulated household draws at most ~3.7 kW: per real second (60 simulated) 0.062 kWh, x3 = 0.19 kWh.
MAX_STEP_KWH = Decimal("1")
MAX_QUARTER_KWH = Decimal("5")          # 3.7 kW x 0.25 h x 3 = 2.8 kWh; the reported bug booked 24,696 kWh
STATE_TOPIC = "meterplus/024d50000001/state"   # the host runtime's MAC


@pytest.fixture
def ntp():
    sim = scaled_clock(float(SPEED), EPOCH0)
    h, p, stop = start_ntp_server(clock=sim)
    yield "%s:%d" % (h, p)
    stop()


def latest(host):
    """(import kWh, export kWh) of /history/latest as exact decimals; None for a 204 (no fresh reading)."""
    status, body, _h = http_request(host.url + "/api/v1/history/latest")
    if status == 204:
        return None
    assert status == 200, body
    doc = json.loads(body, parse_float=Decimal)
    # Both totals are always there: a total left out is what the lowered ratio did before (hidden for months).
    return doc["1.8.0"]["value"], doc["2.8.0"]["value"]


def sample(host, seconds, out):
    """Record /history/latest about once a second for `seconds` real seconds."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        v = latest(host)
        if v is not None:
            out.append(v)
        time.sleep(1.0)


def set_ct(host, value):
    status, body, _h = host.post("/api/v1/settings", {"ctRatio": value})
    assert status == 200 and "ctRatio" in body["applied_now"], body


def test_raise_lower_and_restart_keep_every_total_continuous(tmp_path, ntp, broker):
    drive = tmp_path / "drive"
    sub = Subscriber(broker.port, topics=(STATE_TOPIC,), client_id="ct-ratio-sub")
    host = HostProcess(drive, args=["--speed", str(SPEED), "--ntp", ntp] + meter_time_args(EPOCH0), settings={
        "mqtt": {"enable": True, "host": "127.0.0.1", "port": broker.port, "sendInterval": 1}}).start()
    seen = []
    try:
        host.wait_for(lambda: latest(host), timeout=60)
        sample(host, 20, seen)
        set_ct(host, 3)                            # raise 1 -> 3 (as reported)
        sample(host, 35, seen)
        set_ct(host, 1)                            # lower 3 -> 1 (a mistyped ratio corrected)
        sample(host, 15, seen)
        set_ct(host, 2.5)
        sample(host, 10, seen)
        assert host.stop() == 0                    # an orderly restart on the same drive
        host.start()
        host.wait_for(lambda: latest(host), timeout=60)
        sample(host, 10, seen)
        status, day, _h = host.get("/api/v1/history/highRes?date=2026-06-21")
        assert status == 200
        status, days, _h = host.get("/api/v1/history/lowRes?start=2026-06-21&days=1")
        assert status == 200
        status, info, _h = host.get("/api/v1/system/info")
    finally:
        host.stop()
        sub.close()
    assert len(seen) >= 60
    states = [json.loads(m[1], parse_float=Decimal) for m in sub.snapshot() if m[0] == STATE_TOPIC]
    totals = [(st["import_total"], st["export_total"]) for st in states if "import_total" in st]
    assert len(totals) >= 30 and len(totals) >= len(states) - 2   # a total is never left out (at most one)
    for (i0, e0), (i1, e1) in zip(totals, totals[1:]):
        # Home Assistant's Energy dashboard sums these steps of a total_increasing sensor: no spike, no "reset"
        assert Decimal(0) <= i1 - i0 <= MAX_STEP_KWH, (i0, i1)
        assert Decimal(0) <= e1 - e0 <= MAX_STEP_KWH, (e0, e1)
    for (i0, e0), (i1, e1) in zip(seen, seen[1:]):
        assert Decimal(0) <= i1 - i0 <= MAX_STEP_KWH, (i0, i1)     # never a drop, never the scaled total's jump
        assert Decimal(0) <= e1 - e0 <= MAX_STEP_KWH, (e0, e1)
    items = day["items"]
    assert len(items) >= 5
    assert max(Decimal(str(i["import_kW"])) for i in items) <= MAX_QUARTER_KWH
    assert max(Decimal(str(i["export_kW"])) for i in items) <= MAX_QUARTER_KWH
    d = days["items"][0]
    assert Decimal(str(d["import_kWh"])) <= MAX_QUARTER_KWH * len(items)
    assert Decimal(str(d["import_kWh"])) == pytest.approx(sum(Decimal(str(i["import_kW"])) for i in items))
    meter = {e["name"]: e["value"] for e in info["meter"]}
    assert meter["ct_ratio"] == 2.5
