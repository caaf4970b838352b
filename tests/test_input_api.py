"""Hostile input through the real HTTP stack in-process (HttpApi, routes, a stepped clock): lone surrogates,
unusable IPv4 addressing and a private key as the MQTT CA answer 400 with the reason and change nothing."""

import json

import pytest
import socketpool

from core.app import App
from core.bus import Bus
from core.durable_file import stored
from core.json_store import read_json_file
from core.log import Log
from core.settings import Settings
from services.api import routes_settings
from services.api.auth import Tokens
from services.api.service import HttpApi
from services.mqtt import routes as mqtt_routes
from services.mqtt.ca_store import CaStore
from tests.inproc import exchange, server_port, split_answer


class _Mqtt:
    """What the MQTT routes use of the MqttService: the CA store and the change hook."""

    def __init__(self, path):
        self.ca = CaStore(path)
        self.changes = 0

    def ca_changed(self):
        self.changes += 1

    def status(self):
        return {}


@pytest.fixture
def api(tmp_path):
    app = App(Bus(), Settings(str(tmp_path / "settings.json"), zone_ok=lambda z: z == "UTC"), Log(echo=None))
    app.auth = Tokens(str(tmp_path / "tokens.json"))
    app.mem_free = lambda: 10 ** 6
    app.mqtt = _Mqtt(str(tmp_path / "mqtt_ca.pem"))
    server = HttpApi(socketpool.SocketPool(None), app, host="127.0.0.1", port=0,
                     route_modules=[routes_settings, mqtt_routes])
    server.start()
    server.app = app
    server.folder = tmp_path
    yield server
    server.stop()


def call(api, path, body, ctype="application/json"):
    """(status, JSON answer) of a POST with the raw body bytes."""
    raw = exchange(server_port(api), b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: %s\r\n"
                   b"Content-Length: %d\r\n\r\n" % (path.encode(), ctype.encode(), len(body)) + body,
                   lambda: api.poll(0), wait=0.05)
    status, _, payload = split_answer(raw)
    return status, json.loads(payload)


@pytest.mark.parametrize("body,key", [
    (rb'{"wifi": {"primary": {"ssid": "\ud800"}}}', "wifi.primary.ssid"),
    (rb'{"wifi": {"primary": {"password": "12345678\ud800"}}}', "wifi.primary.password"),
    (rb'{"accessPoint": {"ssid": "AP\udfff"}}', "accessPoint.ssid"),
    (rb'{"mqtt": {"user": "\ud800"}, "ledEnable": false}', "mqtt.user"),
    (rb'{"device_name": "\ud800"}', "device_name"),
    (rb'{"wifi": {"primary": {"ip": "\u0661\u0669\u0662.168.1.1"}}}', "wifi.primary.ip"),
    (rb'{"wifi": {"primary": {"subnet": "255.0.255.0"}}}', "wifi.primary.subnet"),
    (rb'{"wifi": {"primary": {"static_ip": true, "ip": "192.168.1.10", "subnet": "255.255.255.0", '
     rb'"gateway": "10.0.0.1"}}}', "wifi.primary.gateway"),
])
def test_settings_answer_400_naming_the_key_and_store_nothing(api, body, key):
    before = api.app.settings.public()
    status, answer = call(api, "/api/v1/settings", body)
    assert status == 400 and answer["error"] == "Invalid settings" and list(answer["fields"]) == [key], answer
    assert api.app.settings.public() == before and not stored(str(api.folder / "settings.json"))


def test_gateway_reason_through_the_api(api):
    _status, answer = call(api, "/api/v1/settings", json.dumps({"wifi": {"secondary": {
        "static_ip": True, "ip": "192.168.1.10", "subnet": "255.255.255.0", "gateway": "10.0.0.1"}}}).encode())
    assert answer["fields"] == {"wifi.secondary.gateway": "gateway 10.0.0.1 is outside the subnet 192.168.1.0/24"}


def test_surrogate_pair_is_stored_and_echoed_as_one_character(api):
    status, answer = call(api, "/api/v1/settings", rb'{"device_name": "Z\ud83d\ude00"}')
    assert status == 200 and answer["applied"] == {"device_name": "Z\U0001F600"}
    assert read_json_file(str(api.folder / "settings.json"))["device_name"] == "Z\U0001F600"


def test_private_key_upload_is_refused_and_not_stored(api, certs):
    key = open(certs["server.key"]).read()
    disguised = key.replace("PRIVATE KEY", "CERTIFICATE")
    for body, ctype in ((key, "text/plain"), (disguised, "text/plain"),
                        (json.dumps({"certificate": disguised}), "application/json")):
        status, answer = call(api, "/api/v1/mqtt/ca", body.encode(), ctype)
        assert status == 400 and "private key was sent" in answer["error"] and "not stored" in answer["error"]
    assert api.app.mqtt.changes == 0
    assert not stored(str(api.folder / "mqtt_ca.pem"))


@pytest.mark.parametrize("body", [
    "-----BEGIN CERTIFICATE-----\nMAA=\n-----END CERTIFICATE-----",
    "-----BEGIN CERTIFICATE-----\nMAMCAQA=\n-----END CERTIFICATE-----",       # SEQUENCE { INTEGER 0 }
    "-----BEGIN CERTIFICATE-----\nMIEDMAEA\n-----END CERTIFICATE-----",       # non-minimal length
])
def test_der_that_is_no_certificate_is_refused(api, body):
    status, answer = call(api, "/api/v1/mqtt/ca", body.encode(), "text/plain")
    assert status == 400 and api.app.mqtt.changes == 0, answer
    assert not stored(str(api.folder / "mqtt_ca.pem"))


def test_real_ca_still_accepted(api, certs):
    status, answer = call(api, "/api/v1/mqtt/ca", open(certs["ca.crt"]).read().encode(), "text/plain")
    assert status == 200 and answer["success"] is True and api.app.mqtt.changes == 1
