"""Issue 39: the emulated Pro 3EM pushes NotifyStatus over its /rpc WebSocket as a real one does, so Home Assistant's
Shelly integration (aioshelly, which does not poll while connected) follows the meter. On faithful fake sockets and
the stepped clock: who gets notifications, what they carry (the bytes Shelly.GetStatus gives), how often, one build
per reading for every session, a stale meter ends the sessions, a client that reads nothing is dropped, and the
same bytes inside the MicroPython VM."""

import json

import pytest

from meter.reading import Reading
from services.emulation import shelly_rpc, ws_frames
from services.emulation.meter_view import MeterView
from services.emulation.shelly_ws import ShellyWs
from tests.steppedclock import SteppedClock
from tests.test_shelly_emulation import IDENT, THREE_PHASE, FakeBus, FakeSettings, FakeTcp, _client_frame
from tools.mpvm import MicroVM

GET_STATUS = b'{"id":1,"src":"aios-42","method":"Shelly.GetStatus"}'


def notify_tail(unix_ms, view, with_data):
    """The text of a notification after its head: shelly_rpc.notify_parts joined."""
    return b"".join(shelly_rpc.notify_parts(unix_ms, view, with_data)).decode()


def _values(power_dw, import_dwh=123456789):
    v = dict(THREE_PHASE)
    v["16.7.0"] = (power_dw, -1)
    v["1.8.0"] = (import_dwh, -1)
    return v


def _frames(raw):
    """The server frames in raw bytes: [(opcode, payload)]."""
    out, pos = [], 0
    while pos < len(raw):
        op, n = raw[pos] & 0x0F, raw[pos + 1] & 0x7F
        pos += 2
        if n == 126:
            n = (raw[pos] << 8) | raw[pos + 1]
            pos += 2
        out.append((op, bytes(raw[pos:pos + n])))
        pos += n
    return out


def _texts(sock):
    docs = [json.loads(p) for op, p in _frames(sock.sent) if op == ws_frames.TEXT]
    sock.sent.clear()
    return docs


class Meter:
    """The stepped clock and a bus the meter publishes on."""

    def __init__(self, start=5000, unix_ms=None):
        self.clock = SteppedClock(start=start)
        self.bus = FakeBus(Reading(self.clock(), _values(-3085)))
        self.ws = ShellyWs(self.bus, FakeSettings({"emulation.shelly": True}), IDENT, ticks=self.clock,
                           uptime=lambda: 77, unix_ms=unix_ms)

    def send(self, values, after_ms=1000):
        self.clock.advance(after_ms)
        self.bus.publish("reading", Reading(self.clock(), values))

    def poll(self):
        self.ws.poll(self.clock())

    def session(self, first=GET_STATUS):
        sock = FakeTcp()
        self.ws.adopt(sock, ("10.0.0.3", 5000))
        if first is not None:
            sock.script.append(_client_frame(1, first))
        self.poll()
        return sock


def test_a_new_reading_is_pushed_with_the_em_object_getstatus_gives_and_the_clients_src():
    m = Meter(unix_ms=lambda ticks: 1700000000000 + ticks)
    ha = m.session()
    answer = _texts(ha)
    assert len(answer) == 1 and answer[0]["id"] == 1          # subscribing: only the answer, no push of that reading
    m.send(_values(-1500, 123456800))
    m.poll()
    (note,) = _texts(ha)
    assert set(note) == {"src", "dst", "method", "params"}
    assert note["src"] == IDENT.id and note["dst"] == "aios-42" and note["method"] == "NotifyStatus"
    assert note["params"]["ts"] == 1700000006.0 and set(note["params"]) == {"ts", "em:0", "emdata:0"}
    status = json.loads(shelly_rpc.result("Shelly.GetStatus", None, MeterView(0, _values(-1500, 123456800)), IDENT))
    assert note["params"]["em:0"] == status["em:0"] and note["params"]["emdata:0"] == status["emdata:0"]
    assert note["params"]["em:0"]["total_act_power"] == -150.0
    # the bytes, not only the values: the same number forms (every measurement with its decimals)
    text = notify_tail(1000, MeterView(0, _values(-1500, 123456800)), True)
    assert text.startswith('1.00,"em:0":')
    em_text = shelly_rpc.em_status(MeterView(0, _values(-1500, 123456800)))
    assert ('"em:0":' + em_text) in text and '"total_act_power":-150.000' in em_text


def test_emdata_only_when_the_totals_moved_and_ts_counts_uptime_before_a_clock_sync():
    m = Meter()
    ha = m.session()
    _texts(ha)
    m.send(_values(-1500))                                    # same totals: em:0 only
    m.poll()
    (note,) = _texts(ha)
    assert set(note["params"]) == {"ts", "em:0"} and note["params"]["ts"] == 77.0
    m.send(_values(-1400, 123456790))                         # import moved by 0.1 Wh: emdata:0 as well
    m.poll()
    (note,) = _texts(ha)
    assert note["params"]["emdata:0"]["total_act"] == 12345679.0


def test_a_session_that_named_no_src_gets_no_notification():
    m = Meter()
    quiet = m.session(first=None)
    anonymous = m.session(first=b'{"id":1,"method":"Shelly.GetStatus"}')
    _texts(anonymous)
    m.send(_values(-1500))
    m.poll()
    assert _texts(quiet) == [] and _texts(anonymous) == []


def test_at_most_one_push_in_notify_gap_ms_and_the_newest_reading_goes_out():
    m = Meter()
    ha = m.session()
    _texts(ha)
    m.send(_values(-1000))
    m.poll()
    assert len(_texts(ha)) == 1
    m.send(_values(-1100), after_ms=300)                      # a fast meter: 300 ms later
    m.poll()
    assert _texts(ha) == []
    m.send(_values(-1200), after_ms=300)
    m.poll()
    assert _texts(ha) == []
    m.clock.advance(ShellyWs.notify_gap_ms - 600)             # the gap is over: the newest reading, once
    m.poll()
    (note,) = _texts(ha)
    assert note["params"]["em:0"]["total_act_power"] == -120.0
    m.poll()
    assert _texts(ha) == []                                   # the same reading is never pushed twice


def test_the_gap_is_wrap_safe():
    m = Meter(start=(1 << 29) - 400)
    ha = m.session()
    _texts(ha)
    m.send(_values(-1000), after_ms=100)
    m.poll()
    assert len(_texts(ha)) == 1
    m.send(_values(-1100), after_ms=500)                      # across the wrap, 500 ms later: not yet
    m.poll()
    assert _texts(ha) == []
    m.send(_values(-1200), after_ms=500)                      # 1,000 ms after the last push
    m.poll()
    assert len(_texts(ha)) == 1


def test_one_build_per_reading_for_every_session(monkeypatch):
    calls = []
    real = shelly_rpc.notify_parts

    def counting(ts, view, with_data):
        calls.append(with_data)
        return real(ts, view, with_data)

    monkeypatch.setattr(shelly_rpc, "notify_parts", counting)
    m = Meter()
    a, b = m.session(), m.session(GET_STATUS.replace(b"aios-42", b"aios-43"))
    _texts(a), _texts(b)
    m.send(_values(-1500))
    m.poll()
    assert calls == [0]
    (na,), (nb,) = _texts(a), _texts(b)
    assert na["dst"] == "aios-42" and nb["dst"] == "aios-43" and na["params"] == nb["params"]


def test_a_stale_meter_pushes_the_null_status_then_ends_every_session():
    m = Meter()
    ha, poller = m.session(), m.session(first=None)
    _texts(ha)
    m.clock.advance(10000)                                     # no telegram for 10 s: stale (meter_view.STALE_MS)
    m.poll()
    frames = _frames(ha.sent)
    note = json.loads(frames[0][1])
    assert note["method"] == "NotifyStatus" and note["params"]["em:0"]["total_act_power"] is None
    assert note["params"]["em:0"]["errors"] == ["no_meter_data"]
    assert frames[-1] == (ws_frames.CLOSE, b"\x03\xf5no meter data")         # 1013: try again later
    assert ha.closed and poller.closed and m.ws.sessions() == 0
    assert m.ws.describe()["stale_closed"] == 2


def test_a_meter_that_sends_no_power_is_not_pushed_as_live():
    m = Meter()
    ha = m.session()
    _texts(ha)
    m.send({"1.8.0": (123456789, -1)})
    m.poll()
    assert json.loads(_frames(ha.sent)[0][1])["params"]["em:0"]["total_act_power"] is None and ha.closed


def test_a_client_that_reads_nothing_is_not_buffered_for_and_then_dropped():
    m = Meter()
    ha = m.session()
    _texts(ha)
    ha.send = lambda data: 0                                    # its window is full: it reads nothing
    for i in range(ShellyWs.lag_limit + 3):
        m.send(_values(-1000 - i, 123456789 + i))
        m.poll()
        if ha.closed:
            break
        assert len(m.ws._sessions[0].out) < ShellyWs.out_mark + 1024
    assert ha.closed and m.ws.describe()["slow_reader"] == 1


def test_notifications_do_not_disturb_the_answers():
    m = Meter()
    ha = m.session()
    _texts(ha)
    m.send(_values(-1500))
    ha.script.append(_client_frame(1, b'{"id":7,"src":"aios-42","method":"EM.GetStatus","params":{"id":0}}'))
    m.poll()
    docs = _texts(ha)
    assert [d.get("id", d.get("method")) for d in docs] == [7, "NotifyStatus"]
    assert docs[0]["result"] == docs[1]["params"]["em:0"]


def test_the_same_notification_bytes_inside_the_micropython_vm():
    view = MeterView(0, _values(-1500, 123456800))
    want = [shelly_rpc.notify_head(IDENT.id, "aios-42") + notify_tail(1700000000129, view, w)
            for w in (0, 1)] + [notify_tail(1700000000129, None, 1), notify_tail(5, view, 0)]
    assert want[0].startswith('{"src":"%s","dst":"aios-42","method":"NotifyStatus","params":{"ts":1700000000.12,'
                              % IDENT.id) and want[3].startswith('0.00,"em:0":')
    code = """
from services.emulation import shelly_rpc
from services.emulation.meter_view import MeterView
def notify_tail(unix_ms, view, with_data):
    return b"".join(shelly_rpc.notify_parts(unix_ms, view, with_data)).decode()
view = MeterView(0, %r)
for w in (0, 1):
    print(shelly_rpc.notify_head(%r, "aios-42") + notify_tail(1700000000129, view, w))
print(notify_tail(1700000000129, None, 1))
print(notify_tail(5, view, 0))
""" % (_values(-1500, 123456800), IDENT.id)
    with MicroVM(packages=("core", "meter", "services")) as vm:
        out, _fuel = vm.run(code)
    assert out.strip().split("\n") == want


@pytest.mark.parametrize("window", [1, 3, 7, 60])
def test_a_socket_that_takes_a_few_bytes_at_a_time_still_gets_whole_frames_in_order(window):
    m = Meter()
    ha = m.session()
    _texts(ha)
    real = ha.send
    ha.send = lambda data: real(bytes(data[:window]))         # a small window: it stops inside any part
    for i in range(3):
        m.send(_values(-1000 - 100 * i, 123456789 + i))
        for _ in range(3000):                                 # polls flush what waits
            m.poll()
    docs = _texts(ha)
    assert [d["params"]["em:0"]["total_act_power"] for d in docs] == [-100.0, -110.0, -120.0]
    assert not ha.closed


def test_values_too_wide_for_the_buffer_grow_it_and_keep_the_digits(monkeypatch):
    from services.emulation import em_text

    view = MeterView(0, _values(-1500, 123456800))
    want_em, want_data = em_text.em(view), em_text.emdata(view)
    monkeypatch.setattr(em_text, "_BUF", [bytearray(16)])     # a meter's huge values: past the buffer's end
    assert em_text.em(view) == want_em and em_text.emdata(view) == want_data
    assert len(em_text._BUF[0]) >= len(want_em)
    huge = MeterView(0, {"16.7.0": (-(10 ** 30), 3), "1.8.0": (10 ** 30, 3)})
    text = em_text.em(huge).decode()
    assert '"total_act_power":-' + "1" + "0" * 33 + ".000" in text and json.loads(text)["id"] == 0


def test_a_client_that_only_listens_is_pinged_and_its_pong_keeps_it_across_the_wrap():
    """aiohttp (under aioshelly) pings only after 55 s without a frame from us: while we push, Home Assistant sends
    nothing. The server pings after ping_after_ms; the pong keeps the session (and not "silent" to a newcomer);
    a client that answers no ping is closed at idle_ms as before."""
    m = Meter(start=(1 << 29) - 30000)
    ha, deaf = m.session(), m.session(GET_STATUS.replace(b"aios-42", b"aios-43"))
    _texts(ha), _texts(deaf)
    for second in range(1, 240):
        m.send(_values(-1000 - second, 123456789 + second))
        m.poll()
        pings = [p for op, p in _frames(ha.sent) if op == ws_frames.PING]
        if pings:
            ha.script.append(_client_frame(ws_frames.PONG, b""))   # aiohttp answers a ping at once
        ha.sent.clear()
        deaf.sent.clear()
        if second == 100:                                          # a newcomer replaces the deaf one, never ha
            newcomer = m.session()
            assert deaf.closed and not ha.closed and not newcomer.closed
            deaf = newcomer
            _texts(deaf)
    assert not ha.closed and deaf.closed                           # the newcomer never answered a ping either
    assert m.ws.describe()["pings"] >= 4 and m.ws.describe()["idle_closed"] == 1


def test_a_src_with_quotes_and_unicode_is_escaped_in_dst_and_a_non_text_src_subscribes_nothing():
    m = Meter()
    odd = m.session(b'{"id":1,"src":"a\\"b\\\\c\\u00e4</x>","method":"Shelly.GetStatus"}')
    bad = m.session(b'{"id":1,"src":{"x":1},"method":"Shelly.GetStatus"}')
    long = m.session(b'{"id":1,"src":"' + b"s" * 65 + b'","method":"Shelly.GetStatus"}')
    for s in (odd, bad, long):
        _texts(s)
    m.send(_values(-1500))
    m.poll()
    (note,) = _texts(odd)
    assert note["dst"] == 'a"b\\c\u00e4</x>' and note["method"] == "NotifyStatus"
    assert _texts(bad) == [] and _texts(long) == []          # request_fields keeps only a text src of <= 64
