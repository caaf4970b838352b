"""The whole firmware on the host runtime, driven with requests against a real mosquitto: a lone surrogate stored
by an older firmware no longer makes the MQTT service fail, and hostile input over HTTP answers 400."""

import os

import pytest
import requests

from tests.hostproc import HostProcess

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def host(tmp_path_factory, broker):
    # settings.json as an older firmware could have written it: json.dump escapes the lone surrogate as "\ud800".
    h = HostProcess(tmp_path_factory.mktemp("drive"), settings={
        "device_name": "Keller",
        "mqtt": {"enable": True, "host": "127.0.0.1", "port": broker.port, "user": "\ud800", "sendInterval": 1}})
    h.start()
    yield h
    h.stop()


def mqtt_state(host):
    code, st, _h = host.get("/api/v1/mqtt/status")
    return st if code == 200 and st["state"] == "CONNECTED" else None


def test_stored_surrogate_user_is_dropped_and_mqtt_connects(host):
    st = host.wait_for(lambda: mqtt_state(host), timeout=30, interval=0.5)
    assert st["last_error"] in (None, "", 0), st
    settings = requests.get(host.url + "/api/v1/settings", timeout=10).json()
    assert settings["mqtt"]["user"] == "" and settings["device_name"] == "Keller"


def test_surrogate_over_http_is_a_400_not_a_500(host):
    for patch, key in (({"wifi": {"primary": {"ssid": "\ud800"}}}, "wifi.primary.ssid"),
                       ({"mqtt": {"user": "\udc00"}}, "mqtt.user")):
        r = requests.post(host.url + "/api/v1/settings", json=patch, timeout=10)  # requests sends "\ud800"
        assert r.status_code == 400 and list(r.json()["fields"]) == [key], r.text
    assert requests.get(host.url + "/api/v1/settings", timeout=10).json()["mqtt"]["user"] == ""


def test_unusable_gateway_over_http(host):
    r = requests.post(host.url + "/api/v1/settings", json={"wifi": {"primary": {
        "static_ip": True, "ip": "192.168.1.10", "subnet": "255.255.255.0", "gateway": "10.0.0.1"}}}, timeout=10)
    assert r.status_code == 400
    assert r.json()["fields"] == {"wifi.primary.gateway": "gateway 10.0.0.1 is outside the subnet 192.168.1.0/24"}


def test_private_key_as_ca_is_refused_and_not_stored(host, certs):
    key = open(certs["server.key"]).read()
    r = requests.post(host.url + "/api/v1/mqtt/ca", data=key.replace("PRIVATE KEY", "CERTIFICATE"),
                      headers={"Content-Type": "text/plain"}, timeout=10)
    assert r.status_code == 400 and "private key was sent" in r.json()["error"]
    assert requests.get(host.url + "/api/v1/mqtt/ca", timeout=10).json()["has_custom_cert"] is False
    assert not os.path.exists(os.path.join(host.state, "mqtt_ca.pem"))
