"""POST /api/v1/mqtt/test never sends the stored MQTT password to another broker (issue 36 point 2): the whole firmware
on the host runtime with a stored broker (a real mosquitto that wants a password) and a fake broker on 127.0.0.1 (a
plain socket server that reads the CONNECT packet). Without a password in the body the stored one goes to the stored
host only; a new broker is tested with the password the page sends, or none."""

import os
import socket
import threading

import pytest

from tests.hostproc import HostProcess, free_port
from tests.mqtt_peers import Broker

pytestmark = pytest.mark.slow
SECRET = "richtig-geheim"


class FakeBroker:
    """Accepts connections on 127.0.0.1, keeps each CONNECT packet, answers CONNACK 5 (not authorised)."""

    def __init__(self):
        self.port = free_port()
        self.packets = []
        self._srv = socket.socket()
        self._srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._srv.bind(("127.0.0.1", self.port))
        self._srv.listen(4)
        self._srv.settimeout(0.2)
        self._stop = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _read_packet(self, conn):
        head = conn.recv(1)
        if not head:
            return None
        length, shift = 0, 0
        while True:
            b = conn.recv(1)[0]
            length |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        body = b""
        while len(body) < length:
            chunk = conn.recv(length - len(body))
            if not chunk:
                break
            body += chunk
        return head + body

    def _run(self):
        while not self._stop:
            try:
                conn, _ = self._srv.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(5)
                try:
                    packet = self._read_packet(conn)
                    if packet is not None:
                        self.packets.append(packet)
                        conn.sendall(b"\x20\x02\x00\x05")
                except OSError:
                    pass

    def close(self):
        self._stop = True
        self._thread.join(2)
        self._srv.close()


def connect_fields(packet):
    """(user, password or None) of an MQTT 3.1.1 CONNECT packet (fixed header byte, then the body)."""
    body = packet[1:]
    pos = 2 + body[0] * 256 + body[1]        # the protocol name
    flags = body[pos + 1]
    pos += 4                                  # level, flags, keep-alive

    def field(p):
        n = body[p] * 256 + body[p + 1]
        return body[p + 2:p + 2 + n], p + 2 + n

    _client, pos = field(pos)
    if flags & 0x04:                          # a will: topic and message
        _t, pos = field(pos)
        _m, pos = field(pos)
    user = password = None
    if flags & 0x80:
        user, pos = field(pos)
    if flags & 0x40:
        password, pos = field(pos)
    return user, password


@pytest.fixture(scope="module")
def peers(tmp_path_factory):
    broker = Broker(str(tmp_path_factory.mktemp("secret-broker")), users={"meter": SECRET}).start()
    fake = FakeBroker()
    h = HostProcess(tmp_path_factory.mktemp("secret-drive"), settings={
        "mqtt": {"enable": True, "host": "localhost", "port": broker.port, "user": "meter", "password": SECRET}})
    h.start()
    yield h, broker, fake
    h.stop()
    fake.close()
    broker.stop()


def run_test(h, body):
    code, doc, _ = h.post("/api/v1/mqtt/test", body)
    assert code == 202, doc

    def done():
        st = h.get("/api/v1/mqtt/test")[1]
        return st if st.get("state") in ("ok", "failed") else None
    return h.wait_for(done, timeout=40, interval=0.3)


def test_the_stored_broker_is_tested_with_the_stored_password(peers):
    h, broker, _fake = peers
    r = run_test(h, {"host": "localhost", "port": broker.port, "user": "meter"})
    assert r["state"] == "ok" and r["password"] == "stored"


def test_another_broker_named_in_the_body_never_gets_the_stored_password(peers):
    """The audit: {"host": <attacker>, "port": ..., "user": "owner"} and the attacker's broker received the stored
    password. Now the CONNECT carries the user and no password, and the answer says the stored one was withheld."""
    h, _broker, fake = peers
    for body in ({"host": "127.0.0.1", "port": fake.port, "user": "meter"},
                 {"host": "127.0.0.1", "port": fake.port, "user": "meter", "password": None},
                 {"host": "127.0.0.1", "port": fake.port, "user": "meter", "use_tls": False}):
        before = len(fake.packets)
        r = run_test(h, body)
        assert len(fake.packets) == before + 1
        packet = fake.packets[-1]
        user, password = connect_fields(packet)
        assert SECRET.encode() not in packet and user == b"meter" and not password    # an empty one at most
        assert r["state"] == "failed" and r["password"] == "withheld" and r["error"] == 1005
        assert "the stored one goes only to localhost" in r["message"]


def test_a_new_broker_is_tested_with_the_password_the_page_sends(peers):
    """The page's second case: a new broker (here the same mosquitto by its address) with a typed password."""
    h, broker, fake = peers
    r = run_test(h, {"host": "127.0.0.1", "port": broker.port, "user": "meter", "password": SECRET})
    assert r["state"] == "ok" and r["password"] == "given"
    r = run_test(h, {"host": "127.0.0.1", "port": fake.port, "user": "meter", "password": "typed"})
    assert r["password"] == "given" and connect_fields(fake.packets[-1]) == (b"meter", b"typed")


@pytest.mark.skipif(not os.path.exists("/usr/bin/chromium"), reason="chromium missing (make test installs it)")
def test_the_page_tests_the_stored_broker_as_stored_and_says_why_another_needs_the_password(peers):
    """The settings page's "Verbindung testen" (web-src/src/settings.js MqttTest) sends password null while the field
    is empty. The stored broker: tested with the stored password, as before. Another host with the field empty: tried
    without one, and the page says the stored one goes only to the stored broker; typed, it is tested with it."""
    sync_api = pytest.importorskip("playwright.sync_api")
    from tests.test_web_ui import ARGS, CHROMIUM, _page

    h, broker, _fake = peers
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = _page(b)
            page.goto(h.url + "/#/settings/mqtt")
            form = page.locator("#s-mqtt")
            box = form.locator("[data-test=mqtt-test]")
            box.get_by_role("button", name="Verbindung testen").click()
            box.get_by_text("Verbindung klappt: localhost nimmt an. Nichts gespeichert.").wait_for(timeout=30000)
            form.locator('[name="mqtt.host"]').fill("127.0.0.1")      # the same mosquitto, but not the stored name
            box.get_by_role("button", name="Verbindung testen").click()
            box.get_by_text("Das gespeicherte geht nur an den gespeicherten Broker", exact=False).wait_for(
                timeout=30000)
            form.locator('[name="mqtt.password"]').fill(SECRET)
            box.get_by_role("button", name="Verbindung testen").click()
            box.get_by_text("Verbindung klappt: 127.0.0.1 nimmt an. Nichts gespeichert.").wait_for(timeout=30000)
            assert not page.errors
        finally:
            b.close()
    assert h.get("/api/v1/settings")[1]["mqtt"]["host"] == "localhost"
