"""MqttService against a recording fake socket: exact bytes on the wire, partial sends, the energy guard,
availability, keepalive, backoff with jitter, settings changes and HA birth messages, on a stepped clock."""

import errno
import json

import pytest

from core.bus import Bus
from core.settings import Settings
from meter.reading import Reading
from services.mqtt import ha_discovery as ha
from services.mqtt import service as m

DEV = "024d50000001"
PREFIX = "meterplus/" + DEV


E_TIMEDOUT, E_ALREADY, E_ISCONN, E_NOTCONN = 116, 120, 127, 128  # what the device's lwIP raises (newlib numbers)


class FakeSock:
    """socketpool.Socket as the device has it: a non-blocking connect raises ETIMEDOUT and goes on (EALREADY,
    then EISCONN, or ENOTCONN when it failed); send may take part; EAGAIN when there is nothing to do."""

    def __init__(self, pool):
        self.pool = pool
        self.sent = bytearray()
        self.inbox = bytearray()
        self.blocking = []
        self.timeouts = []
        self.closed = False
        self.connected_to = None
        self.connect_calls = 0
        self.take = pool.take        # bytes accepted per send call (None = all)
        self.auto_pong = True        # answer every PINGREQ, as a live broker does
        self._parsed = 0

    def settimeout(self, t):
        self.timeouts.append(t)

    def setblocking(self, flag):
        self.blocking.append(flag)

    def connect(self, addr):
        assert self.blocking == [False], "connect on a blocking socket"
        self.connect_calls += 1
        if self.connect_calls == 1:
            raise OSError(E_TIMEDOUT, "ETIMEDOUT")  # in progress
        if self.pool.syn_dropped:
            raise OSError(E_ALREADY, "EALREADY")
        if self.pool.refuse:
            raise OSError(E_NOTCONN, "ENOTCONN")
        self.connected_to = addr
        raise OSError(E_ISCONN, "EISCONN")

    def send(self, data):
        assert self.connected_to is not None
        if self.pool.blocked:
            raise OSError(errno.EAGAIN, "EAGAIN")
        n = len(data) if self.take is None else min(self.take, len(data))
        self.sent += bytes(data[:n])
        if self.auto_pong:
            self._pong()
        return n

    def _pong(self):
        # Walk the complete packets sent so far; queue a PINGRESP for each new PINGREQ.
        data = self.sent
        i = self._parsed
        while i + 2 <= len(data):
            n, mul, j = 0, 1, i + 1
            while j < len(data):
                b = data[j]
                j += 1
                n += (b & 0x7F) * mul
                mul <<= 7
                if not b & 0x80:
                    break
            else:
                return
            if j + n > len(data):
                return
            if data[i] == 0xC0:
                self.inbox += b"\xd0\x00"
            i = j + n
            self._parsed = i

    def recv_into(self, buf, n=0):
        if self.pool.peer_closed:
            raise OSError(E_NOTCONN, "ENOTCONN")
        if not self.inbox:
            raise OSError(errno.EAGAIN, "EAGAIN")
        k = min(n or len(buf), len(self.inbox))
        buf[:k] = self.inbox[:k]
        del self.inbox[:k]
        return k

    def close(self):
        self.closed = True


class FakePool:
    AF_INET = 2
    SOCK_STREAM = 1

    def __init__(self):
        self.socks = []
        self.take = None
        self.refuse = False
        self.syn_dropped = False
        self.blocked = False
        self.peer_closed = False

    def getaddrinfo(self, host, port, family=0, type=0, proto=0, flags=0):
        if host == "nowhere.invalid":
            raise OSError(-2, "Name or service not known")
        return [(2, 1, 0, "", ("10.0.0.9", port))]

    def socket(self, family, type):
        s = FakeSock(self)
        self.socks.append(s)
        return s

    @property
    def sock(self):
        return self.socks[-1]


def _field(s):
    b = s.encode() if isinstance(s, str) else s
    return bytes((len(b) >> 8, len(b) & 0xFF)) + b


def _remaining(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | 0x80 if n else b)
        if not n:
            return bytes(out)


def publish_packet(topic, payload, retain=False):
    """A QoS 0 PUBLISH as the broker sends it (written out here, independent of the firmware's client)."""
    body = _field(topic) + (payload.encode() if isinstance(payload, str) else payload)
    return bytes((0x31 if retain else 0x30,)) + _remaining(len(body)) + body


def packets(data):
    """Split a byte stream into MQTT packets: [(header byte, body bytes)]."""
    out = []
    i = 0
    while i < len(data):
        h = data[i]
        i += 1
        n = 0
        mul = 1
        while True:
            b = data[i]
            i += 1
            n += (b & 0x7F) * mul
            mul <<= 7
            if not b & 0x80:
                break
        out.append((h, bytes(data[i:i + n])))
        i += n
    return out


def publishes(data):
    """[(topic, payload str, retain)] of the PUBLISH packets in a byte stream."""
    out = []
    for h, body in packets(data):
        if h & 0xF0 == 0x30:
            tl = (body[0] << 8) | body[1]
            out.append((body[2:2 + tl].decode(), body[2 + tl:].decode(), bool(h & 1)))
    return out


class Rig:
    """Service, bus, settings and a stepped clock (wrapping like adafruit_ticks)."""

    def __init__(self, now=1000, **mqtt):
        self.pool = FakePool()
        self.bus = Bus()
        self.settings = Settings()
        cfg = {"enable": True, "host": "broker.lan", "port": 1883}
        cfg.update(mqtt)
        self.settings.doc["mqtt"].update(cfg)
        self.rand = [b"\x00\x00"]
        self.svc = m.MqttService(self.pool, self.bus, self.settings, DEV, web_url=lambda: "http://10.0.0.5/",
                                 rand=lambda n: self.rand[0])
        self.now = now
        self.svc.start()

    def step(self, ms=0, polls=1):
        for _ in range(polls):
            self.now = (self.now + ms) % TICKS_PERIOD
            self.svc.poll(self.now)

    def connack(self, rc=0):
        self.pool.sock.inbox += bytes((0x20, 2, 0, rc))

    def connect(self):
        self.step(polls=2)  # TCP connect started, then done: CONNECT queued
        self.connack()
        self.step(polls=10)

    def reading(self, values):
        self.bus.publish("reading", Reading(self.now, values))


TICKS_PERIOD = 1 << 29


def test_connect_packet_exact_bytes():
    r = Rig(user="u", password="pw", client_id="cid", topic_prefix="p")
    r.step(polls=2)
    pkt = bytes(r.pool.sock.sent)
    # minimqtt's CONNECT: clean session, retained QoS 0 last will "offline" on <prefix>/status, user and password.
    assert pkt == (b"\x10\x29" + b"\x00\x04MQTT\x04" + bytes((0x02 | 0x04 | 0x20 | 0x80 | 0x40,)) + b"\x00\x3c"
                   + b"\x00\x03cid" + b"\x00\x08p/status" + b"\x00\x07offline" + b"\x00\x01u" + b"\x00\x02pw")
    # No user: neither user nor password flag (MQTT 3.1.1 forbids a password without a user).
    r = Rig(password="pw", client_id="c", topic_prefix="t")
    r.step(polls=2)
    pkt = bytes(r.pool.sock.sent)
    assert pkt[9] == 0x26 and pkt.endswith(b"\x00\x08t/status\x00\x07offline")


def test_publish_and_subscribe_exact_bytes():
    r = Rig(topic_prefix="a")
    r.reading({"16.7.0": (15, -1)})
    r.connect()
    pk = packets(r.pool.sock.sent)
    wire = [bytes((h,)) + _remaining(len(b)) + b for h, b in pk]
    assert b"\x31\x0c\x00\x07a/power1.5" in wire
    assert b"\x82\x19\x00\x01\x00\x14homeassistant/status\x00" in wire  # SUBSCRIBE pid 1, QoS 0
    assert b"\xc0\x00" in wire


class _SyncedClock:
    synced = True

    def time(self, now_ms=None):
        return 1_790_000_000


def test_the_state_json_says_when_its_reading_was_taken():
    """Retained state outlives the reading: with a synced clock it carries the reading's UTC time (as
    /history/latest does), computed from the reading's age on ticks."""
    r = Rig(topic_prefix="a")
    r.svc.clock = _SyncedClock()
    r.reading({"16.7.0": (15, -1)})
    r.step(2500)                                  # the reading is 2.5 s old when it goes out
    r.connect()
    states = [p for t, p, _ in publishes(r.pool.sock.sent) if t == "a/state"]
    assert states and states[0] == '{"timestamp":1789999998,"power":1.5}'
    r2 = Rig(topic_prefix="a")                    # no clock (or not synced): no invented time
    r2.reading({"16.7.0": (15, -1)})
    r2.connect()
    assert [p for t, p, _ in publishes(r2.pool.sock.sent) if t == "a/state"][0] == '{"power":1.5}'


def test_session_sequence_on_the_wire():
    r = Rig(user="meter", password="s3cret")
    r.reading({"1.8.0": (123456789, -1), "2.8.0": (5000, 0), "16.7.0": (-2345, -1)})
    r.step()
    s = r.pool.sock
    assert s.blocking == [False] and s.timeouts == [] and not s.sent  # non-blocking connect under way
    assert r.svc.conn_state == m.CONNECTING
    r.step()
    assert s.connected_to == ("10.0.0.9", 1883)
    first = packets(s.sent)
    assert len(first) == 1 and first[0][0] == 0x10 and b"meterplus-" + DEV.encode() in first[0][1]
    r.connack()
    r.step(polls=10)
    assert r.svc.conn_state == m.CONNECTED
    kinds = [h & 0xF0 for h, _ in packets(s.sent)]
    # CONNECT, SUBSCRIBE homeassistant/status, SUBSCRIBE <prefix>/+ (retained totals), SUBSCRIBE the old
    # discovery configs (issue 30: emptied when found), PINGREQ, UNSUBSCRIBE both
    assert kinds[:7] == [0x10, 0x80, 0x80, 0x80, 0xC0, 0xA0, 0xA0]
    pubs = publishes(s.sent)
    topics = [p[0] for p in pubs]
    # Fresh values before the meter goes online, and the device's status online last of all.
    assert topics.index(PREFIX + "/import_total") < topics.index(PREFIX + "/meter") < topics.index(PREFIX + "/status")
    assert pubs[-1] == (PREFIX + "/status", "online", True)
    vals = {t: (p, ret) for t, p, ret in pubs}
    assert vals[PREFIX + "/meter"] == ("online", True)
    assert vals[PREFIX + "/import_total"] == ("12345.6789", True)
    assert vals[PREFIX + "/export_total"] == ("5.000", True)
    assert vals[PREFIX + "/power"] == ("-234.5", True)
    assert json.loads(vals[PREFIX + "/state"][0]) == {"import_total": 12345.6789, "export_total": 5.0, "power": -234.5}
    cfg = json.loads(vals["homeassistant/sensor/wattwaechter_%s/import_total/config" % DEV][0])
    assert cfg["unique_id"] == "wattwaechter_%s_import_total" % DEV and cfg["device"]["configuration_url"] == \
        "http://10.0.0.5/"
    assert b"s3cret" not in json.dumps(r.svc.status()).encode()


def test_partial_sends_reassemble_to_the_same_stream():
    def run(take):
        r = Rig()
        r.pool.take = take
        r.reading({"1.8.0": (1000, 0), "16.7.0": (5, 0)})
        r.connect()
        r.step(polls=400)
        return bytes(r.pool.sock.sent)

    whole = run(None)
    assert run(7) == whole and run(1) == whole
    assert len(publishes(whole)) >= 6


def test_blocked_socket_keeps_bytes_and_gives_up_after_the_stall_limit():
    r = Rig()
    r.reading({"1.8.0": (1000, 0)})
    r.connect()
    r.pool.blocked = True
    r.reading({"1.8.0": (2000, 0)})
    r.step(ms=10000)
    assert r.svc.conn_state == m.CONNECTED
    r.step(ms=m.MqttService.send_stall_ms + 1000)
    assert r.svc.conn_state == m.WAIT_RETRY and r.svc.last_error == m.ERR_SEND_STALLED
    assert r.pool.socks[0].closed


def test_energy_never_falls_and_zero_is_never_sent():
    r = Rig(sendInterval=1)
    r.reading({"1.8.0": (1000, 0), "2.8.0": (50, 0)})
    r.connect()
    for wh in ((999, 0), (0, 0), (10005, -1), (9999, -1), (-5, 0), (1001, 0)):
        r.reading({"1.8.0": wh, "2.8.0": (50, 0)})
        r.step(ms=1000)
        r.step(polls=5)
    sent = [p for t, p, _ in publishes(r.pool.sock.sent) if t == PREFIX + "/import_total"]
    assert sent == ["1.000", "1.0005", "1.001"]
    states = [json.loads(p) for t, p, _ in publishes(r.pool.sock.sent) if t == PREFIX + "/state"]
    assert [s.get("import_total") for s in states] == [1.0, None, None, 1.0005, None, None, 1.001]
    assert r.svc.counters["energy_suppressed"] == 4


def test_guard_survives_a_reconnect():
    r = Rig(sendInterval=1)
    r.reading({"1.8.0": (5000, 0)})
    r.connect()
    r.pool.peer_closed = True
    r.step(ms=10)
    assert r.svc.conn_state == m.WAIT_RETRY and r.svc.last_error == m.ERR_CLOSED
    r.pool.peer_closed = False
    r.reading({"1.8.0": (4000, 0)})
    r.step(ms=5000)
    r.connack()
    r.step(polls=20)
    assert r.svc.conn_state == m.CONNECTED
    assert not [p for t, p, _ in publishes(r.pool.sock.sent) if t == PREFIX + "/import_total"]


def test_stale_meter_makes_sensors_unavailable_at_once():
    r = Rig(sendInterval=60)
    r.reading({"1.8.0": (1000, 0)})
    r.connect()
    n = len(r.pool.sock.sent)
    r.bus.publish("reading", None)
    r.step(ms=5)
    assert publishes(r.pool.sock.sent[n:]) == [(PREFIX + "/meter", "offline", True)]
    n = len(r.pool.sock.sent)
    r.reading({"1.8.0": (1001, 0)})
    r.step(ms=5, polls=5)
    pubs = publishes(r.pool.sock.sent[n:])
    # Fresh values right away (not after 60 s) and before `meter online`: HA never shows 1.000 as current.
    assert pubs[0] == (PREFIX + "/import_total", "1.001", True)
    assert pubs[-1] == (PREFIX + "/meter", "online", True)


def test_no_reading_at_connect_announces_offline_meter_before_status_online():
    r = Rig()
    r.connect()
    assert publishes(r.pool.sock.sent) == [(PREFIX + "/meter", "offline", True), (PREFIX + "/status", "online", True)]


def test_ha_birth_republishes_discovery_and_other_topics_are_ignored():
    r = Rig()
    r.reading({"1.8.0": (1000, 0), "16.7.0": (5, 0)})
    r.connect()
    n = len(r.pool.sock.sent)
    r.pool.sock.inbox += publish_packet("homeassistant/status", "offline", True)
    r.pool.sock.inbox += publish_packet("homeassistant/other", "online", False)
    r.step(polls=3)
    assert not publishes(r.pool.sock.sent[n:])
    r.pool.sock.inbox += publish_packet("homeassistant/status", "online", False)
    r.step(polls=5)
    topics = [t for t, _, _ in publishes(r.pool.sock.sent[n:])]
    assert topics == [ha.config_topic("homeassistant", DEV, "1.8.0"), ha.config_topic("homeassistant", DEV, "16.7.0")]


def test_keepalive_ping_and_dead_broker_detection():
    r = Rig()
    r.connect()
    r.pool.sock.auto_pong = False
    n = len(r.pool.sock.sent)
    r.step(ms=m.MqttService.ping_every_ms)
    assert bytes(r.pool.sock.sent[n:]).endswith(b"\xc0\x00")
    r.pool.sock.inbox += b"\xd0\x00"
    r.step(ms=10)
    r.step(ms=m.MqttService.ping_timeout_ms + 1)
    assert r.svc.conn_state == m.CONNECTED  # PINGRESP arrived
    r.step(ms=m.MqttService.ping_every_ms)
    r.step(ms=m.MqttService.ping_timeout_ms + 1)
    assert r.svc.conn_state == m.WAIT_RETRY and r.svc.last_error == m.ERR_PING_TIMEOUT


def test_connack_timeout_does_not_block_and_backs_off():
    r = Rig()
    r.step(polls=2)
    assert r.svc.conn_state == m.CONNECTING
    r.step(ms=m.MqttService.connack_timeout_ms + 1)
    st = r.svc.status()
    assert st["state"] == "WAIT_RETRY" and st["last_error"] == m.ERR_CONNACK_TIMEOUT and st["reconnect_attempts"] == 1


@pytest.mark.parametrize("rand", [b"\x00\x00", b"\xff\xff"])
def test_backoff_doubles_to_five_minutes_with_jitter(rand):
    r = Rig()
    r.rand[0] = rand
    r.pool.refuse = True
    delays = []
    for _ in range(14):
        r.step(polls=2)
        assert r.svc.conn_state == m.WAIT_RETRY and r.svc.last_error == E_NOTCONN  # lwIP: refused or unreachable
        d = r.svc._retry_at - r.now
        delays.append(d)
        r.step(ms=d - 1)
        assert len(r.pool.socks) == len(delays)  # nothing before the retry time
        r.now += 1
    full = [min(1000 << i, 300000) for i in range(14)]
    if rand == b"\x00\x00":
        assert delays == [f // 2 for f in full]
    else:
        assert delays == full
    assert r.svc.status()["reconnect_attempts"] == 14


def test_refused_credentials_wait_the_longest():
    r = Rig(user="u", password="bad")
    r.step(polls=2)
    r.connack(5)
    r.step()
    st = r.svc.status()
    assert st["state"] == "WAIT_RETRY" and st["last_error"] == 1005 and "not authorised" in st["last_error_message"]
    assert r.svc._retry_at - r.now == 150000  # jitter 0 of the 5 minute cap


def test_settings_change_reconnects_and_disable_goes_off():
    r = Rig()
    r.connect()
    r.settings.doc["mqtt"]["host"] = "other.lan"
    r.bus.publish("settings", ["mqtt.host"])
    r.step()
    first = r.pool.socks[0]
    assert first.closed and publishes(first.sent)[-1] == (PREFIX + "/status", "offline", True)
    assert bytes(first.sent).endswith(b"\xe0\x00")
    assert len(r.pool.socks) == 2 and r.svc.status()["host"] == "other.lan"
    r.settings.doc["mqtt"]["enable"] = False
    r.bus.publish("settings", ["mqtt.enable"])
    r.step()
    assert r.svc.status()["state"] == "OFF" and r.pool.socks[1].closed


def test_language_change_applies_from_the_next_connection():
    r = Rig()
    r.reading({"1.8.0": (1000, 0)})
    r.connect()
    r.settings.doc["language"]["active"] = "en"
    r.bus.publish("settings", ["language.active"])
    r.step(polls=3)
    assert len(r.pool.socks) == 1  # no reconnect for a language change
    r.pool.sock.inbox += publish_packet("homeassistant/status", "online", False)
    r.step(polls=5)
    names = [json.loads(p)["name"] for t, p, _ in publishes(r.pool.sock.sent) if t.endswith("/config")]
    assert names == ["Bezug gesamt", "Bezug gesamt"]
    r.pool.peer_closed = True
    r.step()
    r.pool.peer_closed = False
    r.step(ms=5000)
    r.connack()
    r.step(polls=10)
    names = [json.loads(p)["name"] for t, p, _ in publishes(r.pool.sock.sent) if t.endswith("/config")]
    assert names == ["Import total"]


def test_bad_configurations_fail_without_connecting():
    for cfg, code in (({"host": ""}, m.ERR_NO_HOST), ({"topic_prefix": "a/#"}, m.ERR_CONFIG),
                      ({"sendInterval": 0}, m.ERR_CONFIG)):
        r = Rig(**cfg)
        r.step(ms=1000, polls=3)
        st = r.svc.status()
        assert st["state"] == "FAILED" and st["last_error"] == code and not r.pool.socks
    r = Rig(host="nowhere.invalid")
    r.step()
    assert r.svc.status()["last_error"] == m.ERR_DNS and r.svc.status()["state"] == "WAIT_RETRY"


def test_disabled_by_default():
    r = Rig(enable=False)
    r.step(polls=3)
    assert r.svc.status() == {"enabled": False, "state": "OFF", "host": "broker.lan", "port": 1883,
                              "client_id": "meterplus-" + DEV, "use_tls": False, "last_error": 0,
                              "last_error_message": "", "reconnect_attempts": 0, "retry_in_s": None}


def test_incoming_garbage_and_oversized_packets():
    r = Rig()
    r.connect()
    big = publish_packet("homeassistant/status", "x" * 2000, False)
    r.pool.sock.inbox += big + b"\xd0\x00"
    r.step(polls=20)
    assert r.svc.conn_state == m.CONNECTED and r.svc.counters["rx_skipped"] == 1
    r.pool.sock.inbox += b"\x30\xff\xff\xff\xff\x01"
    r.step()
    assert r.svc.conn_state == m.WAIT_RETRY and r.svc.last_error == m.ERR_PROTOCOL


def test_stop_leaves_cleanly():
    r = Rig()
    r.connect()
    r.svc.stop()
    s = r.pool.sock
    assert s.closed and publishes(s.sent)[-1] == (PREFIX + "/status", "offline", True)


def test_service_runs_inside_micropython():
    """The same session inside MicroPython 1.27, minimqtt included: identical bytes on the wire as under CPython."""
    from tests.mqtt_peers import stage_minimqtt
    from tools.mpvm import MicroVM

    script = '''
import errno
from core.bus import Bus
from core.settings import Settings
from meter.reading import Reading
from services.mqtt import service as m

class S:
    def __init__(self):
        self.sent = bytearray()
        self.inbox = bytearray()
        self.calls = 0
    def setblocking(self, flag):
        pass
    def connect(self, a):
        self.calls += 1
        raise OSError(116 if self.calls == 1 else 127)
    def send(self, d):
        n = min(5, len(d))
        self.sent.extend(bytes(d[:n]))
        self.pong()
        return n
    parsed = 0
    def pong(self):
        data = self.sent
        i = self.parsed
        while i + 2 <= len(data):
            n, mul, j = 0, 1, i + 1
            while j < len(data):
                b = data[j]
                j += 1
                n += (b & 0x7F) * mul
                mul <<= 7
                if not b & 0x80:
                    break
            else:
                return
            if j + n > len(data):
                return
            if data[i] == 0xC0:
                self.inbox.extend(b"\\xd0\\x00")
            i = j + n
            self.parsed = i
    def recv_into(self, b, n=0):
        if not self.inbox:
            raise OSError(errno.EAGAIN)
        k = min(n or len(b), len(self.inbox))
        b[:k] = self.inbox[:k]
        self.inbox = self.inbox[k:]
        return k
    def close(self):
        pass

class P:
    AF_INET = 2
    SOCK_STREAM = 1
    def getaddrinfo(self, h, p, f=0, t=0):
        return [(2, 1, 0, "", ("10.0.0.9", p))]
    def socket(self, f, t):
        self.s = S()
        return self.s

pool = P()
bus = Bus()
st = Settings()
st.doc["mqtt"]["enable"] = True
st.doc["mqtt"]["host"] = "broker.lan"
svc = m.MqttService(pool, bus, st, "024d50000001", web_url=lambda: "http://10.0.0.5/", rand=lambda n: b"\\x00\\x00")
svc.start()
bus.publish("reading", Reading(0, {"1.8.0": (123456789, -1), "16.7.0": (-2345, -1)}))
now = 1000
svc.poll(now)
svc.poll(now)
pool.s.inbox.extend(b"\\x20\\x02\\x00\\x00")
for i in range(300):
    svc.poll(now)
print("@@", svc.conn_state, len(pool.s.sent), svc.last_error, svc.last_error_message)
print("@@", bytes(pool.s.sent).hex())
'''
    with MicroVM(packages=("core", "meter", "services")) as vm:
        stage_minimqtt(vm.root)
        out, _fuel = vm.run(script)
    lines = [line[3:] for line in out.splitlines() if line.startswith("@@ ")]
    assert lines[0].startswith("CONNECTED"), lines
    vm_bytes = bytes.fromhex(lines[1])
    r = Rig()
    r.pool.take = 5
    r.reading({"1.8.0": (123456789, -1), "16.7.0": (-2345, -1)})
    r.connect()
    r.step(polls=300)
    # Same packets; the discovery JSON's key order may differ between the two interpreters' dicts.
    vm_pk, cp_pk = packets(vm_bytes), packets(bytes(r.pool.sock.sent))
    assert [h for h, _ in vm_pk] == [h for h, _ in cp_pk]
    for (h, a), (_, b) in zip(vm_pk, cp_pk):
        if h & 0xF0 == 0x30 and b"/config" in a[:80]:     # a discovery config (not the old configs' SUBSCRIBE)
            tl = (a[0] << 8) | a[1]
            assert a[:2 + tl] == b[:2 + tl] and json.loads(a[2 + tl:]) == json.loads(b[2 + tl:])
        else:
            assert a == b


def test_retained_totals_from_an_earlier_boot_raise_the_floor():
    r = Rig(sendInterval=1)
    r.reading({"1.8.0": (1500, 0), "2.8.0": (300, 0)})
    r.step(polls=2)
    r.pool.sock.auto_pong = False
    r.connack()
    r.step(polls=10)
    kinds = [h for h, _ in packets(r.pool.sock.sent)]
    # CONNECT, SUBSCRIBE birth, SUBSCRIBE <prefix>/+, SUBSCRIBE the old discovery configs (issue 30), PINGREQ:
    # nothing else
    assert kinds == [0x10, 0x82, 0x82, 0x82, 0xC0]
    wild = (PREFIX + "/+").encode()
    assert packets(r.pool.sock.sent)[2][1] == b"\x00\x02" + bytes((0, len(wild))) + wild + b"\x00"
    # The broker answers with what it retained from the last boot, then the PINGRESP.
    r.pool.sock.inbox += publish_packet(PREFIX + "/import_total", "2.000", True)
    r.pool.sock.inbox += publish_packet(PREFIX + "/export_total", "garbage", True)
    r.pool.sock.inbox += publish_packet(PREFIX + "/state", "{}", True)
    r.pool.sock.inbox += b"\xd0\x00"
    r.step(polls=10)
    assert packets(r.pool.sock.sent)[5] == (0xA2, b"\x00\x04" + bytes((0, len(wild))) + wild)
    pubs = publishes(r.pool.sock.sent)
    assert [p for t, p, _ in pubs if t == PREFIX + "/import_total"] == []
    assert [p for t, p, _ in pubs if t == PREFIX + "/export_total"] == ["0.300"]
    assert pubs[-2:] == [(PREFIX + "/meter", "online", True), (PREFIX + "/status", "online", True)]
    r.reading({"1.8.0": (2500, 0), "2.8.0": (300, 0)})
    r.step(ms=1000)
    r.step(polls=5)
    assert [p for t, p, _ in publishes(r.pool.sock.sent) if t == PREFIX + "/import_total"] == ["2.500"]
    assert r.svc.counters["totals_seeded"] == 1


def test_tcp_connect_spreads_over_polls_and_times_out_across_the_ticks_wrap():
    r = Rig(now=TICKS_PERIOD - 2000)
    r.pool.syn_dropped = True  # SYNs go nowhere: lwIP says EALREADY on every check
    r.step()
    for _ in range(4):
        r.step(ms=1000)
        assert r.svc.conn_state == m.CONNECTING  # 5 s deadline, the clock wrapped on the way
    assert r.pool.sock.connect_calls == 5 and not r.pool.sock.closed
    r.step(ms=1001)
    st = r.svc.status()
    assert st["state"] == "WAIT_RETRY" and st["last_error"] == m.ERR_CONNECT_TIMEOUT == 116
    assert "no TCP connection to broker.lan:1883 within 5000 ms" == st["last_error_message"]
    assert r.pool.sock.closed and len(r.pool.socks) == 1
    r.pool.syn_dropped = False
    r.step(ms=1000, polls=3)  # the retry (backoff 500 ms with jitter 0) connects
    assert r.pool.socks[1].connected_to == ("10.0.0.9", 1883)


def test_a_silent_meter_is_not_republished_while_it_goes_stale():
    r = Rig(sendInterval=1)
    r.reading({"1.8.0": (1000, 0), "16.7.0": (50, 0)})
    r.connect()
    for _ in range(9):  # the pipeline declares the meter stale only after 10 s without a telegram
        r.step(ms=1000, polls=2)
    power = [p for t, p, _ in publishes(r.pool.sock.sent) if t == PREFIX + "/power"]
    states = [p for t, p, _ in publishes(r.pool.sock.sent) if t == PREFIX + "/state"]
    assert power == ["50"] and len(states) == 1
    r.reading({"1.8.0": (1001, 0), "16.7.0": (60, 0)})
    r.step(ms=1000, polls=2)
    assert [p for t, p, _ in publishes(r.pool.sock.sent) if t == PREFIX + "/power"] == ["50", "60"]


def test_version_check_and_energy_suppressed_in_describe(monkeypatch):
    from services.mqtt import client as mc

    class Log:
        lines = []

        def log(self, level, msg, *args):
            self.lines.append((level, msg % args))

    monkeypatch.setattr(mc, "VERSION", "9.0.0")
    log = Log()
    svc = m.MqttService(FakePool(), Bus(), Settings(), DEV, log=log)
    svc.start()
    assert ("warning", "adafruit_minimqtt 9.0.0, tested with 8.1.0") in log.lines
    assert svc.describe()["minimqtt_version_mismatch"] == 1
    r = Rig(sendInterval=1)
    assert r.svc.describe()["energy_suppressed"] == 0  # present before anything was held back
    r.reading({"1.8.0": (1000, 0)})
    r.connect()
    r.reading({"1.8.0": (999, 0)})
    r.step(ms=1000, polls=2)
    assert r.svc.describe()["energy_suppressed"] == 1


def test_pinned_versions_agree():
    """requirements.txt (circup, the device), requirements-dev.txt (the host) and the firmware's version check name
    the same adafruit_minimqtt, and the connection manager it imports is listed for the device too."""
    import os
    import re

    from services.mqtt import client as mc

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    dev = open(os.path.join(root, "requirements.txt")).read()
    host = open(os.path.join(root, "requirements-dev.txt")).read()
    assert re.search(r"^adafruit_minimqtt==%s\b" % re.escape(mc.PINNED_VERSION), dev, re.M)
    assert re.search(r"^adafruit-circuitpython-minimqtt==%s\b" % re.escape(mc.PINNED_VERSION), host, re.M)
    cm = re.search(r"^adafruit-circuitpython-connectionmanager==(\S+)", host, re.M).group(1)
    assert re.search(r"^adafruit_connection_manager==%s\b" % re.escape(cm), dev, re.M)
    assert mc.VERSION == mc.PINNED_VERSION  # the host runs the pinned release


def test_dns_only_when_needed():
    """A dropped connection reconnects to the same address without a DNS query; a failed attempt resolves again."""
    r = Rig(sendInterval=1)
    calls = []
    resolve = r.pool.getaddrinfo
    r.pool.getaddrinfo = lambda *a: calls.append(a[0]) or resolve(*a)
    r.connect()
    assert calls == ["broker.lan"]
    r.pool.peer_closed = True
    r.step(ms=10)
    r.pool.peer_closed = False
    r.pool.refuse = True
    r.step(ms=5000, polls=2)  # the retry uses the cached address, and is refused
    assert calls == ["broker.lan"] and r.svc.last_error == E_NOTCONN
    r.pool.refuse = False
    r.step(ms=5000)
    assert calls == ["broker.lan", "broker.lan"]


def test_a_new_connection_sends_the_current_reading_before_going_online():
    """The old connection may have dropped before its values reached the broker: the same reading goes out once
    more on the new connection, before `meter online` and `status online`."""
    r = Rig(sendInterval=60)
    r.reading({"1.8.0": (1000, 0)})
    r.connect()
    r.pool.peer_closed = True
    r.step(ms=10)
    r.pool.peer_closed = False
    r.step(ms=5000, polls=2)
    r.connack()
    r.step(polls=20)
    pubs = publishes(r.pool.sock.sent)
    topics = [t for t, _p, _r in pubs]
    assert topics.index(PREFIX + "/import_total") < topics.index(PREFIX + "/meter") < topics.index(PREFIX + "/status")
    assert pubs[-1] == (PREFIX + "/status", "online", True)


def test_a_qos2_publish_from_the_broker_is_a_protocol_error_not_a_crash():
    """minimqtt asserts on an incoming QoS 2 PUBLISH (we subscribe at QoS 0, a broker must not send one)."""
    r = Rig()
    r.connect()
    body = b"\x00\x14homeassistant/status\x00\x07online"
    r.pool.sock.inbox += bytes((0x34, len(body))) + body
    r.step()
    assert r.svc.conn_state == m.WAIT_RETRY and r.svc.last_error == m.ERR_PROTOCOL


def test_an_old_discovery_config_too_big_to_keep_is_still_emptied_while_seeding():
    """Issue 30's migration found by its topic: the old firmware's configs are 550-700 bytes, over the client's
    rx_max, so their payload is dropped; the topic (kept at the head of the buffer) is enough to empty them.
    A big message elsewhere, a topic too long to keep, or an old config arriving after the seeding change nothing."""
    r = Rig(sendInterval=1)
    r.reading({"1.8.0": (1500, 0)})
    r.step(polls=2)
    r.pool.sock.auto_pong = False
    r.connack()
    r.step(polls=10)
    old = "homeassistant/sensor/meterplus_%s/import_total/config" % DEV
    big = json.dumps({"unique_id": "meterplus_%s_import_total" % DEV, "pad": "x" * 700})
    r.pool.sock.inbox += publish_packet(old, big, True)
    r.pool.sock.inbox += publish_packet("homeassistant/sensor/meterplus_%s/power/config" % DEV, big[:300], True)
    r.pool.sock.inbox += publish_packet("homeassistant/sensor/meterplus_other/power/config", big, True)
    r.pool.sock.inbox += publish_packet("homeassistant/sensor/meterplus_%s/%s/config" % (DEV, "y" * 600), big, True)
    r.pool.sock.inbox += b"\xd0\x00"
    r.step(polls=10)
    assert r.svc.conn_state == m.CONNECTED and r.svc.counters["rx_skipped"] == 3
    assert r.svc.counters["old_ids_removed"] == 2
    r.now += 3500        # past the hold
    r.step(polls=20)
    pubs = publishes(r.pool.sock.sent)
    emptied = [t for t, p, retain in pubs if p == "" and retain]
    assert emptied == [old, "homeassistant/sensor/meterplus_%s/power/config" % DEV]
    new = ha.config_topic("homeassistant", DEV, "1.8.0")
    assert [t for t, _p, _r in pubs].index(new) > [t for t, _p, _r in pubs].index(emptied[-1])
    r.pool.sock.inbox += publish_packet(old, big, True)     # after the seeding: not ours to touch any more
    r.step(polls=5)
    assert r.svc.counters["old_ids_removed"] == 2 and r.svc.counters["rx_skipped"] == 4


@pytest.mark.parametrize("stored_tls, host, tls, sent", [
    (False, "broker.lan", False, "stored"),
    (False, "broker.lan", True, "stored"),        # the same host, encrypted now
    (True, "broker.lan", True, "stored"),
    (True, "broker.lan", False, "withheld"),      # stored for TLS: never in clear, not even to its host
    (False, "other.lan", False, "withheld"),
    (False, "BROKER.lan", False, "withheld"),     # exactly the stored name, as a settings change compares it
    (False, "10.0.0.9", True, "withheld"),
])
def test_a_connection_test_sends_the_stored_password_only_to_the_broker_it_was_stored_for(stored_tls, host, tls,
                                                                                        sent):
    """Issue 36 point 2: a test without a password in the body sent the stored one to any broker named. Now only to
    mqtt.host (exactly; any port: the same machine) and with TLS when it was stored with TLS; else the CONNECT has
    none and the result says the stored one was withheld. A password in the body is always the one sent."""
    r = Rig(user="u", password="stored", use_tls=stored_tls)
    assert r.svc.start_test(host, 1884, tls, "u", None) is None
    assert r.svc.test_result["password"] == sent
    assert r.svc._cfg.password == ("stored" if sent == "stored" else "")
    r.svc.start_test(host, 1884, tls, "u", "typed")
    assert r.svc.test_result["password"] == "given" and r.svc._cfg.password == "typed"
    if not tls:       # the wire, where the fakes carry it (plain TCP)
        r.svc.start_test(host, 1884, False, "u", None)
        r.step(polls=2)
        wire = bytes(r.pool.sock.sent)
        assert (b"stored" in wire) == (sent == "stored") and b"\x00\x01u" in wire
        r.connack(5)
        r.step()
        assert r.svc.test_result["password"] == sent and r.svc.test_result["error"] == 1005
        assert ("goes only to broker.lan" in r.svc.test_result["message"]) == (sent == "withheld")
    nothing = Rig(user="u")                          # nothing stored: none, and nothing to withhold
    nothing.svc.start_test(host, 1884, tls, "u", None)
    assert nothing.svc.test_result["password"] == "none"


def test_status_says_when_the_next_attempt_is_across_the_ticks_wrap():
    """Issue 28 point 1: the page says when the device tries again (status retry_in_s, /system/info retry_s), counted
    wrap-safe: refused credentials wait 150 s (jitter 0) with the tick counter wrapping on the way."""
    r = Rig(user="u", password="bad", now=TICKS_PERIOD - 60000)
    assert r.svc.status()["retry_in_s"] is None
    r.step(polls=2)
    r.connack(5)
    r.step()
    st = r.svc.status()
    assert st["state"] == "WAIT_RETRY" and st["retry_in_s"] == 150
    d = r.svc.describe()
    assert d["error"] == 1005 and d["retry_s"] == 150
    r.step(ms=100000)  # the ticks wrapped meanwhile
    assert r.svc.status()["retry_in_s"] == 50 and r.svc.describe()["retry_s"] == 50


def test_a_connection_test_stores_nothing_says_how_it_went_and_gives_the_connection_back():
    """Issue 28 point 1: "Verbindung testen" for MQTT, like WiFi's: the test runs on the one MQTT connection with the
    given values (non-blocking, the same steps), ends with DISCONNECT (no last will), and the stored settings
    connect again; nothing is written to the settings."""
    r = Rig(user="u", password="stored")
    r.connect()
    assert r.svc.conn_state == m.CONNECTED
    writes = r.settings.writes
    assert r.svc.start_test("other.lan", 1884, False, "v", "wrong") is None
    assert r.svc.test_result["state"] == "testing"
    r.step(polls=2)                                   # the test's TCP connect, CONNECT with the test's credentials
    test_sock = r.pool.sock
    assert b"\x00\x01v\x00\x05wrong" in bytes(test_sock.sent)
    r.connack(5)                                      # not authorised
    r.step()
    assert r.svc.test_result == {"state": "failed", "error": 1005, "host": "other.lan", "port": 1884,
                                 "message": r.svc.test_result["message"], "password": "given"}
    assert test_sock.closed
    r.connect()                                       # the stored settings connect again, at once
    assert r.svc.conn_state == m.CONNECTED and b"\x00\x06stored" in bytes(r.pool.sock.sent)
    assert r.settings.get("mqtt.host") == "broker.lan" and r.settings.writes == writes
    # A test that connects: "ok", and it leaves with DISCONNECT (0xe0), so the broker publishes no will.
    assert r.svc.start_test("broker.lan", 1884, False, "v", None) is None   # None: the stored password (its host)
    r.step(polls=2)
    test_sock = r.pool.sock
    assert b"\x00\x06stored" in bytes(test_sock.sent)
    r.connack(0)
    r.step()
    assert r.svc.test_result == {"state": "ok", "host": "broker.lan", "port": 1884, "password": "stored"}
    assert test_sock.closed and bytes(test_sock.sent).endswith(b"\xe0\x00")
    assert r.svc.start_test("", 1883, False, "", None) is not None          # no host: refused, nothing started
