"""The whole firmware on the host runtime (python -m host) against mosquitto, checked with paho-mqtt, requests and
aio-wattwaechter: status route, CA routes, state values against /history/latest, TLS switched on through the
settings API, reconnection after a broker restart, the last will after a kill, no falling energy."""

import asyncio
import json
import time

import aiohttp
import pytest
import requests
from aio_wattwaechter import Wattwaechter
from aio_wattwaechter.exceptions import WattwaechterNotFoundError, WattwaechterRateLimitError

from core.durable_file import read_text
from tests.hostproc import HostProcess
from tests.mqtt_peers import Subscriber, full_backlog_listener

pytestmark = pytest.mark.slow
DEV = "024d50000001"   # the host runtime's MAC
PREFIX = "meterplus/" + DEV


@pytest.fixture(scope="module")
def sub(broker):
    s = Subscriber(broker.port, topics=(PREFIX + "/#", "homeassistant/#"), client_id="host-test-sub")
    yield s
    s.close()


@pytest.fixture(scope="module")
def host(tmp_path_factory, broker, sub):
    h = HostProcess(tmp_path_factory.mktemp("drive"), settings={
        "wifi": {"primary": {"ssid": "HostNetwork", "password": "host-password"}},   # joined: the web URL is known
        "mqtt": {"enable": True, "host": "127.0.0.1", "port": broker.port, "sendInterval": 1}})
    h.start()
    yield h
    h.stop()


def status(host):
    return host.get("/api/v1/mqtt/status")[1]


def wait_status(host, pred, timeout=30):
    """The first /mqtt/status with pred(status) true; one request per 0.5 s keeps under the 25-per-10-s limit."""
    def probe():
        code, st, _h = host.get("/api/v1/mqtt/status")
        return st if code == 200 and pred(st) else None
    return host.wait_for(probe, timeout=timeout, interval=0.5)


def wait_state(host, state, timeout=30):
    return wait_status(host, lambda st: st["state"] == state, timeout)


def client_call(host, fn):
    """fn(Wattwaechter) with the published client; a 429 is honoured (wait, retry) as the spec asks clients."""
    async def go():
        async with aiohttp.ClientSession() as session:
            ww = Wattwaechter("127.0.0.1:%d" % host.port, session=session)
            for _ in range(5):
                try:
                    return await fn(ww)
                except WattwaechterRateLimitError:
                    await asyncio.sleep(10)
            return await fn(ww)
    return asyncio.run(go())


def call(method, url, **kw):
    """requests.request that honours 429 + Retry-After."""
    for _ in range(5):
        r = requests.request(method, url, timeout=10, **kw)
        if r.status_code != 429:
            return r
        time.sleep(int(r.headers.get("Retry-After", "10")))
    return r


def test_status_route_and_the_published_client(host):
    st = wait_state(host, "CONNECTED")
    assert st["client_id"] == "meterplus-" + DEV and st["use_tls"] is False and "password" not in st
    got = client_call(host, lambda ww: ww.mqtt_status())
    assert got.connected and got.reconnect_attempts == 0 and got.last_error == 0


def test_state_values_match_history_latest(host, sub):
    sub.wait_for(lambda t, p: t == PREFIX + "/state" and b"import_total" in p, timeout=30)
    for _ in range(40):
        time.sleep(0.4)
        code, latest, _h = host.get("/api/v1/history/latest")
        states = [m for m in sub.snapshot() if m[0] == PREFIX + "/state"]
        if code == 200 and states:
            state = json.loads(states[-1][1])
            want = {"import_total": latest["1.8.0"]["value"], "power": latest["16.7.0"]["value"]}
            if "2.8.0" in latest:
                want["export_total"] = latest["2.8.0"]["value"]
            if all(state.get(k) == v for k, v in want.items()):
                return
    pytest.fail("no MQTT state matched /history/latest: %r vs %r" % (states[-3:], latest))


def test_discovery_configs_are_retained_with_ha_keys(host, broker, sub):
    wait_state(host, "CONNECTED")
    wanted = {"homeassistant/sensor/wattwaechter_%s/%s/config" % (DEV, k) for k in ("import_total", "power")}
    for topic in wanted:  # published, so in the broker's retained store before the late subscriber comes
        sub.wait_for(lambda t, p, topic=topic: t == topic, timeout=30)
    late = Subscriber(broker.port, topics=("homeassistant/sensor/wattwaechter_%s/+/config" % DEV,), client_id="late")
    try:
        host.wait_for(lambda: wanted <= {m[0] for m in late.snapshot() if m[2]}, timeout=30)
        configs = {m[0]: json.loads(m[1]) for m in late.snapshot() if m[2]}
    finally:
        late.close()
    imp = configs["homeassistant/sensor/wattwaechter_%s/import_total/config" % DEV]
    assert (imp["device_class"], imp["state_class"], imp["unit_of_measurement"]) == ("energy", "total_increasing",
                                                                                     "kWh")
    assert imp["name"] == "Bezug gesamt"  # default language German
    assert imp["device"]["configuration_url"] == "http://127.0.0.1:%d/" % host.port
    assert imp["device"]["name"] == "Meter Plus" and imp["device"]["sw_version"]
    power = configs["homeassistant/sensor/wattwaechter_%s/power/config" % DEV]
    assert (power["device_class"], power["state_class"], power["unit_of_measurement"]) == ("power", "measurement",
                                                                                           "W")


def test_ca_routes(host, certs):
    url = host.url + "/api/v1/mqtt/ca"
    pem = open(certs["ca.crt"]).read()
    assert call("GET", url).json() == {"has_custom_cert": False, "bundle_size": 0, "custom_size": 0}
    r = call("DELETE", url)
    assert r.status_code == 404 and "error" in r.json()
    r = call("POST", url, data="not a certificate", headers={"Content-Type": "text/plain"})
    assert r.status_code == 400 and "PEM" in r.json()["error"]
    r = call("POST", url, data=pem + " " * 5000, headers={"Content-Type": "text/plain"})
    assert r.status_code == 413 and "error" in r.json()
    r = call("POST", url, json={"cert": pem})
    assert r.status_code == 400
    r = call("POST", url, data=pem, headers={"Content-Type": "text/plain"})
    assert r.status_code == 200 and r.json()["success"] is True
    st = call("GET", url).json()
    assert st["has_custom_cert"] is True and st["custom_size"] == len(pem.strip()) + 1
    # aio-wattwaechter sends {"certificate": ...}; it deletes through the same route.
    up = client_call(host, lambda ww: ww.mqtt_ca_upload(pem))
    assert up.success and up.bundle_size == st["custom_size"]
    assert read_text(host.state + "/mqtt_ca.pem", str) == pem.strip() + "\n"
    gone = client_call(host, lambda ww: ww.mqtt_ca_delete())
    assert gone.success
    with pytest.raises(WattwaechterNotFoundError):
        client_call(host, lambda ww: ww.mqtt_ca_delete())


def test_tls_through_the_settings_api(host, broker, certs):
    r = call("POST", host.url + "/api/v1/mqtt/ca", data=open(certs["ca.crt"]).read(),
                      headers={"Content-Type": "text/plain"})
    assert r.status_code == 200
    tls_sub = Subscriber(None, topics=(PREFIX + "/status",), client_id="tls-sub", tls_ca=certs["ca.crt"],
                         tls_port=broker.tls_port)
    try:
        r = call("POST", host.url + "/api/v1/settings",
                          json={"mqtt": {"host": "localhost", "port": broker.tls_port, "use_tls": True}})
        assert r.status_code == 200, r.text
        st = wait_status(host, lambda st: st["port"] == broker.tls_port and st["state"] == "CONNECTED")
        assert st["use_tls"] is True
        tls_sub.wait_for(lambda t, p: p == b"online", timeout=10)
    finally:
        tls_sub.close()
        call("POST", host.url + "/api/v1/settings",
                      json={"mqtt": {"host": "127.0.0.1", "port": broker.port, "use_tls": False}})
        call("DELETE", host.url + "/api/v1/mqtt/ca")
    # the plain port again (a plain CONNECTED state alone may still be the TLS session's, before the change applies)
    wait_status(host, lambda st: st["port"] == broker.port and st["state"] == "CONNECTED")


def test_reconnects_after_a_broker_restart(host, broker, sub):
    wait_state(host, "CONNECTED")
    n = len(sub.snapshot())
    broker.restart()
    st = wait_status(host, lambda st: st["state"] == "CONNECTED" and st["reconnect_attempts"] >= 1)
    assert st["last_error"] == 0
    # online again after the restart (the broker kept nothing: retained by the device anew, so the subscriber,
    # reconnecting on its own, gets it however late it comes back)
    sub.wait_for(lambda t, p: t == PREFIX + "/status" and p == b"online", timeout=30, since=n)


def test_no_falling_energy_in_the_whole_session(host, sub):
    values = [float(m[1]) for m in sub.snapshot() if m[0] == PREFIX + "/import_total"]
    assert values and values == sorted(values) and values[0] > 0


def test_last_will_after_the_firmware_is_killed(tmp_path, broker):
    h = HostProcess(tmp_path / "drive", settings={
        "mqtt": {"enable": True, "host": "127.0.0.1", "port": broker.port, "topic_prefix": "killtest",
                 "client_id": "killtest-device"}})   # its own id: the module's device stays connected
    s = Subscriber(broker.port, topics=("killtest/status",), client_id="will-sub")
    try:
        h.start()
        s.wait_for(lambda t, p: p == b"online", timeout=30)
        h.kill()
        s.wait_for(lambda t, p: p == b"offline", timeout=10)
    finally:
        s.close()
        h.kill() if h.proc and h.proc.poll() is None else None
    late = Subscriber(broker.port, topics=("killtest/status",), client_id="will-late")
    try:
        msg = late.wait_for(lambda t, p: True)
        assert msg[1] == b"offline" and msg[2] is True  # retained
    finally:
        late.close()


def test_orderly_stop_says_offline_before_leaving(tmp_path, broker):
    """SIGTERM right after online (a message from the broker may still be unread: see test_mqtt_broker's
    test_orderly_stop_with_unread_bytes_closes_without_a_reset): the device's own offline and DISCONNECT arrive."""
    cid = "stoptest-device"   # its own id: the module's device stays connected, and the broker log is about this one
    h = HostProcess(tmp_path / "drive", settings={
        "mqtt": {"enable": True, "host": "127.0.0.1", "port": broker.port, "topic_prefix": "stoptest",
                 "client_id": cid}})
    s = Subscriber(broker.port, topics=("stoptest/status",), client_id="stop-sub")
    try:
        h.start()
        s.wait_for(lambda t, p: p == b"online", timeout=30)
        assert h.stop() == 0  # SIGTERM: the supervisor stops every module
        s.wait_for(lambda t, p: p == b"offline", timeout=10)
    finally:
        s.close()
    log = broker.log()
    assert "Received PUBLISH from %s (d0, q0, r1, m0, 'stoptest/status', ... (7 bytes))" % cid in log  # not the will
    assert "Received DISCONNECT from %s" % cid in log and "Client %s disconnected." % cid in log
    assert "Client %s closed its connection." % cid not in log


def test_a_broker_that_drops_syns_never_stalls_the_loop(tmp_path):
    """mqtt.host answers no SYN (a full accept queue on 127.0.0.1): the firmware keeps answering HTTP while the
    TCP connect is under way (the hand-written client blocked the whole loop inside that connect, so no request
    could ever see the CONNECTING state), and /system/info shows the mqtt section with energy_suppressed."""
    port, held = full_backlog_listener()
    h = HostProcess(tmp_path / "drive", settings={"mqtt": {"enable": True, "host": "127.0.0.1", "port": port}})
    try:
        h.start()
        seen = []
        alive = rounds = 0
        end = time.monotonic() + 40
        while time.monotonic() < end and not ([s for s, _e in seen].count("CONNECTING") >= 3
                                               and 116 in [e for _s, e in seen]):
            rounds += 1
            r = requests.get(h.url + "/api/v1/system/alive", timeout=10)
            alive += r.status_code == 200 and r.json()["alive"] is True
            code, st, _h = h.get("/api/v1/mqtt/status")
            if code == 200:
                seen.append((st["state"], st["last_error"]))
            time.sleep(1.0)  # two requests a second stay under the API's 25 per 10 s
        states = [s for s, _e in seen]
        assert states.count("CONNECTING") >= 3, seen  # answered while the connect was pending
        assert (("WAIT_RETRY", 116) in seen or ("CONNECTING", 116) in seen), seen  # then timed out and retried
        assert alive == rounds
        code, info, _h = h.get("/api/v1/system/info")
        mqtt = {e["name"]: e["value"] for e in info["mqtt"]}
        assert mqtt["energy_suppressed"] == 0 and mqtt["conn"] in ("CONNECTING", "WAIT_RETRY")
    finally:
        h.stop()
        for s in held:
            s.close()
