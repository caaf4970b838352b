"""Cloud pairing stored as a hash and never echoed; the optional TLS cloud connection against a local TLS server made
in the test (hello with the pairing hash, welcome, reading lines); off by default."""

import hashlib
import json
import os
import socket
import ssl as real_ssl
import threading
import time

import pytest
import socketpool
from adafruit_ticks import ticks_add, ticks_diff

from core.bus import Bus
from core.durable_file import read_text, stored
from meter.reading import Reading
from services.cloud.pairing import Pairing, token_hash
from services.cloud.service import CONNECTED, CONNECTING, OFF, WAIT_RETRY, CloudService, reading_line
from tests.hostproc import HostProcess, http_request
from tests.mqtt_peers import device_ssl, full_backlog_listener, make_ca

TOKEN = "WW-4711abcd"


class Settings:
    def __init__(self, **kw):
        self.d = {"cloudIotEnabled": False, "cloud.host": "127.0.0.1", "cloud.port": 0}
        self.d.update(kw)

    def get(self, key, default=None):
        return self.d.get(key, default)


def test_pairing_is_stored_as_a_hash_and_removed(tmp_path):
    p = Pairing(str(tmp_path / "cloud.json"))
    p.load()
    assert not p.paired
    p.pair(TOKEN)
    text = read_text(str(tmp_path / "cloud.json"), str)      # as stored (core/durable_file.py)
    assert TOKEN not in text
    assert json.loads(text)["token_sha256"] == hashlib.sha256(b"meterplus-pair:" + TOKEN.encode()).hexdigest()
    q = Pairing(str(tmp_path / "cloud.json"))
    q.load()
    assert q.paired and q.token_sha256 == token_hash(TOKEN)       # survives a restart
    with pytest.raises(ValueError):
        q.pair("bad token!")
    assert q.token_sha256 == token_hash(TOKEN)                    # a bad token changes nothing
    q.unpair()
    assert not stored(str(tmp_path / "cloud.json")) and not q.paired


class TlsCloud:
    """A one-connection-at-a-time TLS server speaking docs/cloud.md: records lines, answers the hello."""

    def __init__(self, certs, answer='{"t":"welcome","interval":10}'):
        ctx = real_ssl.SSLContext(real_ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(certs["server.crt"], certs["server.key"])
        self.ctx = ctx
        self.answer = answer
        self.lines = []
        self.connections = 0
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(2)
        self.port = self.sock.getsockname()[1]
        self._stop = False
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while not self._stop:
            try:
                raw, _addr = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            try:
                conn = self.ctx.wrap_socket(raw, server_side=True)
                f = conn.makefile("rwb")
                hello = f.readline()
                self.lines.append(json.loads(hello))
                if self.answer is None:        # a silent cloud: hold the connection until the device leaves
                    while conn.recv(64):
                        pass
                    continue
                f.write((self.answer + "\n").encode())
                f.flush()
                for line in f:
                    self.lines.append(json.loads(line))
            except (OSError, ValueError):
                pass

    def close(self):
        self._stop = True
        self.sock.close()


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_ca(str(tmp_path_factory.mktemp("ca")))


def device_ctx_factory(certs):
    pem = open(certs["ca.crt"]).read()

    def factory():
        ctx = device_ssl().create_default_context()
        ctx.load_verify_locations(cadata=pem)
        return ctx
    return factory


def make_service(certs, settings, tmp_path):
    bus = Bus()
    pairing = Pairing(str(tmp_path / "cloud.json"))
    pairing.load()
    svc = CloudService(socketpool.SocketPool(None), bus, settings, pairing, "02aabbccddee", "0.2.0",
                       ssl_factory=device_ctx_factory(certs))
    # Most tests here are not about these two deadlines, and spin() runs simulated time 25 times faster than real
    # time: the 10 s deadlines would give the server thread 0.4 s. spin()'s own limit bounds the wait instead.
    svc.connect_timeout_ms = 3600000
    svc.welcome_timeout_ms = 3600000
    return svc, bus, pairing


def spin(svc, until, now=0, limit_s=10):
    deadline = time.monotonic() + limit_s
    while not until():
        assert time.monotonic() < deadline, svc.describe()
        svc.poll(now)
        now = ticks_add(now, 50)
        time.sleep(0.002)
    return now


def test_off_by_default_and_without_pairing(certs, tmp_path):
    server = TlsCloud(certs)
    try:
        s = Settings(**{"cloud.port": server.port})
        svc, _bus, pairing = make_service(certs, s, tmp_path)
        for now in range(0, 5000, 50):
            svc.poll(now)
        assert svc.conn_state == OFF and server.connections == 0       # cloudIotEnabled false
        s.d["cloudIotEnabled"] = True
        for now in range(5000, 10000, 50):
            svc.poll(now)
        assert svc.conn_state == OFF and svc.last_error == "not paired" and server.connections == 0
    finally:
        server.close()


def test_connects_over_tls_says_hello_with_the_hash_and_pushes_readings(certs, tmp_path):
    server = TlsCloud(certs)
    try:
        s = Settings(**{"cloudIotEnabled": True, "cloud.port": server.port})
        svc, bus, pairing = make_service(certs, s, tmp_path)
        pairing.pair(TOKEN)
        bus.publish("reading", Reading(0, {"1.8.0": (123456789, -1), "2.8.0": (5, 0), "16.7.0": (-250, 0)}))
        now = spin(svc, lambda: svc.conn_state == CONNECTED)
        now = spin(svc, lambda: len(server.lines) >= 2, now)
        hello, first = server.lines[0], server.lines[1]
        assert hello == {"t": "hello", "v": 1, "device": "02aabbccddee", "fw": "0.2.0", "pair": token_hash(TOKEN)}
        assert TOKEN not in json.dumps(server.lines)
        assert first == {"t": "reading", "ts": None, "import_Wh": 12345678.9, "export_Wh": 5, "power_W": -250}
        assert svc.interval_ms == 10000                 # the welcome's interval
        spin(svc, lambda: len(server.lines) >= 3, now)  # the next one an interval later
        # unpairing drops the connection
        pairing.unpair()
        svc.poll(now)
        assert svc.conn_state == OFF
    finally:
        server.close()


def test_a_refusing_cloud_waits_long_before_the_next_try(certs, tmp_path):
    server = TlsCloud(certs, answer='{"t":"error","code":"unauthorized","message":"unknown pairing"}')
    try:
        s = Settings(**{"cloudIotEnabled": True, "cloud.port": server.port})
        svc, _bus, pairing = make_service(certs, s, tmp_path)
        pairing.pair(TOKEN)
        spin(svc, lambda: svc.last_error)
        assert svc.conn_state == WAIT_RETRY and "unknown pairing" in svc.last_error
        assert svc._retry_at is not None
    finally:
        server.close()


def test_a_silent_cloud_is_left_after_the_welcome_deadline_across_the_tick_wrap(certs, tmp_path):
    """The cloud takes the hello and never answers: after welcome_timeout_ms (10 s, counted across the ticks wrap)
    the device closes the socket and waits to try again; the loop never waits on it."""
    server = TlsCloud(certs, answer=None)
    try:
        s = Settings(**{"cloudIotEnabled": True, "cloud.port": server.port})
        svc, _bus, pairing = make_service(certs, s, tmp_path)
        svc.welcome_timeout_ms = CloudService.welcome_timeout_ms       # the deadline under test
        pairing.pair(TOKEN)
        before = socketpool.open_count()
        start = ticks_add(0, -3000)                                     # 3 s before the wrap
        now = spin(svc, lambda: server.lines, start)                    # the hello arrived
        assert svc.last_error == ""
        now = spin(svc, lambda: svc.last_error, now, limit_s=30)
        assert "no welcome from the cloud within 10 s" in svc.last_error and svc.conn_state == WAIT_RETRY
        assert ticks_diff(now, start) >= 10000 and now < start         # waited the 10 s, past the wrap
        assert socketpool.open_count() == before and svc._retry_at is not None
        assert server.lines == [server.lines[0]] and server.lines[0]["t"] == "hello"
    finally:
        server.close()


def test_a_black_holed_cloud_never_blocks_a_poll_and_is_left_after_the_connect_deadline(certs, tmp_path):
    """The cloud's host drops SYNs (a full accept queue): every poll returns at once while the connect goes on,
    and after connect_timeout_ms (counted across the ticks wrap) the socket is closed and a retry waits."""
    port, held = full_backlog_listener()
    try:
        s = Settings(**{"cloudIotEnabled": True, "cloud.port": port})
        svc, _bus, pairing = make_service(certs, s, tmp_path)
        svc.connect_timeout_ms = CloudService.connect_timeout_ms       # the deadline under test
        pairing.pair(TOKEN)
        before = socketpool.open_count()
        now = ticks_add(0, -3000)                                       # 3 s before the wrap
        start = now
        svc.poll(now)
        assert svc.conn_state == CONNECTING and socketpool.open_count() == before + 1   # not waiting on it
        while svc.conn_state == CONNECTING:
            now = ticks_add(now, 250)
            svc.poll(now)
        assert ticks_diff(now, start) >= 10000 and now < start          # the 10 s, past the wrap
        assert svc.conn_state == WAIT_RETRY and "timed out after 10 s" in svc.last_error
        assert socketpool.open_count() == before and svc._retry_at is not None
    finally:
        for sock in held:
            sock.close()


def test_an_untrusted_certificate_is_refused(certs, tmp_path):
    server = TlsCloud(certs)
    try:
        s = Settings(**{"cloudIotEnabled": True, "cloud.port": server.port})
        svc, _bus, pairing = make_service(certs, s, tmp_path)
        svc._ssl_factory = lambda: device_ssl().create_default_context()   # built-in bundle: no test CA
        pairing.pair(TOKEN)
        spin(svc, lambda: svc.last_error)
        assert svc.conn_state == WAIT_RETRY and "TLS" in svc.last_error
        assert server.lines == []
    finally:
        server.close()


def test_reading_line_is_exact():
    line = reading_line(Reading(0, {"1.8.0": (100000000000001, -1)}), 1767225600)
    assert json.loads(line) == {"t": "reading", "ts": 1767225600, "import_Wh": 10000000000000.1, "export_Wh": None,
                                "power_W": None}
    assert b"10000000000000.1" in line


@pytest.mark.slow
def test_pair_over_the_api_on_the_host_runtime(tmp_path, certs, monkeypatch):
    """POST stores the hash (never echoed), cloudIotEnabled connects over TLS to cloud.host, DELETE removes it."""
    server = TlsCloud(certs)
    monkeypatch.setenv("SSL_CERT_FILE", certs["ca.crt"])   # the device's built-in bundle trusts this cloud
    h = HostProcess(tmp_path / "drive", settings={"cloudIotEnabled": True,
                                                  "cloud": {"host": "127.0.0.1", "port": server.port}}).start()
    try:
        status, body, _ = http_request(h.url + "/api/v1/cloud/pair", data=json.dumps({"pairing_token": TOKEN}).encode(),
                                       method="POST", headers={"Content-Type": "application/json"})
        assert status == 200 and TOKEN.encode() not in body and json.loads(body)["paired"] is True
        assert TOKEN not in read_text(os.path.join(h.state, "cloud.json"), str)
        assert TOKEN.encode() not in http_request(h.url + "/api/v1/settings")[1]
        h.wait_for(lambda: len(server.lines) >= 2, timeout=60)
        assert server.lines[0]["pair"] == token_hash(TOKEN) and server.lines[1]["t"] == "reading"
        assert server.lines[1]["import_Wh"] > 0
        status, body, _ = http_request(h.url + "/api/v1/cloud/pair", method="DELETE")
        assert status == 200 and json.loads(body)["paired"] is False
        assert not stored(os.path.join(h.state, "cloud.json"))
        status, body, _ = http_request(h.url + "/api/v1/cloud/pair", data=b'{"pairing_token": "no spaces"}',
                                       method="POST", headers={"Content-Type": "application/json"})
        assert status == 400 and not stored(os.path.join(h.state, "cloud.json"))
    finally:
        h.stop()
        server.close()


def test_the_uploader_is_imported_only_while_cloud_is_on(tmp_path, monkeypatch):
    """services/cloud/loader.py: off (the default), services.cloud.service is not imported; switched on it is built
    with the stored pairing and polled; switched off it is stopped and its module let go (issue 35 point 4)."""
    import sys
    from types import SimpleNamespace

    from core.log import Log
    from services.cloud import loader

    monkeypatch.chdir(tmp_path)
    for name in ("services.cloud.service", "services.cloud.loader"):
        monkeypatch.setitem(sys.modules, name, sys.modules[name])   # given back as they were after the test
    Pairing("cloud.json").pair(TOKEN)
    bus = Bus()
    s = Settings()
    app = SimpleNamespace(pool=socketpool.SocketPool(None), bus=bus, settings=s, device_id="aabbccddeeff",
                          clock=None, log=Log(), cloud=None, cloud_pairing=None)
    ld = loader.CloudLoader(app, "1.0.0")
    sys.modules.pop("services.cloud.service")
    for now in range(0, 1000, 250):
        ld.poll(now)
    assert app.cloud is None and "services.cloud.service" not in sys.modules
    assert ld.describe()["connection"] == "OFF"
    s.d["cloudIotEnabled"] = True
    bus.publish("settings", ["cloudIotEnabled"])
    ld.poll(1000)
    assert app.cloud is not None and "services.cloud.service" in sys.modules
    assert app.cloud_pairing.paired and app.cloud.conn_state in (WAIT_RETRY, CONNECTING)   # paired: it tries
    assert ld.describe()["loaded"] is True
    s.d["cloudIotEnabled"] = False
    bus.publish("settings", ["cloudIotEnabled"])
    ld.poll(1250)
    assert app.cloud is None and "services.cloud.service" not in sys.modules
