"""The emulated Shelly Pro 3EM's pure parts (issue 21 point 1): answers from a MeterView in a real Pro 3EM's field
order with exact digits, a stale meter refused, JSON-RPC frames, the WebSocket codec (RFC 6455's own example), and
the same bytes inside the MicroPython VM; the UDP listener and the WebSocket session on faithful fake sockets."""

import base64
import errno
import json
import os

import pytest

from core.bus import Bus
from meter.reading import Reading
from services.emulation import shelly_rpc, ws_frames
from services.emulation.meter_view import MeterView, view
from services.emulation.shelly_rpc import Identity, RpcError
from services.emulation.shelly_udp import ShellyUdp
from services.emulation.shelly_ws import ShellyWs
from tests.steppedclock import SteppedClock
from tools import vm_fakes
from tools.mpvm import MicroVM

IDENT = Identity("a0b1c2d3e4f5", "Meter Plus", "0.1.0")
THREE_PHASE = {"1.8.0": (123456789, -1), "2.8.0": (4567, 0), "16.7.0": (-3085, -1), "36.7.0": (-1031, -1),
               "56.7.0": (-1030, -1), "76.7.0": (-1024, -1), "32.7.0": (2303, -1), "52.7.0": (2287, -1),
               "72.7.0": (2313, -1), "31.7.0": (452, -2), "51.7.0": (451, -2), "71.7.0": (45, -1),
               "14.7.0": (4999, -2)}
TOTAL_ONLY = {"1.8.0": (1000, 0), "16.7.0": (250, 0)}


def _em(values):
    return json.loads(shelly_rpc.result("EM.GetStatus", {"id": 0}, MeterView(0, values), IDENT))


def test_three_phases_come_out_exactly_in_the_pro_3em_order():
    text = shelly_rpc.result("EM.GetStatus", {"id": 0}, MeterView(0, THREE_PHASE), IDENT)
    doc = json.loads(text)
    keys = list(doc)
    assert keys[:7] == ["id", "a_current", "a_voltage", "a_act_power", "a_aprt_power", "a_pf", "a_freq"]
    assert keys[-5:] == ["n_current", "total_current", "total_act_power", "total_aprt_power",
                         "user_calibrated_phase"]
    assert '"a_act_power":-103.1,' in text and '"c_current":4.500,' in text and '"a_freq":50.0,' in text
    assert '"total_act_power":-308.500,' in text and '"total_aprt_power":308.500,' in text
    assert '"total_current":13.530,' in text                    # 4.52 + 4.51 + 4.5: exact, no float sum
    assert doc["b_voltage"] == 228.7 and doc["a_aprt_power"] == 103.1


def test_a_meter_without_phases_puts_the_total_on_phase_a():
    doc = _em(TOTAL_ONLY)
    assert doc["a_act_power"] == 250.0 and doc["b_act_power"] == 0 and doc["c_act_power"] == 0
    assert doc["total_act_power"] == 250.0 and doc["a_voltage"] is None
    assert doc["a_current"] == 0 and doc["total_current"] == 0


def test_import_and_export_power_become_one_signed_value():
    doc = _em({"1.7.0": (0, 0), "2.7.0": (4321, -1)})
    assert doc["total_act_power"] == -432.1 and doc["a_act_power"] == -432.1


def test_energies_in_wh_with_the_meter_totals_on_phase_a():
    text = shelly_rpc.result("EMData.GetStatus", {"id": 0}, MeterView(0, THREE_PHASE), IDENT)
    assert '"total_act":12345678.90,' in text and '"total_act_ret":4567.00}' in text
    assert json.loads(text)["a_total_act_energy"] == 12345678.9


def test_device_info_says_what_aioshelly_and_batteries_read():
    doc = json.loads(shelly_rpc.device_info(IDENT))
    assert doc["gen"] == 2 and doc["app"] == "Pro3EM" and doc["auth_en"] is False
    assert doc["id"] == "shellypro3em-a0b1c2d3e4f5" and doc["mac"] == "A0B1C2D3E4F5"
    assert list(doc)[:3] == ["name", "id", "mac"]


def test_a_stale_meter_is_refused_never_repeated():
    reading = Reading(1000, THREE_PHASE)
    assert view(reading, 1000 + 9999) is not None
    assert view(reading, 1000 + 10000) is None                 # 10 s old: no power at all
    assert view(reading, 1000 - 5) is None                     # "from the future": very old, past the wrap
    for method in ("EM.GetStatus", "EMData.GetStatus"):
        with pytest.raises(RpcError) as err:
            shelly_rpc.result(method, {"id": 0}, None, IDENT)
        assert err.value.code == shelly_rpc.UNAVAILABLE
    status = json.loads(shelly_rpc.result("Shelly.GetStatus", None, None, IDENT))
    assert status["em:0"]["total_act_power"] is None and status["em:0"]["errors"] == ["no_meter_data"]
    assert shelly_rpc.answer_datagram(b'{"id":1,"method":"EM.GetStatus","params":{"id":0}}', None, IDENT) is None


def test_a_meter_without_power_has_no_em_status():
    with pytest.raises(RpcError):
        shelly_rpc.result("EM.GetStatus", {"id": 0}, MeterView(0, {"1.8.0": (5, 0)}), IDENT)


@pytest.mark.parametrize("method, params, code", [
    ("Shelly.Reboot", None, 404), ("Switch.Set", {"id": 0, "on": True}, 404), ("Sys.SetConfig", {}, 404),
    ("EM.GetStatus", {"id": 1}, 404), ("EM.GetStatus", {"id": "0"}, -103), ("EM.GetStatus", {"id": True}, -103),
    ("EM.GetStatus", [0], -103),
])
def test_nothing_but_readings_is_answered(method, params, code):
    with pytest.raises(RpcError) as err:
        shelly_rpc.result(method, params, MeterView(0, THREE_PHASE), IDENT)
    assert err.value.code == code


def test_every_method_returns_json():
    for method in shelly_rpc.METHODS:
        json.loads(shelly_rpc.result(method, {"id": 0}, MeterView(0, THREE_PHASE), IDENT, 5))
        json.loads(shelly_rpc.result(method, None, None, IDENT) if "EM" not in method or "Config" in method
                   else "{}")


@pytest.mark.parametrize("data", [b"", b"\xff\xfe", b"[]", b"null", b'{"id":1}', b'{"method":7}',
                                  b'{"method":"' + b"x" * 65 + b'"}', b"{" * 5000, b'{"id":1,"method":"Nope"}',
                                  b"[" * 2000 + b"]" * 2000])
def test_a_datagram_that_is_not_a_request_for_us_gets_no_answer(data):
    assert shelly_rpc.answer_datagram(data, MeterView(0, THREE_PHASE), IDENT) is None


def test_a_battery_datagram_gets_the_frame_batteries_parse():
    raw = shelly_rpc.answer_datagram(b'{"id":5,"src":"batt","method":"EM.GetStatus","params":{"id":0}}',
                                     MeterView(0, THREE_PHASE), IDENT)
    doc = json.loads(raw)
    assert list(doc) == ["id", "src", "dst", "result"] and doc["id"] == 5 and doc["dst"] == "batt"
    assert doc["result"]["total_act_power"] == -308.5
    assert len(raw) >= 250                                      # Marstek ignores shorter answers (docs/emulation.md)


def test_websocket_accept_key_is_rfc_6455s_example():
    assert ws_frames.accept_key("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="


def _client_frame(opcode, payload, mask=b"\x01\x02\x03\x04", fin=True):
    n = len(payload)
    b0 = (0x80 if fin else 0) | opcode
    head = bytes((b0, 0x80 | n)) if n < 126 else bytes((b0, 0x80 | 126, n >> 8, n & 255))
    return head + mask + bytes(b ^ mask[i & 3] for i, b in enumerate(payload))


def test_frames_in_and_out():
    data = _client_frame(1, b'{"id":1}') + b"\x81"
    op, fin, payload, used = ws_frames.parse(data, len(data), 1024)
    assert (op, fin, payload) == (1, True, b'{"id":1}') and used == len(data) - 1
    assert ws_frames.parse(data, 5, 1024) is None               # incomplete: wait for more
    long = _client_frame(1, b"x" * 300)
    assert ws_frames.parse(long, len(long), 1024)[2] == b"x" * 300
    assert ws_frames.frame(1, b"ab") == b"\x81\x02ab"
    assert ws_frames.frame(1, b"y" * 300)[:4] == b"\x81\x7e\x01\x2c"
    with pytest.raises(ws_frames.FrameError):
        ws_frames.parse(b"\x81\x02ab", 4, 1024)                # a client frame must be masked
    with pytest.raises(ws_frames.FrameError):
        ws_frames.parse(long, len(long), 100)                  # larger than we take
    with pytest.raises(ws_frames.FrameError):
        ws_frames.parse(b"\x81\xff" + bytes(12), 14, 1024)     # 64-bit length


def test_the_same_bytes_inside_the_micropython_vm():
    cases = [("EM.GetStatus", THREE_PHASE), ("EM.GetStatus", TOTAL_ONLY), ("EMData.GetStatus", THREE_PHASE),
             ("Shelly.GetStatus", THREE_PHASE), ("Shelly.GetConfig", THREE_PHASE)]
    want = [shelly_rpc.result(m, {"id": 0}, MeterView(0, v), IDENT, 7) for m, v in cases]
    code = """
from services.emulation import shelly_rpc
from services.emulation.meter_view import MeterView
ident = shelly_rpc.Identity("a0b1c2d3e4f5", "Meter Plus", "0.1.0")
for m, v in %r:
    print(shelly_rpc.result(m, {"id": 0}, MeterView(0, v), ident, 7))
""" % ([(m, v) for m, v in cases],)
    with MicroVM(packages=("core", "meter", "services")) as vm:
        out, _fuel = vm.run(code)
    assert out.strip().split("\n") == want


# --- the UDP listener and the WebSocket session on fake sockets (CircuitPython's socketpool API) ---

class FakeUdp(vm_fakes.Sock):
    """A socketpool UDP socket (the VM tests' fake, shared inbox): sent keeps what was sent, bind and close are
    recorded, blocking mode is refused."""

    def __init__(self, inbox):
        super().__init__()
        self.inbox = inbox
        self.sent = []
        self.bound = None
        self.closed = False

    def setblocking(self, flag):
        assert flag is False

    def bind(self, addr):
        self.bound = addr

    def sendto(self, data, addr):
        self.sent.append((bytes(data), addr))
        return len(data)

    def close(self):
        self.closed = True


class FakePool:
    AF_INET, SOCK_DGRAM = 2, 2

    def __init__(self):
        self.sockets = []
        self.inbox = []

    def socket(self, family, kind):
        s = FakeUdp(self.inbox)
        self.sockets.append(s)
        return s


class FakeBus(Bus):
    """The real bus holding one reading."""

    def __init__(self, reading=None):
        Bus.__init__(self)
        self.publish("reading", reading)


class FakeSettings(dict):
    def get(self, key, default=None):
        return dict.get(self, key, default)


def test_udp_answers_while_on_and_fresh_stays_silent_when_stale_closes_when_off():
    clock = SteppedClock(start=(1 << 29) - 3000)                # across the tick wrap
    pool, settings = FakePool(), FakeSettings({"emulation.shelly": True, "emulation.shellyUdpPort": 1010,
                                               "emulation.shellyUdpPort2": 0})
    bus = FakeBus(Reading(clock(), THREE_PHASE))
    udp = ShellyUdp(pool, bus, settings, IDENT)
    udp.poll(clock())
    assert [s.bound for s in pool.sockets] == [("0.0.0.0", 1010)]   # port 2 is 0: one socket only
    pool.inbox.append((b'{"id":9,"method":"EM.GetStatus","params":{"id":0}}', ("192.168.1.50", 40000)))
    clock.advance(5000)
    udp.poll(clock())
    data, addr = pool.sockets[0].sent[0]
    assert addr == ("192.168.1.50", 40000) and json.loads(data)["result"]["total_act_power"] == -308.5
    clock.advance(6000)                                          # the reading is now 11 s old
    pool.inbox.append((b'{"id":10,"method":"EM.GetStatus","params":{"id":0}}', ("192.168.1.50", 40000)))
    udp.poll(clock())
    assert len(pool.sockets[0].sent) == 1 and udp.counters["stale_silent"] == 1
    settings["emulation.shelly"] = False
    udp.poll(clock())
    assert not pool.sockets[0].closed                           # read again only when the settings change
    bus.publish("settings", ["emulation.shelly"])
    udp.poll(clock())
    assert pool.sockets[0].closed and udp.describe()["ports"] == ""


def test_a_udp_flood_is_answered_a_few_per_poll():
    pool = FakePool()
    udp = ShellyUdp(pool, FakeBus(Reading(0, THREE_PHASE)), FakeSettings({"emulation.shelly": True,
                                                                         "emulation.shellyUdpPort": 1010}), IDENT)
    udp.poll(0)
    pool.inbox.extend([(b'{"id":1,"method":"EM.GetStatus"}', ("10.0.0.2", 1))] * 20)
    udp.poll(10)
    assert len(pool.inbox) == 20                                # read at most every serve_every_ms
    udp.poll(20)
    assert len(pool.sockets[0].sent) == ShellyUdp.max_per_poll and len(pool.inbox) == 20 - ShellyUdp.max_per_poll


def test_udp_says_since_when_a_battery_asks_and_how_often_for_the_page():
    """Issue 28 point 10: "asking since 12:03 · 1,234 answers": the run's start and the newest answer in uptime
    seconds (no tick wrap), a minute's pause starts a new run; the listening ports as text for /system/info."""
    up = [1000]
    pool = FakePool()
    udp = ShellyUdp(pool, FakeBus(Reading(0, THREE_PHASE)), FakeSettings({"emulation.shelly": True,
                                                                         "emulation.shellyUdpPort": 1010,
                                                                         "emulation.shellyUdpPort2": 2220}),
                    IDENT, uptime=lambda: up[0])
    udp.poll(0)
    d = udp.describe()
    assert d["ports"] == "1010,2220" and d["since_s"] is None and d["last_s"] is None
    ms = 0
    for _ in range(5):                                            # a request every 2 s (of uptime)
        pool.inbox.append((b'{"id":1,"method":"EM.GetStatus"}', ("10.0.0.2", 1)))
        ms += 1000                                                # (the one reading stays fresh on the ticks)
        up[0] += 2
        udp.poll(ms)
    up[0] += 30
    d = udp.describe()
    assert d["answers"] == 5 and d["since_s"] == 38 and d["last_s"] == 30
    up[0] += 61                                                   # quiet for more than a minute, then again
    pool.inbox.append((b'{"id":2,"method":"EM.GetStatus"}', ("10.0.0.2", 1)))
    udp.poll(ms + 1000)
    up[0] += 4
    d = udp.describe()
    assert d["since_s"] == 4 and d["last_s"] == 4 and d["answers"] == 6


class FakeTcp:
    """An adopted CircuitPython socket: recv_into raises EAGAIN when idle and ENOTCONN (128) once the peer left."""

    def __init__(self):
        self.script = []
        self.sent = bytearray()
        self.closed = False

    def setblocking(self, flag):
        pass

    def recv_into(self, buf, n=0):
        if not self.script:
            raise OSError(errno.EAGAIN)
        item = self.script.pop(0)
        if item == "gone":
            raise OSError(128)
        buf[:len(item)] = item
        return len(item)

    def send(self, data):
        self.sent.extend(data)
        return len(data)

    def close(self):
        self.closed = True


def _ws(settings=None):
    s = FakeSettings({"emulation.shelly": True} if settings is None else settings)
    return ShellyWs(FakeBus(Reading(0, THREE_PHASE)), s, IDENT), s


def test_a_websocket_session_answers_rpc_and_pings_and_ends_on_close():
    ws, _ = _ws()
    sock = FakeTcp()
    ws.adopt(sock, ("10.0.0.3", 5000))
    sock.script.append(_client_frame(1, b'{"id":3,"src":"ha","method":"EM.GetStatus","params":{"id":0}}'))
    ws.poll(100)
    assert sock.sent[:2] == b"\x81\x7e"
    answer = json.loads(bytes(sock.sent[4:]))
    assert answer["id"] == 3 and answer["dst"] == "ha" and answer["result"]["a_act_power"] == -103.1
    sock.sent.clear()
    sock.script.append(_client_frame(9, b"hb"))
    ws.poll(200)
    assert bytes(sock.sent) == b"\x8a\x02hb"                    # pong with the ping's payload
    sock.script.append(_client_frame(8, b"\x03\xe8"))
    ws.poll(300)
    assert sock.closed and ws.sessions() == 0


@pytest.mark.parametrize("bad", [b"\x81\x05hello", b"\x81\xff" + bytes(12), bytes((0x81, 0xFE, 0x08, 0x00)) +
                                 bytes(4) + bytes(2048), "gone"])
def test_a_bad_websocket_client_costs_only_its_session(bad):
    ws, _ = _ws()
    sock = FakeTcp()
    ws.adopt(sock, ("10.0.0.3", 5000))
    sock.script.append(bad[:1038] if isinstance(bad, bytes) else bad)
    ws.poll(100)
    assert sock.closed and ws.sessions() == 0


def test_a_bad_rpc_over_websocket_is_an_error_frame_not_a_close():
    ws, _ = _ws()
    sock = FakeTcp()
    ws.adopt(sock, ("10.0.0.3", 5000))
    sock.script.append(_client_frame(1, b"not json"))
    ws.poll(100)
    assert json.loads(bytes(sock.sent[2:]))["error"]["code"] == shelly_rpc.BAD_ARGUMENT and not sock.closed


def test_two_sessions_a_newcomer_replaces_only_one_silent_for_a_minute_across_the_wrap():
    """Issue 26 finding 5: with one session, a newcomer replaced the oldest, so a handshake every few seconds kept
    Home Assistant disconnected."""
    clock = SteppedClock(start=(1 << 29) - 1000)
    s = FakeSettings({"emulation.shelly": True})
    bus = FakeBus(Reading(clock(), THREE_PHASE))
    ws = ShellyWs(bus, s, IDENT, ticks=clock)

    def fresh_reading():                                       # the meter sends on: the sessions stay live
        bus.publish("reading", Reading(clock(), THREE_PHASE))

    ws.poll(clock())
    ha, battery = FakeTcp(), FakeTcp()
    ws.adopt(ha, ("10.0.0.3", 1))
    ws.adopt(battery, ("10.0.0.4", 2))
    assert ws.sessions() == 2 and not ha.closed and not battery.closed
    for _ in range(10):                                        # a stranger's handshake every few seconds
        clock.advance(5000)
        fresh_reading()
        ha.script.append(_client_frame(9, b"hb"))              # Home Assistant pings now and then
        battery.script.append(_client_frame(9, b"hb"))
        ws.poll(clock())
        assert not ws.room()
        stranger = FakeTcp()
        ws.adopt(stranger, ("10.0.0.66", 3))
        assert stranger.closed and not ha.closed and not battery.closed
    assert ws.describe()["refused"] == 10
    ha.script.append(_client_frame(9, b"hb"))
    ws.poll(clock())
    clock.advance(ShellyWs.replace_after_ms)                  # the battery silent for exactly a minute: not yet
    fresh_reading()
    ha.script.append(_client_frame(9, b"hb"))
    ws.poll(clock())
    assert not ws.room()
    clock.advance(1)                                          # over a minute (and across the wrap by now)
    fresh_reading()
    ws.poll(clock())
    assert ws.room()
    newcomer = FakeTcp()
    ws.adopt(newcomer, ("10.0.0.5", 3))
    assert battery.closed and not ha.closed and not newcomer.closed and ws.sessions() == 2
    clock.advance(ShellyWs.idle_ms)                           # silence still ends every session
    fresh_reading()
    ws.poll(clock())
    assert ha.closed and newcomer.closed and ws.sessions() == 0
    s["emulation.shelly"] = False
    late = FakeTcp()
    ws.adopt(late, ("10.0.0.5", 3))                           # switched off: not adopted
    assert late.closed and ws.sessions() == 0


def _fragments(text, sizes, opcode=1):
    out, pos = [], 0
    for i, n in enumerate(sizes):
        last = i == len(sizes) - 1
        out.append(_client_frame(opcode if i == 0 else 0, text[pos:pos + n] if not last else text[pos:], fin=last))
        pos += n
    return out


def test_a_fragmented_message_is_reassembled_and_answered():
    """Issue 26 finding 11: FIN=0 plus continuation frames were answered "Malformed JSON"."""
    ws, _ = _ws()
    sock = FakeTcp()
    ws.adopt(sock, ("10.0.0.3", 5000))
    msg = b'{"id":3,"src":"ha","method":"EM.GetStatus","params":{"id":0}}'
    parts = _fragments(msg, [10, 20, 5])
    sock.script.append(parts[0] + parts[1] + _client_frame(9, b"hb") + parts[2])   # a ping between fragments
    ws.poll(100)
    assert sock.sent[:4] == b"\x8a\x02hb"                    # the ping answered at once
    answer = json.loads(bytes(sock.sent[8:]))
    assert answer["id"] == 3 and answer["result"]["a_act_power"] == -103.1 and not sock.closed
    sock.sent.clear()
    sock.script.append(_client_frame(1, b'{"id":4,"src":"ha","method":"Shelly.GetDeviceInfo"}'))   # unfragmented after
    ws.poll(200)
    assert json.loads(bytes(sock.sent[4:] if sock.sent[1] == 126 else sock.sent[2:]))["id"] == 4


@pytest.mark.parametrize("frames", [
    [_client_frame(0, b'{"id":1}')],                                            # a continuation with nothing begun
    [_client_frame(1, b'{"id"', fin=False), _client_frame(1, b':1}')],         # a new message inside one
    [_client_frame(1, b"x" * 600, fin=False), _client_frame(0, b"y" * 600)],   # over max_frame summed
    [_client_frame(9, b"hb", fin=False)],                                       # a fragmented control frame
    [_client_frame(3, b"?")],                                                   # a reserved opcode
], ids=["orphan", "nested", "too-long", "control", "reserved"])
def test_a_broken_fragment_sequence_ends_only_its_session(frames):
    ws, _ = _ws()
    sock = FakeTcp()
    ws.adopt(sock, ("10.0.0.3", 5000))
    sock.script.extend(frames)
    for t in range(len(frames)):
        ws.poll(100 + t)
    assert sock.closed and ws.sessions() == 0 and ws.describe()["protocol_errors"] == 1


def test_pipelined_requests_are_answered_between_not_dropped_as_a_slow_reader():
    """Issue 26 finding 11: every answer of one read waited in the output; 20 large answers at once (over max_out)
    ended the session as a "slow reader" although the client reads all it is sent."""
    ws, _ = _ws()
    sock = FakeTcp()
    ws.adopt(sock, ("10.0.0.3", 5000))
    one = _client_frame(1, b'{"id":1,"method":"Shelly.GetStatus"}')
    many = one * (1038 // len(one))
    sock.script.append(many)
    ws.poll(100)
    assert not sock.closed and ws.describe().get("slow_reader", 0) == 0
    assert len(sock.sent) > ShellyWs.max_out and ws.describe()["answers"] == 1038 // len(one)


def test_an_exception_while_answering_is_an_error_frame_never_out_of_poll(monkeypatch):
    """Issue 26 finding 8: what fails on a token-free path is a bad request (CircuitPython's deep-nesting error is a
    RuntimeError), not an exception out of poll() that the supervisor logs and restarts on."""
    def deep(*_a):
        raise RuntimeError("maximum recursion depth exceeded")

    monkeypatch.setattr(shelly_rpc, "result", deep)
    ws, _ = _ws()
    sock = FakeTcp()
    ws.adopt(sock, ("10.0.0.3", 5000))
    sock.script.append(_client_frame(1, b'{"id":3,"method":"EM.GetStatus","params":{"id":0}}'))
    ws.poll(100)
    assert json.loads(bytes(sock.sent[2:]))["error"]["code"] == shelly_rpc.BAD_ARGUMENT and not sock.closed


def test_the_padding_rule_is_cited_in_the_docs():
    with open(os.path.join(os.path.dirname(__file__), "..", "docs", "emulation.md"), encoding="utf-8") as f:
        text = f.read()
    assert "250" in text and "1010" in text and "2220" in text
    assert base64  # (imported for the frames above)


def test_the_loader_holds_the_shelly_code_only_while_on():
    import sys

    from core.app import App
    from core.bus import Bus
    from core.log import Log
    from core.settings import Settings
    from core.supervisor import Supervisor
    from services.emulation import wiring

    app = App(Bus(), Settings(), Log())
    app.supervisor = Supervisor(lambda: 0)
    app.pool = FakePool()
    app.device_id = "a0b1c2d3e4f5"
    app.env = lambda name, default: default
    for name in ("shelly_rpc", "shelly_udp", "shelly_ws", "em_text", "ws_frames"):
        sys.modules.pop("services.emulation." + name, None)
    wiring.wire(app)
    app.emulation.poll(0)
    assert app.shelly_udp is None and "services.emulation.shelly_rpc" not in sys.modules
    app.settings.update({"emulation": {"shelly": True, "shellyUdpPort": 1010, "shellyUdpPort2": 0}})
    app.bus.publish("settings", ["emulation"])
    app.emulation.poll(10)
    assert app.shelly_ident.id == "shellypro3em-a0b1c2d3e4f5" and app.shelly_ws is not None
    assert [s.bound for s in app.pool.sockets] == [("0.0.0.0", 1010)]       # the listener polls through the loader
    app.settings.update({"emulation": {"shelly": False}})
    app.bus.publish("settings", ["emulation"])
    app.emulation.poll(20)
    assert app.shelly_udp is None and app.pool.sockets[0].closed
    gone = ("shelly_rpc", "shelly_udp", "shelly_ws", "em_text", "ws_frames", "meter_view")
    assert not [n for n in sys.modules if n.split(".")[-1] in gone]          # the routes module stays: it is small


def test_a_readings_answer_is_built_once_and_a_new_reading_is_answered_anew(monkeypatch):
    """EM.GetStatus for the same reading (the battery, Home Assistant and HTTP all ask each second) is built once;
    the next reading, or the same reading with other energies, is built again and says the new values."""
    calls = []
    real = shelly_rpc.em_status

    def counting(v):
        calls.append(v.ts_ms)
        return real(v)

    monkeypatch.setattr(shelly_rpc, "em_status", counting)
    ident = Identity("024d50000001")
    first = MeterView(1000, {"16.7.0": (500, 0), "1.8.0": (1000, 0)})
    a = shelly_rpc.result("EM.GetStatus", {"id": 0}, first, ident)
    b = shelly_rpc.result("EM.GetStatus", {"id": 0}, MeterView(1000, {"16.7.0": (500, 0), "1.8.0": (1000, 0)}), ident)
    assert a == b and calls == [1000]
    c = shelly_rpc.result("EM.GetStatus", {"id": 0}, MeterView(2000, {"16.7.0": (-250, 0), "1.8.0": (1000, 0)}), ident)
    assert calls == [1000, 2000] and json.loads(c)["total_act_power"] == -250
    d = shelly_rpc.result("EM.GetStatus", {"id": 0}, MeterView(2000, {"16.7.0": (-250, 0), "1.8.0": (1001, 0)}), ident)
    assert calls == [1000, 2000, 2000] and d == c   # energies differ (a floor filter): built again
