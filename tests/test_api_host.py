"""Every endpoint of the REST API on the host runtime with a plain HTTP client: formats, settings, auth, limits."""

import os
import socket
import time

import pytest
import requests
import yaml

from core.durable_file import read_text
from core.json_store import read_json_file
from tests.test_api_harness import raw, start_host, status_of

pytestmark = pytest.mark.slow

ENDPOINTS = [  # (method, path, level) as in device-api.md's tables
    ("GET", "/api/v1/system/alive", None),
    ("GET", "/api/v1/system/info", "READ"),
    ("GET", "/api/v1/system/led", "READ"),
    ("GET", "/api/v1/system/wifi_scan", None),
    ("GET", "/api/v1/system/timezones", "READ"),
    ("GET", "/api/v1/history/latest", "READ"),
    ("GET", "/api/v1/history/recent", "READ"),
    ("GET", "/api/v1/mqtt/test", "READ"),
    ("POST", "/api/v1/mqtt/test", "WRITE"),
    ("GET", "/api/v1/history/highRes?date=2026-01-01", "READ"),
    ("GET", "/api/v1/history/lowRes?start=2026-01-01&days=3", "READ"),
    ("GET", "/api/v1/settings", "READ"),
    ("GET", "/api/v1/mqtt/ca", "READ"),
    ("GET", "/api/v1/mqtt/status", "READ"),
    ("GET", "/api/v1/ota/check", "READ"),
    ("GET", "/api/v1/logs/rawdump", "READ"),
    ("GET", "/api/v1/logs/persistent", "READ"),
    ("GET", "/api/v1/logs/ram", "READ"),
    ("GET", "/api/v1/modbus/status", "READ"),
    ("POST", "/api/v1/settings", "WRITE"),
    ("POST", "/api/v1/auth/tokens/generate", "WRITE"),
    ("POST", "/api/v1/auth/tokens/confirm", "WRITE"),
    ("POST", "/api/v1/mqtt/ca", "WRITE"),
    ("DELETE", "/api/v1/mqtt/ca", "WRITE"),
    ("POST", "/api/v1/cloud/pair", "WRITE"),
    ("DELETE", "/api/v1/cloud/pair", "WRITE"),
    ("POST", "/api/v1/ota/start", "WRITE"),
    ("POST", "/api/v1/system/reboot", "WRITE"),
]


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    h = start_host(tmp_path_factory, "api")
    yield h
    h.stop()


def url(host, path):
    return host.url + path


def post(host, path, body=None, token=None, **kw):
    headers = {"Authorization": "Bearer " + token} if token else {}
    return requests.post(url(host, path), json=body, headers=headers, timeout=10, **kw)


def get(host, path, token=None):
    headers = {"Authorization": "Bearer " + token} if token else {}
    return requests.get(url(host, path), headers=headers, timeout=10)


def _error_codes():
    """The error codes docs/openapi.yaml promises (components.schemas.Error.code.enum)."""
    with open(os.path.join(os.path.dirname(__file__), "..", "docs", "openapi.yaml"), encoding="utf-8") as f:
        return set(yaml.safe_load(f)["components"]["schemas"]["Error"]["properties"]["code"]["enum"])


ERROR_CODES = _error_codes()


def is_error(r, status, message=None):
    assert r.status_code == status, (r.status_code, r.text)
    assert r.headers["Content-Type"] == "application/json"
    body = r.json()
    assert isinstance(body.get("error"), str) and body["error"]
    assert body.get("code") in ERROR_CODES, body           # a stable code the web interface translates
    if message is not None:
        assert body["error"] == message
    return body


# --- formats ---

def test_alive(host):
    r = get(host, "/api/v1/system/alive")
    assert r.status_code == 200 and r.json()["alive"] is True and r.json()["version"]


def test_info_sections(host):
    info = get(host, "/api/v1/system/info").json()
    for section in ("uptime", "wifi", "ap", "esp", "heap", "meter", "clock", "supervisor", "modbus", "ota"):
        for e in info[section]:
            assert set(e) == {"name", "value", "unit"}
    assert info["features_off"] == []                     # every feature wired (tests/test_features.py: when not)
    ota = {e["name"]: e["value"] for e in info["ota"]}
    assert ota["update_available"] is False and ota["state"] in ("idle", "checking", "verifying")
    assert {e["name"] for e in info["meter"]} >= {"age_s", "stale", "state"}
    esp = {e["name"]: e["value"] for e in info["esp"]}
    assert esp["esp_id"] == "024d50000001"  # last 12 hex digits of the stand-in MAC
    assert esp["os_version"] == get(host, "/api/v1/system/alive").json()["version"]
    wifi = {e["name"]: e["value"] for e in info["wifi"]}
    # A fresh drive is the factory state: no WiFi configured, the access point is on (tests/test_network_host.py
    # covers a joined station).
    assert wifi["connected"] is False and wifi["ip_address"] == "" and wifi["mac_address"] == "02:4D:50:00:00:01"
    ap = {e["name"]: e["value"] for e in info["ap"]}
    assert ap["active"] is True and ap["ip"] == "192.168.4.1" and ap["ssid"] == "Meter-Plus-000001"
    heap = {e["name"]: e["value"] for e in info["heap"]}
    assert heap["free"] == 2_000_000 and "largest_block" in heap
    up = {e["name"]: e["value"] for e in info["uptime"]}
    assert up["reset_reason"] == "POWER_ON" and up["uptime"] >= 0
    sup = {e["name"]: e["value"] for e in info["supervisor"]}
    assert "http.worst_poll_ms" in sup and "worst_cycle_ms" in sup
    assert {e["name"] for e in info["clock"]}
    http = {e["name"]: e["value"] for e in info["http"]}
    assert http["requests"] >= 1 and http["state"] == "OK"


def test_led(host):
    led = get(host, "/api/v1/system/led").json()
    assert set(led) == {"status", "priority", "color", "mode", "rgb", "enabled", "active_statuses"}
    assert set(led["rgb"]) == {"r", "g", "b"} and led["enabled"] is True
    assert led["active_statuses"][led["status"]] is True
    assert led["mode"] in ("solid", "pulse", "dimmed")


def test_wifi_scan(host):
    r = get(host, "/api/v1/system/wifi_scan?refresh=true")
    assert r.status_code == 200

    def done():
        d = get(host, "/api/v1/system/wifi_scan").json()
        return d if not d["scanning"] else None

    d = host.wait_for(done, timeout=10)
    assert d["networks"] == [{"ssid": "HostNetwork", "rssi": -48, "secure": True},
                             {"ssid": "Neighbour", "rssi": -77, "secure": True}]
    assert d["count"] == 2
    is_error(get(host, "/api/v1/system/wifi_scan?refresh=maybe"), 400)


def test_timezones(host):
    zones = get(host, "/api/v1/system/timezones").json()
    names = [z["name"] for z in zones]
    assert names == sorted(names) and "Europe/Berlin" in names and "UTC" in names
    berlin = [z for z in zones if z["name"] == "Europe/Berlin"][0]
    assert berlin["utcOffsetMin"] in (60, 120)


def test_ota_and_cloud_from_current_state(host):
    check = get(host, "/api/v1/ota/check").json()
    assert check["ok"] is True and check["data"]["update_available"] is False
    start = post(host, "/api/v1/ota/start").json()
    assert start["ok"] is False and start["update_available"] is False
    r = post(host, "/api/v1/cloud/pair", {"pairing_token": "WW-ABCDEF12"})
    assert r.status_code == 200 and r.json()["success"] is True and r.json()["paired"] is True  # stored (hashed)
    assert "WW-ABCDEF12" not in r.text
    body = is_error(post(host, "/api/v1/cloud/pair", {"pairing_token": "bad token!"}), 400)
    assert "pairing_token" in body["fields"]
    is_error(post(host, "/api/v1/cloud/pair", {"pairing_token": "WW-1", "x": 1}), 400)
    r = requests.delete(url(host, "/api/v1/cloud/pair"), timeout=10)
    assert r.status_code == 200 and r.json()["success"] is True


def test_logs(host):
    r = get(host, "/api/v1/logs/ram")
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/csv")
    lines = r.text.splitlines()
    assert lines[0] == "uptime_s,level,message" and any("Meter Plus up" in ln for ln in lines)
    r = get(host, "/api/v1/logs/persistent")
    assert r.status_code == 200 and r.text.startswith("time,uptime_s,level,message\n")
    assert "Meter Plus up" in r.text
    # the ring may first hold only part of a telegram: wait until a whole start sequence is in it
    r = host.wait_for(lambda: (lambda r: r if r.status_code == 200 and b"\x1b\x1b\x1b\x1b\x01\x01\x01\x01" in r.content
                               else None)(get(host, "/api/v1/logs/rawdump")), timeout=20)
    assert r.headers["Content-Type"] == "application/octet-stream"
    assert b"\x1b\x1b\x1b\x1b\x01\x01\x01\x01" in r.content  # the simulated meter's SML start sequences


def test_rawdump_empty_is_204(tmp_path_factory):
    master, slave = os.openpty()  # a serial "IR head" that never sends a byte
    h = start_host(tmp_path_factory, "silent", args=["--meter", os.ttyname(slave)])
    try:
        r = get(h, "/api/v1/logs/rawdump")
        assert r.status_code == 204 and r.content == b""
    finally:
        h.stop()
        os.close(master)
        os.close(slave)


# --- settings ---

def test_settings_get_has_no_secrets(host):
    post(host, "/api/v1/settings", {"wifi": {"primary": {"ssid": "Home", "password": "hunter2hunter2"}},
                                    "mqtt": {"password": "brokerpw"}})
    r = get(host, "/api/v1/settings")
    assert "hunter2hunter2" not in r.text and "brokerpw" not in r.text
    s = r.json()
    assert s["wifi"]["primary"]["password_set"] is True and s["mqtt"]["password_set"] is True
    assert s["language"]["installed"] == [{"code": "de", "name": "Deutsch"}, {"code": "en", "name": "English"}]


def test_settings_post_answer_and_persistence(host):
    r = post(host, "/api/v1/settings", {"device_name": "Keller", "ledEnable": False,
                                        "wifi": {"primary": {"password": "newpassword1"}}})
    assert r.status_code == 200
    a = r.json()
    assert a["applied"] == {"device_name": "Keller", "ledEnable": False, "wifi": {"primary": {}}}
    assert set(a["changed"]) == {"device_name", "ledEnable", "wifi.primary.password"}
    assert set(a["applied_now"]) == {"device_name", "ledEnable"}
    assert a["after_restart"] == ["wifi.primary.password"] and a["restart_required"] is True
    led = get(host, "/api/v1/system/led").json()  # ledEnable applies at once
    assert led["enabled"] is False and led["mode"] == "off" and led["rgb"] == {"r": 0, "g": 0, "b": 0}
    stored = read_json_file(os.path.join(host.state, "settings.json"))
    assert stored["device_name"] == "Keller" and stored["wifi"]["primary"]["password"] == "newpassword1"
    assert sorted(n for n in os.listdir(host.state) if n.startswith("settings.json")) == ["settings.json.slots"]
    post(host, "/api/v1/settings", {"ledEnable": True})


BAD_SETTINGS = [
    ({"device_name": "x" * 32}, "device_name"),
    ({"wifi": {"primary": {"password": "p" * 64}}}, "wifi.primary.password"),
    ({"wifi": {"primary": {"static_ip": True, "ip": "10.0.0.2"}}}, "wifi.primary.subnet"),
    ({"wifi": {"secondary": {"ip": "300.1.1.1"}}}, "wifi.secondary.ip"),
    ({"accessPoint": {"password": "short"}}, "accessPoint.password"),
    ({"timezone": "Mars/Olympus_Mons"}, "timezone"),
    ({"language": {"active": "German"}}, "language.active"),
    ({"mqtt": {"port": 70000}}, "mqtt.port"),
    ({"medianFilterSize": 4}, "medianFilterSize"),
    ({"ctRatio": 0.5}, "ctRatio"),
    ({"ctRatio": 2.55}, "ctRatio"),
    ({"autoOta": "yes"}, "autoOta"),
    ({"nonsense": True}, "nonsense"),
]


@pytest.mark.parametrize("patch,key", BAD_SETTINGS, ids=[k for _p, k in BAD_SETTINGS])
def test_settings_rejected_all_or_nothing(host, patch, key):
    before = get(host, "/api/v1/settings").json()
    both = dict(patch)
    both["cloudIotEnabled"] = not before["cloudIotEnabled"]  # a valid key next to the bad one
    body = is_error(post(host, "/api/v1/settings", both), 400, "Invalid settings")
    assert key in body["fields"] and "cloudIotEnabled" not in body["fields"]
    assert get(host, "/api/v1/settings").json() == before


def test_settings_valid_timezone_from_the_list(host):
    r = post(host, "/api/v1/settings", {"timezone": "America/New_York"})
    assert r.status_code == 200 and get(host, "/api/v1/settings").json()["timezone"] == "America/New_York"
    post(host, "/api/v1/settings", {"timezone": "Europe/Berlin"})


def test_bad_bodies(host):
    is_error(requests.post(url(host, "/api/v1/settings"), data="{not json", timeout=10,
                           headers={"Content-Type": "application/json"}), 400, "Malformed JSON")
    is_error(requests.post(url(host, "/api/v1/settings"), data='{"ledEnable": true}', timeout=10,
                           headers={"Content-Type": "text/plain"}), 400)
    is_error(requests.post(url(host, "/api/v1/settings"), data="[1, 2]", timeout=10,
                           headers={"Content-Type": "application/json"}), 400)
    is_error(requests.post(url(host, "/api/v1/settings"), timeout=10), 400)
    is_error(requests.post(url(host, "/api/v1/settings"), data=b"\xff\xfe", timeout=10,
                           headers={"Content-Type": "application/json"}), 400)
    is_error(requests.post(url(host, "/api/v1/auth/tokens/confirm"), json={}, timeout=10), 400)
    for path in ("/api/v1/settings", "/api/v1/mqtt/ca", "/api/v1/cloud/pair"):  # every route, others' too
        is_error(requests.post(url(host, path), data="[" * 4000 + "]" * 4000, timeout=10,
                               headers={"Content-Type": "application/json"}), 400, "Malformed JSON")
        is_error(requests.post(url(host, path), data='{"certificate": ', timeout=10,
                               headers={"Content-Type": "application/json"}), 400, "Malformed JSON")
    is_error(requests.post(url(host, "/api/v1/settings"), data='{"a": NaN}', timeout=10,
                           headers={"Content-Type": "application/json; charset=utf-8"}), 400)
    is_error(requests.post(url(host, "/api/v1/settings"), json={"x": "y" * 9000}, timeout=10), 413)


def test_unknown_path_and_method(host):
    is_error(get(host, "/api/v1/nope"), 404, "Not found")
    is_error(get(host, "/nope.html"), 404)   # "/" is the web interface now (services/web/static.py)
    r = requests.put(url(host, "/api/v1/settings"), json={}, timeout=10)
    is_error(r, 405)
    assert r.headers["Allow"] == "GET, POST"
    is_error(requests.get(url(host, "/api/v1/system/reboot"), timeout=10), 405)


def test_auth_off_needs_no_token_and_cannot_be_switched_on_without_tokens(tmp_path_factory):
    h = start_host(tmp_path_factory, "auth_first")
    try:
        for method, path, _level in ENDPOINTS:
            if path.endswith("reboot"):
                continue
            r = requests.request(method, url(h, path), timeout=10)
            assert r.status_code not in (401, 403), (path, r.status_code)
        body = is_error(post(h, "/api/v1/settings", {"api_auth_required": True}), 400)
        assert "api_auth_required" in body["fields"]
        assert get(h, "/api/v1/settings").json()["api_auth_required"] is False
        # /system/info says whether a pair exists, so the page offers the switch only then.
        assert _settings_info(h)["tokens_set"] is False
        g = post(h, "/api/v1/auth/tokens/generate").json()
        assert _settings_info(h)["tokens_set"] is False                       # pending is not set
        post(h, "/api/v1/auth/tokens/confirm", {"new_write_token": g["pending"]["token_write"]})
        assert _settings_info(h) == {"load_errors": 0, "damaged": False, "auth_required": False, "tokens_set": True,
                                     "factory": True}    # nothing stored yet: the page's first-run card (issue 28)
    finally:
        h.stop()


def _settings_info(h):
    return {e["name"]: e["value"] for e in get(h, "/api/v1/system/info").json()["settings"]}


def _first_tokens(h):
    g = post(h, "/api/v1/auth/tokens/generate")
    assert g.status_code == 200
    p = g.json()
    assert p["success"] is True and p["expires_in"] == 60 and "60 seconds" in p["message"]
    read, write = p["pending"]["token_read"], p["pending"]["token_write"]
    assert len(read) == 64 and len(write) == 64
    c = post(h, "/api/v1/auth/tokens/confirm", {"new_write_token": write})
    assert c.status_code == 200 and c.json()["success"] is True
    return read, write


def test_auth_levels_and_rotation(tmp_path_factory):
    h = start_host(tmp_path_factory, "auth")
    try:
        read, write = _first_tokens(h)
        stored = read_text(os.path.join(h.state, "tokens.json"), str)
        assert read not in stored and write not in stored  # SHA-256 hashes only
        assert post(h, "/api/v1/settings", {"api_auth_required": True}).status_code == 200

        for method, path, level in ENDPOINTS:
            if path.endswith("reboot"):
                continue
            none = requests.request(method, url(h, path), timeout=10)
            if level is None:
                assert none.status_code == 200, path
                continue
            is_error(none, 401)
            assert none.headers["WWW-Authenticate"] == "Bearer"
            wrong = requests.request(method, url(h, path), headers={"Authorization": "Bearer " + "0" * 64},
                                     timeout=10)
            is_error(wrong, 401)
            as_read = requests.request(method, url(h, path), headers={"Authorization": "Bearer " + read},
                                       timeout=10)
            if level == "WRITE":
                is_error(as_read, 403)
            else:
                assert as_read.status_code in (200, 204), (path, as_read.status_code)
        is_error(get(h, "/api/v1/settings", token="Basic " + write), 401)
        r = requests.get(url(h, "/api/v1/settings"), headers={"Authorization": "Basic " + write}, timeout=10)
        is_error(r, 401)
        assert get(h, "/api/v1/settings", token=write).status_code == 200

        # rotation: the old pair works until confirm; errors keep it
        g = post(h, "/api/v1/auth/tokens/generate", token=write).json()
        r2, w2 = g["pending"]["token_read"], g["pending"]["token_write"]
        assert get(h, "/api/v1/settings", token=read).status_code == 200
        is_error(get(h, "/api/v1/settings", token=r2), 401)
        is_error(post(h, "/api/v1/auth/tokens/confirm", {"new_write_token": r2}, token=write), 409)
        is_error(post(h, "/api/v1/auth/tokens/confirm", {"new_write_token": w2}, token=read), 403)
        g3 = post(h, "/api/v1/auth/tokens/generate", token=write).json()  # replaces the pending pair
        is_error(post(h, "/api/v1/auth/tokens/confirm", {"new_write_token": w2}, token=write), 409)
        r3, w3 = g3["pending"]["token_read"], g3["pending"]["token_write"]
        assert post(h, "/api/v1/auth/tokens/confirm", {"new_write_token": w3}, token=write).status_code == 200
        is_error(get(h, "/api/v1/settings", token=write), 401)
        is_error(get(h, "/api/v1/settings", token=read), 401)
        assert get(h, "/api/v1/settings", token=r3).status_code == 200
        is_error(post(h, "/api/v1/auth/tokens/confirm", {"new_write_token": w3}, token=w3), 409)  # nothing pending

        # switching off needs WRITE; then everything is open again
        is_error(post(h, "/api/v1/settings", {"api_auth_required": False}, token=r3), 403)
        assert post(h, "/api/v1/settings", {"api_auth_required": False}, token=w3).status_code == 200
        assert get(h, "/api/v1/settings").status_code == 200
    finally:
        h.stop()


def test_confirm_after_60_s_is_410_and_old_tokens_stay(tmp_path_factory):
    state = tmp_path_factory.mktemp("auth_late")
    from tests.hostproc import HostProcess

    with open(os.path.join(os.path.dirname(os.path.dirname(__file__)), "settings.toml")) as f:
        toml = f.read()
    with open(os.path.join(str(state), "settings.toml"), "w") as f:
        f.write(toml + "\nMETERPLUS_API_RATE_LIMIT = 100000\n")
    h = HostProcess(state, args=["--speed", "30"]).start()  # 60 s of device time pass in 2 s
    try:
        read, write = _first_tokens(h)
        assert post(h, "/api/v1/settings", {"api_auth_required": True}, token=write).status_code == 200
        g = post(h, "/api/v1/auth/tokens/generate", token=write).json()
        time.sleep(2.5)
        is_error(post(h, "/api/v1/auth/tokens/confirm", {"new_write_token": g["pending"]["token_write"]},
                      token=write), 410)
        assert get(h, "/api/v1/settings", token=read).status_code == 200
        is_error(get(h, "/api/v1/settings", token=g["pending"]["token_read"]), 401)
    finally:
        h.stop()


# --- limits ---

def test_rate_limit_429(tmp_path_factory):
    h = start_host(tmp_path_factory, "rate", rate_limit=25)
    try:
        time.sleep(10.5)  # the start-up probes count too: let the window pass
        for _ in range(30):  # connections that never make a request do not count
            socket.create_connection(("127.0.0.1", h.port)).close()
        assert status_of(raw(h.port, b"GET /api/v1/system/al")) == 408
        codes = [get(h, "/api/v1/system/alive").status_code for _ in range(25)]
        assert codes == [200] * 25
        r = get(h, "/api/v1/settings")
        body = is_error(r, 429, "Too many requests")
        assert r.headers["Retry-After"] == "10" and body == {"error": "Too many requests", "code": "too_many_requests"}
        is_error(get(h, "/api/v1/nope"), 429)  # device-wide, every path
        time.sleep(10.5)
        assert get(h, "/api/v1/settings").status_code == 200
    finally:
        h.stop()


def _alive_until(host, status, timeout=5.0):
    """GET alive until it answers status (the firmware reads the free heap at most once a second)."""
    deadline = time.monotonic() + timeout
    while True:
        r = get(host, "/api/v1/system/alive")
        if r.status_code == status or time.monotonic() > deadline:
            return r
        time.sleep(0.1)


def _heap_free_reads(host, value, timeout=5.0):
    """Wait until /system/info's heap section reports value bytes free."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = get(host, "/api/v1/system/info").json()
        if any(e["name"] == "free" and e["value"] == value for e in info["heap"]):
            return True
        time.sleep(0.2)
    return False


def test_low_heap_503(host):
    host.control("free_heap", 20000)
    try:
        r = _alive_until(host, 503)
        body = is_error(r, 503, "Service temporary unavailable")
        assert r.headers["Retry-After"] == "5" and body == {"error": "Service temporary unavailable", "code": "busy"}
        is_error(get(host, "/api/v1/settings"), 503)
    finally:
        host.control("free_heap", None)
    assert _alive_until(host, 200).status_code == 200
    host.control("free_heap", 25 * 1024)
    try:
        assert _heap_free_reads(host, 25 * 1024)     # the firmware reads the threshold value now ...
        assert get(host, "/api/v1/system/alive").status_code == 200  # ... and at the threshold is not below it
    finally:
        host.control("free_heap", None)


def test_reboot_answers_then_restarts_keeping_settings(tmp_path_factory):
    h = start_host(tmp_path_factory, "reboot")
    try:
        assert post(h, "/api/v1/settings", {"device_name": "Survivor"}).status_code == 200
        r = post(h, "/api/v1/system/reboot")
        assert r.status_code == 200 and r.json()["rebooting"] is True
        h.wait_for(lambda: "restarting the firmware" in h.log(), timeout=20)
        h.wait_alive(30)
        info = get(h, "/api/v1/system/info").json()
        assert {e["name"]: e["value"] for e in info["uptime"]}["reset_reason"] == "SOFTWARE"
        assert get(h, "/api/v1/settings").json()["device_name"] == "Survivor"
        assert "restart requested (api)" in get(h, "/api/v1/logs/persistent").text
    finally:
        h.stop()


def test_filter_and_ct_ratio_apply_at_once(host):
    def meter():
        info = get(host, "/api/v1/system/info").json()
        return {e["name"]: e["value"] for e in info["meter"]}

    r = post(host, "/api/v1/settings", {"medianFilterSize": 0, "ctRatio": 2.5})
    assert r.status_code == 200 and set(r.json()["applied_now"]) == {"medianFilterSize", "ctRatio"}
    m = host.wait_for(lambda: (lambda m: m if m.get("ct_ratio") == 2.5 else None)(meter()), timeout=10)
    assert m["median"] == 1  # Off: a window of one value
    post(host, "/api/v1/settings", {"medianFilterSize": 5, "ctRatio": 1})
    m = host.wait_for(lambda: (lambda m: m if m.get("ct_ratio") == 1 else None)(meter()), timeout=10)
    assert m["median"] == 5


def test_first_boot_takes_wifi_from_settings_toml(tmp_path_factory):
    h = start_host(tmp_path_factory, "firstboot",
                   toml_extra='CIRCUITPY_WIFI_SSID = "BootNet"\nCIRCUITPY_WIFI_PASSWORD = "bootpass1"\n')
    try:
        s = get(h, "/api/v1/settings").json()
        assert s["wifi"]["primary"]["ssid"] == "BootNet" and s["wifi"]["primary"]["password_set"] is True
        post(h, "/api/v1/settings", {"wifi": {"primary": {"ssid": "Changed"}}})
    finally:
        h.stop()
    h.start()  # the document exists now: settings.toml no longer overrides it
    try:
        assert get(h, "/api/v1/settings").json()["wifi"]["primary"]["ssid"] == "Changed"
    finally:
        h.stop()
