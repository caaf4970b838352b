"""ModbusServer on the socketpool stand-in (device errno, 8 sockets), driven by pymodbus, pysunspec2 and raw frames."""

import json
import socket
import struct
import threading
import time

import pytest
import socketpool
import sunspec2.modbus.client as ss_client
from adafruit_ticks import ticks_add, ticks_ms
from pymodbus.client import ModbusTcpClient
from pymodbus.exceptions import ConnectionException, ModbusIOException

from core.bus import Bus
from core.settings import Settings
from meter.reading import Reading
from services.modbus.server import ModbusServer, handle_frame
from services.modbus.sunspec_map import BASE, SunSpecMap
from tools.mpvm import MicroVM
from tests.hostproc import free_port

VALUES = {"1.8.0": (123456789, -1), "2.8.0": (4321000, -1), "16.7.0": (-1234, 0), "36.7.0": (-500, 0),
          "14.7.0": (4998, -2)}


class Harness:
    """The server polled in a thread as the supervisor would; the clock can be pushed forward."""

    def __init__(self, enable=True, model=203, thread=True):
        self.bus = Bus()
        self.settings = Settings()
        self.settings.doc["modbus"]["enable"] = enable
        self.settings.doc["modbus"]["model"] = model
        self.port = free_port()
        self.server = ModbusServer(socketpool.SocketPool(None), self.bus, self.settings, host="127.0.0.1",
                                   port_override=self.port, serial="024d50000001", version="0.1.0")
        self.skew_ms = 0
        self.now_ms = None   # when set, the server's clock stands still at this tick (skew_ms is ignored)
        self.polls = 0
        self._run = True
        self.error = None
        self.server.start()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        if thread:
            self._thread.start()

    def _loop(self):
        while self._run:
            try:
                now = self.now_ms
                self.server.poll(ticks_add(ticks_ms(), self.skew_ms) if now is None else now)
            except Exception as exc:   # a test asserts on it instead of a silent dead thread
                self.error = exc
                return
            self.polls += 1
            time.sleep(0.0005)

    def settle(self, polls=5):
        """Wait until the server loop went round a few more times."""
        target = self.polls + polls
        deadline = time.monotonic() + 5
        while self.polls < target and time.monotonic() < deadline and self.error is None:
            time.sleep(0.001)
        assert self.error is None, self.error

    def publish(self, reading):
        self.bus.publish("reading", reading)
        self.settle()

    def set(self, key, value):
        section, name = key.split(".")
        self.settings.doc[section][name] = value
        self.bus.publish("settings", [key])
        self.settle()

    def close(self):
        self._run = False
        if self._thread.is_alive():
            self._thread.join(5)
        self.server.stop()


@pytest.fixture
def srv():
    h = Harness()
    h.publish(Reading(ticks_ms(), dict(VALUES)))
    yield h
    h.close()
    assert socketpool.open_count() == 0


def client(h, **kw):
    c = ModbusTcpClient("127.0.0.1", port=h.port, timeout=2, retries=0, reconnect_delay=0, **kw)
    assert c.connect()
    return c


def raw(h):
    s = socket.create_connection(("127.0.0.1", h.port), timeout=2)
    return s


def mbap(tid, unit, pdu, proto=0, length=None):
    return struct.pack(">HHHB", tid, proto, len(pdu) + 1 if length is None else length, unit) + pdu


def read_req(tid, start, count, fc=3, unit=1):
    return mbap(tid, unit, struct.pack(">BHH", fc, start, count))


def recv_exact(s, n):
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            return out
        out += chunk
    return out


def closed_by_peer(s):
    """True when the server closed the connection (EOF or reset) within the timeout."""
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


# --- the pure frame handler, exact bytes -------------------------------------------------------

def answer(frame, m=None):
    m = m or SunSpecMap(203)
    tx = bytearray(260)
    n = handle_frame(bytearray(frame), len(frame), m, tx)
    return None if n < 0 else bytes(tx[:n])


def test_frame_read_holding_and_input_answer_the_same_bytes():
    m = SunSpecMap(203)
    assert answer(read_req(0x1234, BASE, 2), m) == bytes.fromhex("1234 0000 0007 01 03 04") + b"SunS"
    assert answer(read_req(0x1234, BASE, 2, fc=4), m) == bytes.fromhex("1234 0000 0007 01 04 04") + b"SunS"
    full = answer(read_req(7, BASE + 54, 125), m)
    assert full[:9] == bytes.fromhex("0007 0000 00fd 01 03 fa") and full[9:] == bytes(m.image[108:358])


@pytest.mark.parametrize("frame,reply", [
    (read_req(1, BASE, 0), "0001 0000 0003 01 83 03"),                 # count 0
    (read_req(1, BASE, 126), "0001 0000 0003 01 83 03"),               # count above 125
    (read_req(1, BASE + 178, 2), "0001 0000 0003 01 83 02"),           # runs past the end marker
    (read_req(1, BASE - 1, 1), "0001 0000 0003 01 83 02"),
    (read_req(1, 0, 1, fc=4), "0001 0000 0003 01 84 02"),              # pysunspec2 probes base 0 and 50000
    (read_req(1, 50000, 3), "0001 0000 0003 01 83 02"),
    (mbap(1, 1, bytes.fromhex("06 9c40 0001")), "0001 0000 0003 01 86 01"),   # write single register
    (mbap(1, 1, bytes.fromhex("01 9c40 0001")), "0001 0000 0003 01 81 01"),   # read coils
    (mbap(1, 1, bytes.fromhex("03 9c40")), "0001 0000 0003 01 83 03"),        # FC 3 PDU too short
    (read_req(1, BASE, 1, unit=0), "0001 0000 0005 00 03 02 5375"),
    (read_req(1, BASE, 1, unit=255), "0001 0000 0005 ff 03 02 5375"),
    (read_req(1, BASE, 1, unit=2), "0001 0000 0003 02 83 0b"),         # not us: gateway target failed
])
def test_frame_exceptions(frame, reply):
    assert answer(frame) == bytes.fromhex(reply.replace(" ", ""))


@pytest.mark.parametrize("model,nregs", [(203, 179), (213, 198)])
def test_frame_every_start_and_count_around_the_map(model, nregs):
    """Every window inside the map is served with its bytes; every other one gets 03 or 02, never silence."""
    m = SunSpecMap(model)
    tx = bytearray(260)
    for start in range(BASE - 3, BASE + nregs + 3):
        for count in range(0, 128):
            req = bytearray(read_req(1, start, count, fc=3 + (count & 1)))
            n = handle_frame(req, len(req), m, tx)
            if not 1 <= count <= 125:
                assert bytes(tx[7:n]) == bytes([0x83 + (count & 1), 3])
            elif start < BASE or start + count > BASE + nregs:
                assert bytes(tx[7:n]) == bytes([0x83 + (count & 1), 2])
            else:
                off = (start - BASE) * 2
                assert n == 9 + 2 * count and tx[8] == 2 * count
                assert tx[9:n] == m.image[off:off + 2 * count]


@pytest.mark.parametrize("frame", [
    read_req(1, BASE, 1)[:2] + b"\x00\x01" + read_req(1, BASE, 1)[4:],   # protocol id 1
    mbap(1, 1, b"", length=1),                                           # length below unit id + FC
])
def test_frame_malformed_mbap_closes(frame):
    assert answer(frame) is None


def test_serving_one_read_inside_micropython():
    """The frame handler runs in MicroPython 1.27 and answers with the same bytes."""
    code = (
        "from services.modbus.sunspec_map import SunSpecMap\n"
        "from services.modbus.server import handle_frame\n"
        "import binascii\n"
        "m = SunSpecMap(203)\n"
        "tx = bytearray(260)\n"
        "req = bytearray(binascii.unhexlify(%r))\n"
        "n = handle_frame(req, len(req), m, tx)\n"
        "print(binascii.hexlify(tx[:n]).decode())\n" % read_req(1, BASE + 54, 125).hex()
    )
    with MicroVM(packages=("core", "meter", "services")) as vm:
        out, _fuel = vm.run(code)
    assert out.strip() == answer(read_req(1, BASE + 54, 125), SunSpecMap(203)).hex()


# --- the server on sockets --------------------------------------------------------------------

def test_pymodbus_reads_the_map_with_fc3_and_fc4(srv):
    c = client(srv)
    try:
        hr = c.read_holding_registers(BASE, count=2, device_id=1)
        assert not hr.isError() and struct.pack(">HH", *hr.registers) == b"SunS"
        start = BASE + 54
        hr = c.read_holding_registers(start, count=125, device_id=1)
        ir = c.read_input_registers(start, count=125, device_id=1)
        assert hr.registers == ir.registers and len(hr.registers) == 125
        off = srv.server.map.offset(start, 125)
        assert struct.pack(">125H", *hr.registers) == bytes(srv.server.map.image[off:off + 250])
        w = c.read_holding_registers(BASE + 88, count=5, device_id=1).registers
        assert struct.unpack(">hhhhh", struct.pack(">5H", *w)) == (-1234, -500, -32768, -32768, 0)
    finally:
        c.close()


def test_pymodbus_exceptions(srv):
    c = client(srv)
    try:
        for start, count in ((BASE + 179, 1), (BASE + 170, 20), (0, 3), (50000, 3), (BASE - 10, 11)):
            rr = c.read_holding_registers(start, count=count, device_id=1)
            assert rr.isError() and rr.exception_code == 2, (start, count)
        rr = c.write_register(BASE, 1, device_id=1)
        assert rr.isError() and rr.exception_code == 1
        rr = c.read_coils(0, count=1, device_id=1)
        assert rr.isError() and rr.exception_code == 1
        # the connection survives every exception
        assert not c.read_input_registers(BASE, count=1, device_id=0).isError()
        assert not c.read_input_registers(BASE, count=1, device_id=255).isError()
    finally:
        c.close()
    s = raw(srv)
    try:
        for count in (0, 126):
            s.sendall(read_req(9, BASE, count))
            assert recv_exact(s, 9) == bytes.fromhex("0009 0000 0003 01 83 03".replace(" ", ""))
    finally:
        s.close()


def test_pysunspec2_scans_models_1_and_203(srv):
    dev = ss_client.SunSpecModbusClientDeviceTCP(slave_id=1, ipaddr="127.0.0.1", ipport=srv.port, timeout=3)
    try:
        dev.scan()
        assert sorted(k for k in dev.models if isinstance(k, int)) == [1, 203]
        assert dev.common[0].SN.cvalue == "024d50000001"
        meter = dev.models[203][0]
        assert meter.W.cvalue == -1234
        assert meter.TotWhImp.cvalue == 12345679 and meter.TotWhExp.cvalue == 432100
        assert meter.WphB.cvalue is None
    finally:
        dev.disconnect()   # close() is a no-op for TCP in pysunspec2


def test_model_213_by_setting_and_staleness(srv):
    srv.set("modbus.model", 213)
    dev = ss_client.SunSpecModbusClientDeviceTCP(slave_id=1, ipaddr="127.0.0.1", ipport=srv.port, timeout=3)
    try:
        dev.scan()
        meter = dev.models[213][0]
        assert meter.W.cvalue == -1234.0 and meter.TotWhExp.cvalue == 432100.0
        srv.publish(None)          # the meter went silent
        dev.connect()
        meter.read()
        assert meter.W.cvalue is None and meter.TotWhImp.cvalue is None
    finally:
        dev.disconnect()   # close() is a no-op for TCP in pysunspec2


def test_third_client_is_refused_and_the_two_keep_working(srv):
    before = socketpool.open_count()
    a, b = client(srv), client(srv)
    try:
        assert not a.read_holding_registers(BASE, count=2).isError()
        assert not b.read_holding_registers(BASE, count=2).isError()
        srv.settle()
        assert srv.server.active_connections() == 2
        assert socketpool.open_count() == before + 2
        third = ModbusTcpClient("127.0.0.1", port=srv.port, timeout=2, retries=0, reconnect_delay=0)
        third.connect()   # the kernel completes the handshake; the server then closes it at once
        with pytest.raises((ConnectionException, ModbusIOException, ConnectionError)):
            rr = third.read_holding_registers(BASE, count=2)
            if rr.isError():
                raise ModbusIOException("error reply")
        third.close()
        srv.settle()
        assert srv.server.counters.get("refused", 0) >= 1
        assert socketpool.open_count() == before + 2
        assert not a.read_holding_registers(BASE, count=2).isError()
        assert not b.read_input_registers(BASE, count=2).isError()
        b.close()
        srv.settle(20)
        assert srv.server.active_connections() == 1
        c = client(srv)
        assert not c.read_holding_registers(BASE, count=2).isError()   # the freed slot serves again
        c.close()
    finally:
        a.close()
        b.close()


def test_malformed_mbap_closes_only_that_connection(srv):
    good = client(srv)
    bad = raw(srv)
    try:
        bad.sendall(struct.pack(">HHHB", 1, 7, 6, 1) + struct.pack(">BHH", 3, BASE, 1))   # protocol id 7
        assert closed_by_peer(bad)
        assert not good.read_holding_registers(BASE, count=2).isError()
        bad2 = raw(srv)
        bad2.sendall(struct.pack(">HHHB", 1, 0, 1000, 1) + b"\x03")                      # length 1000
        assert closed_by_peer(bad2)
        bad2.close()
        srv.settle()
        assert srv.server.counters["bad_frames"] == 2
        assert not good.read_input_registers(BASE, count=2).isError()
    finally:
        good.close()
        bad.close()


def test_split_and_pipelined_frames(srv):
    s = raw(srv)
    try:
        req = read_req(5, BASE, 2)
        for b in req:                         # one byte per TCP segment
            s.sendall(bytes([b]))
            time.sleep(0.002)
        assert recv_exact(s, 13) == bytes.fromhex("0005 0000 0007 01 03 04".replace(" ", "")) + b"SunS"
        s.sendall(read_req(6, BASE, 1) + read_req(7, BASE + 1, 1) + read_req(8, 0, 1))
        got = recv_exact(s, 11 + 11 + 9)
        assert got == (bytes.fromhex("0006 0000 0005 01 03 02 5375".replace(" ", ""))
                       + bytes.fromhex("0007 0000 0005 01 03 02 6e53".replace(" ", ""))
                       + bytes.fromhex("0008 0000 0003 01 83 02".replace(" ", "")))
    finally:
        s.close()


def test_idle_client_is_closed_after_five_minutes(srv):
    s = raw(srv)
    try:
        s.sendall(read_req(1, BASE, 1))
        assert len(recv_exact(s, 11)) == 11
        # The server's clock stands still relative to the request's tick: with a running clock plus a skew, a
        # loaded machine taking a second until the check below would push 4:59 past 5:00.
        last = [c.last_ms for c in srv.server._clients if c.sock is not None]
        assert len(last) == 1
        srv.now_ms = ticks_add(last[0], 299000)
        srv.settle()
        s.settimeout(0.3)
        assert not closed_by_peer(s)           # 4:59 idle: still open
        srv.now_ms = ticks_add(last[0], 300500)
        s.settimeout(2)
        assert closed_by_peer(s)
        assert srv.server.counters["idle_closed"] == 1
    finally:
        s.close()


def test_disabled_server_holds_no_socket_and_follows_the_setting():
    h = Harness(enable=False)
    try:
        h.settle()
        assert not h.server.running and socketpool.open_count() == 0
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", h.port), timeout=1)
        h.set("modbus.enable", True)
        assert h.server.running and socketpool.open_count() == 1
        c = client(h)
        assert not c.read_holding_registers(BASE, count=2).isError()
        h.set("modbus.enable", False)
        assert not h.server.running and socketpool.open_count() == 0
        with pytest.raises((ConnectionException, ModbusIOException, ConnectionError)):
            rr = c.read_holding_registers(BASE, count=2)
            if rr.isError():
                raise ModbusIOException("error reply")
        c.close()
        st = json.loads(h.server.status_json())
        assert (st["enabled"], st["running"], st["port"], st["active_connections"]) == (False, False, h.port, 0)
    finally:
        h.close()


def test_out_of_sockets_is_counted_not_fatal(srv):
    hogs = []
    pool = socketpool.SocketPool(None)
    try:
        while socketpool.open_count() < socketpool.MAX_SOCKETS:
            hogs.append(pool.socket())
        s = raw(srv)      # the kernel accepts; the device's accept() finds no socket left
        assert closed_by_peer(s)
        s.close()
        srv.settle()
        assert srv.server.counters["accept_errors"] >= 1 and srv.error is None
    finally:
        for x in hogs:
            x.close()
    c = client(srv)
    assert not c.read_holding_registers(BASE, count=2).isError()
    c.close()


def test_status_shape(srv):
    st = json.loads(srv.server.status_json())
    assert (st["enabled"], st["running"], st["port"]) == (True, True, srv.port)
    w = [r for r in st["registers"] if r["name"] == "W"][0]
    assert (w["register"], w["value"], w["raw"], w["scale_register"]) == (40088, -1234.0, -1234, 40092)


def test_one_transaction_per_client_per_poll():
    h = Harness(thread=False)
    try:
        s = raw(h)
        s.sendall(read_req(1, BASE, 1) + read_req(2, BASE, 1) + read_req(3, BASE, 1))
        time.sleep(0.05)
        s.setblocking(False)
        h.server.poll(ticks_ms())          # accepts: clients are served before newcomers are accepted
        time.sleep(0.05)
        with pytest.raises(BlockingIOError):
            s.recv(1000)
        h.server.poll(ticks_ms())          # answers the first request only
        time.sleep(0.05)
        assert len(s.recv(1000)) == 11
        for tid in (2, 3):
            h.server.poll(ticks_ms())
            time.sleep(0.05)
            assert s.recv(1000)[:2] == struct.pack(">H", tid)
        h.server.poll(ticks_ms())
        with pytest.raises(BlockingIOError):
            s.recv(1000)
        s.close()
    finally:
        h.close()
    assert socketpool.open_count() == 0


def test_ct_ratio_change_rebuilds_the_map_and_keeps_clients(srv):
    c = client(srv)
    try:
        sf = c.read_holding_registers(BASE + 124, count=1).registers[0]
        assert sf == 0
        srv.settings.doc["ctRatio"] = 100
        srv.bus.publish("settings", ["ctRatio"])
        srv.settle()
        rr = c.read_holding_registers(BASE + 116, count=9)   # TotWhImp .. TotWh_SF over the same connection
        assert not rr.isError()
        assert rr.registers[8] == 2
        assert (rr.registers[0] << 16 | rr.registers[1]) == 123457   # 12 345 678.9 Wh in 100 Wh
    finally:
        c.close()


def test_a_reading_older_than_15_s_is_never_served_even_without_the_pipelines_none(srv):
    c = client(srv)
    try:
        assert c.read_holding_registers(BASE + 88, count=1).registers == [0x10000 - 1234]
        srv.skew_ms = 15500          # the pipeline died and published no None
        srv.settle()
        assert c.read_holding_registers(BASE + 88, count=1).registers == [0x8000]
        assert c.read_holding_registers(BASE + 116, count=2).registers == [0, 0]
        srv.skew_ms = 0
        srv.publish(Reading(ticks_ms(), dict(VALUES)))
        assert c.read_holding_registers(BASE + 88, count=1).registers == [0x10000 - 1234]
    finally:
        c.close()


def test_a_reconnect_right_after_a_close_takes_the_freed_slot():
    h = Harness(thread=False)
    try:
        a, b = raw(h), raw(h)
        time.sleep(0.05)
        h.server.poll(ticks_ms())
        h.server.poll(ticks_ms())
        assert h.server.active_connections() == 2
        b.close()
        c = raw(h)                 # arrives before the server has seen b's close
        time.sleep(0.05)
        h.server.poll(ticks_ms())  # one cycle: b's slot is freed, then c is accepted
        assert h.server.active_connections() == 2 and not h.server.counters.get("refused")
        c.sendall(read_req(1, BASE, 2))
        time.sleep(0.05)
        h.server.poll(ticks_ms())
        assert recv_exact(c, 13)[9:] == b"SunS"
        a.close()
        c.close()
    finally:
        h.close()
    assert socketpool.open_count() == 0


def test_a_client_that_stops_reading_blocks_nobody_and_is_closed_when_idle(srv):
    lazy = socket.socket()
    lazy.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
    lazy.connect(("127.0.0.1", srv.port))
    lazy.settimeout(2)
    srv.settle()
    for c in srv.server._clients:
        if c.sock is not None:
            c.sock._sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1024)
    good = client(srv)
    try:
        lazy.setblocking(False)
        sent = 0
        req = read_req(1, BASE, 125)
        for _ in range(2000):          # 2000 x 259 bytes of answers that are never read
            try:
                sent += lazy.send(req)
            except BlockingIOError:
                break
        srv.settle(50)
        assert any(c.txn for c in srv.server._clients)         # its answer waits in the server, unsent
        assert not good.read_holding_registers(BASE, count=125).isError()
        srv.skew_ms = 301000
        srv.settle(20)
        assert srv.server.counters["idle_closed"] >= 1
        assert srv.server.active_connections() == 0            # good was idle as well by then
    finally:
        good.close()
        lazy.close()


def test_modbus_port_setting_moves_the_listener_without_override():
    bus = Bus()
    settings = Settings()
    first, second = free_port(), free_port()
    settings.doc["modbus"].update({"enable": True, "port": first})
    server = ModbusServer(socketpool.SocketPool(None), bus, settings, host="127.0.0.1")
    try:
        server.start()
        assert json.loads(server.status_json())["port"] == first
        socket.create_connection(("127.0.0.1", first), timeout=1).close()
        settings.doc["modbus"]["port"] = second
        bus.publish("settings", ["modbus.port"])
        server.poll(ticks_ms())
        assert json.loads(server.status_json())["port"] == second and socketpool.open_count() == 1
        socket.create_connection(("127.0.0.1", second), timeout=1).close()
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", first), timeout=1)
    finally:
        server.stop()
    assert socketpool.open_count() == 0


def test_a_reading_left_on_the_bus_stays_stale_across_the_tick_wrap():
    """A dead pipeline leaves its last Reading on the bus: once too old it must never be served again, neither when
    its stamp looks like the future (2**28 ms later) nor when the wrap makes it look recent (2**29 ms later)."""
    from tests.steppedclock import SteppedClock

    for polled in (False, True):
        clock = SteppedClock()
        h = Harness(thread=False)
        try:
            reading = Reading(clock(), dict(VALUES))
            h.bus.publish("reading", reading)
            h.server.poll(clock())
            assert h.server.map.source is reading
            if polled:  # the supervisor polls on: the reading is seen stale once, then latched
                for _ in range(520):
                    clock.advance(1 << 20)
                    h.server.poll(clock())
                clock.advance((1 << 29) - 520 * (1 << 20) + 100)  # the stamp is now 100 ms "old" again
            else:
                clock.advance((1 << 28) + 1000)  # no poll in between: the stamp looks 2**28 - 1000 ms ahead
            h.server.poll(clock())
            assert h.server.map.source is None, polled
        finally:
            h.close()


def test_two_idle_connections_cannot_lock_a_third_client_out(srv):
    """The audit's lock-out: two connections that say nothing held both slots for 5 minutes (renewable). After
    shed_idle_ms without a request the longest-idle one gives its slot to a newcomer, which gets its answers. (Two
    addresses: a third connection of an address that holds two takes its own least recently served one's slot.)"""
    a, b = raw_from(srv, "127.0.0.2"), raw_from(srv, "127.0.0.3")
    try:
        a.sendall(read_req(1, BASE, 1))
        assert len(recv_exact(a, 11)) == 11
        b.sendall(read_req(2, BASE, 1))
        assert len(recv_exact(b, 11)) == 11
        last = sorted(c.last_ms for c in srv.server._clients if c.sock is not None)
        srv.now_ms = ticks_add(last[-1], 5000)            # both asked 5 s ago: a newcomer is refused
        srv.settle()
        early = ModbusTcpClient("127.0.0.1", port=srv.port, timeout=2, retries=0, reconnect_delay=0)
        early.connect()
        with pytest.raises((ConnectionException, ModbusIOException, ConnectionError)):
            rr = early.read_holding_registers(BASE, count=2)
            if rr.isError():
                raise ModbusIOException("error reply")
        early.close()
        srv.now_ms = ticks_add(last[-1], 46000)           # 46 s quiet (shed_idle_ms 45 s): the newcomer gets a slot
        srv.settle()
        third = client(srv)
        assert not third.read_holding_registers(BASE, count=2).isError()
        srv.settle()
        assert srv.server.counters["shed"] == 1 and srv.server.active_connections() == 2
        a.settimeout(2)
        assert closed_by_peer(a)                           # the longest-idle (a asked first) went
        b.sendall(read_req(3, BASE, 1))                    # the other one is still served
        assert len(recv_exact(b, 11)) == 11
        third.close()
    finally:
        a.close()
        b.close()


# --- fairness between addresses (issue 26, finding 2) -------------------------------------------

def raw_from(h, source):
    """A connection from another loopback address (127.0.0.x works on Linux)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((source, 0))
    s.settimeout(2)
    s.connect(("127.0.0.1", h.port))
    return s


def _poll(h, now, times=3):
    for _ in range(times):
        time.sleep(0.02)
        h.server.poll(now)


def _ask(h, s, tid, now):
    s.sendall(read_req(tid, BASE, 1))
    _poll(h, now)
    return len(recv_exact(s, 11)) == 11


@pytest.fixture
def quiet_srv():
    h = Harness(thread=False)
    h.bus.publish("reading", Reading(ticks_ms(), dict(VALUES)))
    yield h
    h.close()
    assert socketpool.open_count() == 0


def test_one_address_cannot_hold_both_slots_while_another_waits(quiet_srv):
    h = quiet_srv
    now = ticks_ms()
    a, b = raw_from(h, "127.0.0.2"), raw_from(h, "127.0.0.2")
    try:
        _poll(h, now)
        assert _ask(h, a, 1, now) and _ask(h, b, 2, ticks_add(now, 100))     # both served once, a first
        ha = raw_from(h, "127.0.0.1")
        assert _ask(h, ha, 3, ticks_add(now, 5000))    # five seconds later, not a minute: HA gets a slot at once
        assert h.server.counters["shed"] == 1
        assert closed_by_peer(a)                       # the least recently served of the address with two went
        assert _ask(h, b, 4, ticks_add(now, 5100))     # its other connection keeps being served
    finally:
        for s in (a, b):
            s.close()
        ha.close()


def test_two_addresses_asking_rarely_give_way_to_a_newcomer(quiet_srv):
    h = quiet_srv
    now = ticks_ms()
    a, b = raw_from(h, "127.0.0.2"), raw_from(h, "127.0.0.3")
    try:
        _poll(h, now)
        assert _ask(h, a, 1, now) and _ask(h, b, 2, ticks_add(now, 100))
        early = raw_from(h, "127.0.0.1")
        _poll(h, ticks_add(now, 5000))                 # both asked within shed_idle_ms: the newcomer is refused
        assert closed_by_peer(early)
        early.close()
        ha = raw_from(h, "127.0.0.1")                  # 50 s without a request (not a minute): the slot is HA's
        assert _ask(h, ha, 3, ticks_add(now, 50000))
        assert closed_by_peer(a) and _ask(h, b, 4, ticks_add(now, 50100))
    finally:
        for s in (a, b):
            s.close()
        ha.close()


@pytest.mark.parametrize("addresses", [1, 2, 8])
def test_a_polling_client_keeps_its_slot_while_idlers_from_other_addresses_reconnect(quiet_srv, addresses):
    h = quiet_srv
    now = ticks_ms()
    ha = raw_from(h, "127.0.0.1")
    idlers = []
    try:
        for i in range(12):                            # a minute: HA asks every 5 s, idlers keep connecting
            t = ticks_add(now, i * 5000)
            idlers.append(raw_from(h, "127.0.0.%d" % (2 + i % addresses)))
            _poll(h, t)
            assert _ask(h, ha, i + 1, ticks_add(t, 10)), i
        assert h.server.counters.get("shed", 0) >= 1  # the idlers took turns with each other, never HA's slot
    finally:
        ha.close()
        for s in idlers:
            s.close()


class _NoRoom:
    """A socket budget with no room left beside HTTP's three (core/sockbudget.py)."""

    def __init__(self):
        self.asked = 0
        self.refused = 0

    def could_take(self, n=1, rank=None):
        self.asked += 1
        return False

    def may_take(self, n=1, rank=None):
        self.asked += 1
        self.refused += 1
        return False


def test_a_newcomer_that_would_leave_http_short_is_closed_and_an_idle_poll_asks_nothing(quiet_srv):
    h = quiet_srv
    budget = h.server.budget = _NoRoom()
    now = ticks_ms()
    for _ in range(5):
        h.server.poll(now)
    assert budget.asked == 0                           # nobody came: the budget is not even asked
    s = raw_from(h, "127.0.0.2")
    _poll(h, now)
    assert closed_by_peer(s) and h.server.counters["budget_refused"] == 1 and h.server.active_connections() == 0
    s.close()
