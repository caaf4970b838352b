"""Issue 26 finding 7 on the host runtime over HTTP: the restore endpoint refuses WiFi, access point and
authentication keys in any spelling; a new destination drops the secret that went to the old one (MQTT password,
cloud pairing) unless the request gives it again; a body that changes nothing says so."""

import os

import pytest
import requests

from core.durable_file import stored
from core.json_store import read_json_file
from tests.test_api_harness import host_fixture

pytestmark = pytest.mark.slow
host = host_fixture("settings-restore")


def _post(h, path, doc):
    r = requests.post(h.url + path, json=doc, timeout=10)
    return r.status_code, r.json()


def _stored(h):
    return read_json_file(os.path.join(h.state, "settings.json"))   # None: none written yet, the defaults


@pytest.mark.parametrize("doc,key", [
    ({"wifi.primary.ssid": "EvilTwin"}, "wifi.primary.ssid"),
    ({"wifi": {"primary": {"ssid": "EvilTwin"}}}, "wifi.primary.ssid"),
    ({"wifi": {"primary.ssid": "EvilTwin"}}, "wifi.primary.ssid"),
    ({"accessPoint.enable": True}, "accessPoint.enable"),
    ({"accessPoint": {"password": "evilpass1"}}, "accessPoint.password"),
    ({"api_auth_required": False}, "api_auth_required"),
], ids=["flat", "nested", "half", "ap-flat", "ap-nested", "auth"])
def test_restore_refuses_the_network_and_authentication_in_any_spelling(host, doc, key):
    before = _stored(host)
    status, body = _post(host, "/api/v1/settings/restore", dict(doc, device_name="Gekapert"))
    assert status == 400 and key in body["fields"], body
    assert _stored(host) == before


def test_restore_takes_the_rest(host):
    status, body = _post(host, "/api/v1/settings/restore", {"device_name": "Wiederhergestellt",
                                                             "language": {"active": "en"}})
    assert status == 200 and body["changed"] == ["device_name", "language.active"]
    assert _stored(host)["device_name"] == "Wiederhergestellt"


def test_settings_refuse_a_dotted_key_inside_an_object(host):
    before = _stored(host)
    status, body = _post(host, "/api/v1/settings", {"wifi": {"primary.ssid": "x"}})
    assert status == 400 and "dotted key" in body["fields"]["wifi.primary.ssid"]
    assert _stored(host) == before


def test_a_new_broker_gets_no_stored_password(host):
    assert _post(host, "/api/v1/settings", {"mqtt": {"host": "broker.lan", "password": "s3cret"}})[0] == 200
    status, body = _post(host, "/api/v1/settings", {"mqtt.host": "broker.evil.example"})
    assert status == 200 and body["changed"] == ["mqtt.host", "mqtt.password"]
    assert body["secrets_dropped"] == ["mqtt.password"] and "mqtt.password" in body["message"]
    assert _stored(host)["mqtt"]["password"] == ""
    # given again in the same request: kept, nothing said about dropping
    assert _post(host, "/api/v1/settings", {"mqtt": {"host": "broker.lan", "password": "s3cret"}})[0] == 200
    status, body = _post(host, "/api/v1/settings", {"mqtt": {"host": "broker2.lan", "password": "s3cret"}})
    assert status == 200 and "secrets_dropped" not in body and _stored(host)["mqtt"]["password"] == "s3cret"


def test_a_new_cloud_host_drops_the_pairing(host):
    assert requests.post(host.url + "/api/v1/cloud/pair", json={"pairing_token": "WW-12345678"}, timeout=10).ok
    assert stored(os.path.join(host.state, "cloud.json"))
    status, body = _post(host, "/api/v1/settings", {"cloud": {"host": "cloud.evil.example"}})
    assert status == 200 and body["secrets_dropped"] == ["cloud pairing"]
    assert not stored(os.path.join(host.state, "cloud.json"))


def test_a_body_that_changes_nothing_says_so(host):
    current = requests.get(host.url + "/api/v1/settings", timeout=10).json()
    for doc in ({}, {"device_name": current["device_name"]}, current):
        status, body = _post(host, "/api/v1/settings", doc)
        assert status == 200 and body["changed"] == [] and body["message"].startswith("Nothing changed"), doc
