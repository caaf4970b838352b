"""services/api/server.py and http_api.py in-process on the socketpool stand-in with a stepped clock: deadlines,
eviction, contained handler faults, streaming, after_sent, limits, and the settings topic on the bus."""

import json
import socket
import time

import pytest
import socketpool
from adafruit_httpserver import GET, POST, ChunkedResponse, JSONResponse, Route

from core.app import App
from core.bus import Bus
from core.log import Log
from core.settings import Settings
from services.api import routes_settings
from services.api.auth import Tokens
from services.api.service import HttpApi, RateLimiter, required_level
from services.api.server import HardenedServer
from tests.steppedclock import SteppedClock


class Harness:
    """A HardenedServer on 127.0.0.1 driven by hand: poll() when the test says, time when the test says."""

    def __init__(self, routes, dispatch=None):
        self.clock = SteppedClock()
        self.routes = routes
        pool = socketpool.SocketPool(None)
        self.server = HardenedServer(pool, dispatch or self._dispatch, ticks=self.clock)
        self.server.start("127.0.0.1", 0)
        self.port = self.server._sock._sock.getsockname()[1]

    def _dispatch(self, request):
        for r in self.routes:
            ok, params = r.matches(request.method, request.path)
            if ok:
                return r.handler(request, **params)
        return JSONResponse(request, {"error": "Not found"}, status=(404, "Not Found"))

    def poll(self, n=5):
        for _ in range(n):
            self.server.poll()
            time.sleep(0.005)

    def connect(self):
        s = socket.create_connection(("127.0.0.1", self.port), timeout=2)
        self.poll(2)
        return s

    def stop(self):
        self.server.stop()


def read_all(s, h, polls=40):
    s.settimeout(0.05)
    out = b""
    for _ in range(polls):
        h.poll(1)
        try:
            got = s.recv(65536)
        except socket.timeout:
            continue
        if not got:
            break
        out += got
    s.close()
    return out


@pytest.fixture
def hello():
    calls = []

    def handler(request):
        calls.append(request.body)
        return JSONResponse(request, {"hello": True})

    h = Harness([Route("/hi", [GET, POST], handler)])
    h.calls = calls
    yield h
    h.stop()


def test_request_split_across_polls(hello):
    s = hello.connect()
    for part in (b"POST /hi HTTP/1.1\r\nHost: x\r\nContent-Le", b"ngth: 4\r\n\r\n", b"ab", b"cd"):
        s.sendall(part)
        hello.poll(2)
        hello.clock.advance(10)
    answer = read_all(s, hello)
    assert answer.startswith(b"HTTP/1.1 200 OK") and answer.endswith(b'{"hello": true}')
    assert hello.calls == [b"abcd"]


def test_recv_deadline_on_the_stepped_clock(hello):
    s = hello.connect()
    s.sendall(b"GET /hi HTTP/1.1\r\n")
    hello.poll(3)
    hello.clock.advance(HardenedServer.recv_deadline_ms - 1)
    hello.poll(3)
    assert hello.server.connections() == 1  # not yet
    hello.clock.advance(1)
    answer = read_all(s, hello)
    assert answer.startswith(b"HTTP/1.1 408") and hello.calls == []


def test_silent_connection_closed_without_answer_at_deadline(hello):
    s = hello.connect()
    hello.clock.advance(HardenedServer.recv_deadline_ms)
    assert read_all(s, hello) == b""
    assert hello.server.connections() == 0


def test_peer_closing_early_frees_the_slot(hello):
    for _ in range(5):
        s = hello.connect()
        s.sendall(b"GET /hi HT")
        s.close()
        hello.poll(3)
    assert hello.server.connections() == 0
    assert hello.server.counters["peer_closed"] == 5


def test_waiting_client_replaces_a_stalled_one(hello):
    stalled = [hello.connect() for _ in range(HardenedServer.max_connections)]
    for s in stalled:
        s.sendall(b"GET /hi HTTP/1.1\r\n")
    hello.poll(3)
    assert hello.server.connections() == 2
    fresh = socket.create_connection(("127.0.0.1", hello.port), timeout=2)
    fresh.sendall(b"GET /hi HTTP/1.1\r\nHost: x\r\n\r\n")
    hello.poll(3)
    assert hello.server.counters.get("evicted", 0) == 0  # nobody stalled long enough yet
    hello.clock.advance(HardenedServer.stall_ms)
    answer = read_all(fresh, hello)
    assert answer.startswith(b"HTTP/1.1 200") and hello.server.counters["evicted"] == 1
    for s in stalled:
        s.close()


def test_handler_exception_is_500_and_contained():
    def boom(request):
        raise KeyError("bug")

    h = Harness([Route("/boom", GET, boom)])
    try:
        s = h.connect()
        s.sendall(b"GET /boom HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = read_all(s, h)
        assert answer.startswith(b"HTTP/1.1 500")
        assert json.loads(answer.split(b"\r\n\r\n", 1)[1]) == {"error": "Internal error"}
        assert h.server.counters["handler_errors"] == 1
    finally:
        h.stop()


def test_chunked_stream_is_pulled_lazily_and_failing_stream_ends_the_answer():
    pulled = []

    def stream(request):
        def body():
            for i in range(200):
                pulled.append(i)
                yield "%04d," % i + "x" * 95
        return ChunkedResponse(request, body, content_type="text/plain")

    def broken(request):
        def body():
            yield "start"
            raise ValueError("disk")
        return ChunkedResponse(request, body)

    h = Harness([Route("/s", GET, stream), Route("/b", GET, broken)])
    try:
        s = h.connect()
        s.sendall(b"GET /s HTTP/1.1\r\nHost: x\r\n\r\n")
        h.server.poll()
        h.server.poll()
        assert 0 < len(pulled) < 200  # not the whole body at once
        answer = read_all(s, h)
        body = answer.split(b"\r\n\r\n", 1)[1]
        assert body.endswith(b"0\r\n\r\n") and b"0199," in body and len(pulled) == 200
        assert len(body) > 200 * 100
        s = h.connect()
        s.sendall(b"GET /b HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = read_all(s, h)
        assert b"start" in answer and not answer.endswith(b"0\r\n\r\n")
    finally:
        h.stop()


def test_after_sent_runs_once_after_the_answer():
    events = []

    def handler(request):
        request.after_sent = lambda: events.append("after")
        events.append("handler")
        return JSONResponse(request, {"ok": True})

    h = Harness([Route("/r", POST, handler)])
    try:
        s = h.connect()
        s.sendall(b"POST /r HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
        answer = read_all(s, h)
        assert answer.startswith(b"HTTP/1.1 200") and events == ["handler", "after"]
    finally:
        h.stop()


def test_rate_limiter_sliding_window():
    rl = RateLimiter(3, 1000)
    assert [rl.allow(t) for t in (0, 100, 200, 300)] == [True, True, True, False]
    assert rl.allow(999) is False and rl.allow(1000) is True  # the first slot left the window
    assert rl.allow(1050) is False and rl.allow(1100) is True


def test_rate_limiter_wraps_with_ticks():
    rl = RateLimiter(2, 1000)
    top = (1 << 29) - 10
    assert rl.allow(top) and rl.allow(top + 5)
    assert not rl.allow(((top + 500) % (1 << 29)))
    assert rl.allow((top + 1000) % (1 << 29))


def test_rate_limiter_forgets_stamps_older_than_half_the_tick_period():
    """25 requests, then 2**28..2**29 ms of silence: the stale stamps must not look recent (they used to lock the API
    for up to ~75 h, and refused requests are not recorded, so retrying never helped)."""
    for silence in ((1 << 28) + 5000, (1 << 29) - 5000):  # the stamps then appear 2**28-5000 / 5000 ms ahead
        rl = RateLimiter(25, 10000)
        clock = SteppedClock()
        assert all(rl.allow(clock()) for _ in range(25)) and not rl.allow(clock())
        clock.advance(silence)
        assert rl.allow(clock()), silence
        assert rl.used() == 1


def test_rate_limiter_prune_in_poll_keeps_the_window_exact_across_the_wrap():
    rl = RateLimiter(3, 1000)
    clock = SteppedClock()
    for _ in range(3):
        assert rl.allow(clock())
        clock.advance(1)
    for _ in range(520):  # a full period and more, pruned every step as poll() does
        clock.advance(1 << 20)
        rl.prune(clock())
    assert rl.used() == 0
    assert [rl.allow(clock()) for _ in range(4)] == [True, True, True, False]
    clock.advance(999)
    assert not rl.allow(clock())
    clock.advance(1)
    assert rl.allow(clock())


def test_auth_table():
    assert required_level("GET", "/api/v1/system/alive") == 0
    assert required_level("GET", "/api/v1/system/wifi_scan") == 0
    assert required_level("GET", "/api/v1/history/latest") == 1
    assert required_level("GET", "/api/v1/mqtt/ca") == 1
    assert required_level("POST", "/api/v1/mqtt/ca") == 2
    assert required_level("DELETE", "/api/v1/mqtt/ca") == 2
    assert required_level("GET", "/api/v1/modbus/status") == 1
    assert required_level("POST", "/api/v1/system/reboot") == 2
    assert required_level("POST", "/api/v1/auth/tokens/generate") == 2


class _Led:
    enabled = True


def test_settings_post_publishes_changed_keys_and_applies_led(tmp_path):
    bus = Bus()
    ring = bus.subscribe("settings")
    settings = Settings(str(tmp_path / "settings.json"), zone_ok=lambda z: True)
    app = App(bus, settings, Log(echo=None))
    app.led = _Led()
    app.auth = Tokens(str(tmp_path / "tokens.json"))
    app.mem_free = lambda: 10 ** 6
    api = HttpApi(socketpool.SocketPool(None), app, host="127.0.0.1", port=0, route_modules=[routes_settings])
    api.start()
    try:
        port = api._server._sock._sock.getsockname()[1]
        s = socket.create_connection(("127.0.0.1", port), timeout=2)
        body = json.dumps({"ledEnable": False, "medianFilterSize": 0, "ctRatio": 2.5}).encode()
        s.sendall(b"POST /api/v1/settings HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body) + body)
        s.settimeout(0.05)
        answer = b""
        for _ in range(60):
            api.poll(0)
            time.sleep(0.005)
            try:
                got = s.recv(65536)
            except socket.timeout:
                continue
            if not got:
                break
            answer += got
        s.close()
        assert answer.startswith(b"HTTP/1.1 200")
        assert ring.pop() == ["ledEnable", "medianFilterSize", "ctRatio"] and ring.pop() is None
        assert app.led.enabled is False
        assert json.load(open(tmp_path / "settings.json"))["ctRatio"] == 2.5
    finally:
        api.stop()
