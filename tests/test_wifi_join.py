"""POST /api/v1/wifi/join on the host runtime: credentials are tried with the access point up before anything is
stored, a wrong password or a missing network says so plainly and stores nothing, and a device that can no longer
join after a software restart brings its access point back after a simulated minute (the lock-out rule), says why
it is not joined and dims the LED yellow."""

import json
import time

import pytest

from tests.hostproc import HostProcess

pytestmark = pytest.mark.slow
SPEED = 60          # 5 simulated minutes in 5 s


def info(h):
    data = h.get("/api/v1/system/info")[1]
    return {sec: {e["name"]: e["value"] for e in data[sec]} for sec in ("wifi", "ap", "uptime")}


def primary(h):
    return h.get("/api/v1/settings")[1]["wifi"]["primary"]


@pytest.fixture
def host(tmp_path):
    h = HostProcess(tmp_path / "drive", args=["--speed", str(SPEED)]).start()
    yield h
    h.stop()


def test_wrong_credentials_store_nothing_and_keep_the_ap(host):
    before = primary(host)
    status, body, hdrs = host.post("/api/v1/wifi/join", {"ssid": "HostNetwork", "password": "wrong-password"})
    assert status == 422 and body["joined"] is False and body["reason"] == "wrong_password"
    assert body["error"] == "The WiFi password is wrong." and "wrong-password" not in json.dumps(body)
    status, body, _h = host.post("/api/v1/wifi/join", {"ssid": "NotHere", "password": "some-password"})
    assert status == 422 and body["reason"] == "network_not_found"
    assert primary(host) == before
    i = info(host)
    assert i["ap"]["active"] is True and i["wifi"]["connected"] is False


@pytest.mark.parametrize("doc,field", [
    ({}, "ssid"), ({"ssid": ""}, "ssid"), ({"ssid": 5}, "ssid"), ({"ssid": "HostNetwork", "password": 12}, "password"),
    ({"ssid": "HostNetwork", "profile": "third"}, "profile"),
    ({"ssid": "HostNetwork", "password": "host-password", "static_ip": True, "ip": "300.1.1.1"}, None),
])
def test_bad_requests_are_refused_and_change_nothing(host, doc, field):
    before = primary(host)
    status, body, _h = host.post("/api/v1/wifi/join", doc)
    assert status == 400 and "error" in body
    if field:
        assert field in body["fields"]
    assert primary(host) == before and info(host)["wifi"]["connected"] is False


def test_not_json_is_refused(host):
    from tests.hostproc import http_request

    status, body, _h = http_request(host.url + "/api/v1/wifi/join", data=b"ssid=HostNetwork", method="POST",
                                    headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert status in (400, 415)


def test_a_good_join_answers_the_new_address_stores_and_keeps_the_ap(host):
    status, body, _h = host.post("/api/v1/wifi/join", {"ssid": "HostNetwork", "password": "host-password"})
    assert status == 200, body
    assert list(body) == ["joined", "profile", "ssid", "ip", "mdns_name", "url", "ap_active"]
    assert body["joined"] is True and body["ssid"] == "HostNetwork" and body["ip"] == "127.0.0.1"
    assert body["mdns_name"] == "meterplus-024d50000001.local" and body["url"] == "http://127.0.0.1/"
    assert body["ap_active"] is True                  # the phone on the AP can still read this answer
    p = primary(host)
    assert p["ssid"] == "HostNetwork" and p["enable"] is True and "host-password" not in json.dumps(p)
    assert info(host)["wifi"]["connected"] is True


def test_a_software_restart_that_cannot_join_brings_the_ap_back(host):
    """The reported lock-out: the WiFi's password changes (or a wrong one was saved), then a software restart,
    whose row of the AP table has no AP: after a minute without a join since the start (issue 37: it was 5) the AP
    is back, /system/info says why the station is not joined and the LED is not "fine · green"."""
    assert host.post("/api/v1/wifi/join", {"ssid": "HostNetwork", "password": "host-password"})[0] == 200
    host.control("reset_reason", "SOFTWARE")
    host.control("air", json.dumps([{"ssid": "HostNetwork", "password": "changed-password", "rssi": -48,
                                     "channel": 6}]))
    assert host.post("/api/v1/system/reboot", {})[0] == 200
    host.wait_for(lambda: "host: " in host.log() and _up(host) and info(host)["uptime"]["uptime"] < 120, timeout=60)
    i = info(host)
    assert i["wifi"]["connected"] is False
    if i["uptime"]["uptime"] < 55:                  # (at 60 x a slow start may read it after the minute)
        assert i["ap"]["active"] is False and i["ap"]["mode"] == "off"
    host.wait_for(lambda: info(host)["ap"]["active"], timeout=60)
    i = info(host)
    assert i["ap"]["mode"] == "rescue" and 60 <= i["uptime"]["uptime"] < 300
    assert i["wifi"]["last_error"] == "Authentication failure"
    assert "access point back until it joins" in host.log()
    led = host.get("/api/v1/system/led")[1]
    assert led["status"] == "INFO" and led["color"] == "yellow" and led["mode"] == "dimmed"


def _up(h):
    try:
        return h.get("/api/v1/system/alive", timeout=1, retry_429_for=0)[0] == 200
    except OSError:
        time.sleep(0.2)
        return False
