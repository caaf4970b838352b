"""GET /metrics (issue 21 point 3) on the host runtime, read by prometheus_client's own text parser: the meter's
values equal /history/latest's (exact decimals, Wh), device health is there, a stale meter exports no values,
and with authentication on it needs the READ token."""

import hashlib
import json
from decimal import Decimal

import pytest
from prometheus_client.parser import text_string_to_metric_families

from core.durable_file import stored
from tests.hostproc import HostProcess, http_request

pytestmark = pytest.mark.slow
TOKEN = "f" * 64


def _scrape(h, headers=None):
    status, body, hdrs = http_request(h.url + "/metrics", headers=headers, retry_429_for=0)
    return status, body.decode() if isinstance(body, bytes) else body, hdrs


def _families(text):
    return {f.name: f for f in text_string_to_metric_families(text)}


def _raw_samples(text, name):
    """{labels text: value text} of a metric, as written (the parser turns values into floats)."""
    out = {}
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            head, value = line.rsplit(" ", 1)
            out[head[len(name):]] = value
    return out


@pytest.fixture(scope="module")
def device(tmp_path_factory):
    h = HostProcess(tmp_path_factory.mktemp("metrics") / "drive").start()
    yield h
    h.stop()


def test_values_equal_the_latest_reading_and_health_is_there(device):
    for _ in range(50):   # the meter sends every second: take a scrape between two equal /history/latest
        before = device.get("/api/v1/history/latest")
        status, text, hdrs = _scrape(device)
        after = device.get("/api/v1/history/latest")
        if before[0] == after[0] == 200 and before[1] == after[1]:
            break
    else:
        pytest.fail("no scrape between two equal readings")
    assert status == 200 and hdrs["Content-Type"].startswith("text/plain; version=0.0.4")
    fams = _families(text)                                          # prometheus_client parses all of it
    latest = before[1]
    energy = _raw_samples(text, "meterplus_energy_wh_total")
    assert Decimal(energy['{obis="1.8.0",name="import_total"}']) == Decimal(str(latest["1.8.0"]["value"])) * 1000
    assert Decimal(energy['{obis="2.8.0",name="export_total"}']) == Decimal(str(latest["2.8.0"]["value"])) * 1000
    power = _raw_samples(text, "meterplus_power_watts")
    assert Decimal(power['{obis="16.7.0",name="power"}']) == Decimal(str(latest["16.7.0"]["value"]))
    assert fams["meterplus_energy_wh"].type == "counter"         # the parser drops the _total suffix
    assert fams["meterplus_power_watts"].type == "gauge"
    up = fams["meterplus_meter_up"].samples[0].value
    assert up == 1 and 0 <= fams["meterplus_reading_age_seconds"].samples[0].value < 15
    for name in ("meterplus_info", "meterplus_uptime_seconds", "meterplus_heap_free_bytes",
                 "meterplus_wifi_connected", "meterplus_mqtt_connected", "meterplus_cycle_worst_ms",
                 "meterplus_poll_worst_ms"):
        assert name in fams, name
    polls = {s.labels["module"] for s in fams["meterplus_poll_worst_ms"].samples}
    assert {"http", "meter", "history", "mqtt"} <= polls
    assert fams["meterplus_mqtt_connected"].samples[0].labels["state"] == "off"   # MQTT not configured
    assert fams["meterplus_info"].samples[0].labels["device_id"] == "024d50000001"


def test_a_silent_meter_exports_no_old_values(device):
    device.control("meter", "off")
    try:
        text = device.wait_for(lambda: (lambda r: r[0] == 200 and "meterplus_meter_up 0" in r[1] and r[1])(
            _scrape(device)), timeout=40)
        fams = _families(text)
        assert "meterplus_energy_wh" not in fams and "meterplus_power_watts" not in fams
        assert "meterplus_uptime_seconds" in fams                 # the device's own health still
    finally:
        device.control("meter", None)
    device.wait_for(lambda: "meterplus_meter_up 1" in _scrape(device)[1], timeout=40)


def test_with_authentication_on_it_needs_the_read_token(tmp_path):
    drive = tmp_path / "drive"
    drive.mkdir()
    digest = hashlib.sha256(TOKEN.encode()).hexdigest()
    other = hashlib.sha256(b"write").hexdigest()
    (drive / "tokens.json").write_text(json.dumps({"read": digest, "write": other, "required": True}))
    h = HostProcess(drive, settings={"api_auth_required": True}).start()
    try:
        assert _scrape(h)[0] == 401
        assert _scrape(h, {"Authorization": "Bearer " + "0" * 64})[0] == 401
        status, text, _ = _scrape(h, {"Authorization": "Bearer " + TOKEN})
        assert status == 200 and "meterplus_uptime_seconds" in text
        assert stored(str(drive / "tokens.json"))
    finally:
        h.stop()


def test_label_values_are_escaped_so_the_parser_reads_them_back():
    from services.metrics.exposition import device_lines

    out = []
    odd = 'a"b\\c\nd'
    device_lines(out, odd, 1, None, None, None, False, "CONNECTING", 0, [(odd, 3)])
    fams = _families("".join(out))
    assert fams["meterplus_info"].samples[0].labels["device_id"] == odd
    assert fams["meterplus_poll_worst_ms"].samples[0].labels["module"] == odd
    assert fams["meterplus_mqtt_connected"].samples[0].value == 0
    assert "meterplus_heap_free_bytes" not in fams and "meterplus_wifi_rssi_dbm" not in fams   # unknown: absent
