"""services/api/server.py with adafruit_httpserver 4.8.2 inside the MicroPython VM, on scripted fake sockets that
behave like CircuitPython's (EAGAIN when idle, ENOTCONN 128 from a closed peer): device-true code paths."""

import os
import shutil

import adafruit_httpserver

from tools.mpvm import MicroVM

PRELUDE = r"""
import sys, time, errno
if not hasattr(time, "monotonic"):
    # MicroPython's time has no monotonic (CircuitPython's has, and no ticks_ms): adafruit_httpserver needs it.
    class _Time:
        sleep = time.sleep
        def monotonic(self):
            return time.ticks_ms() / 1000
        def monotonic_ns(self):
            return time.ticks_ms() * 1000000
    sys.modules["time"] = _Time()

class FakeConn:
    def __init__(self, script):
        self.script = list(script)   # bytes to deliver, "wait" (one EAGAIN), "close" (ENOTCONN as on lwIP)
        self.sent = bytearray()
        self.closed = False
    def setblocking(self, flag):
        pass
    def recv_into(self, buf, n=0):
        if not self.script:
            raise OSError(errno.EAGAIN)
        item = self.script[0]
        if item == "wait":
            self.script.pop(0)
            raise OSError(errno.EAGAIN)
        if item == "close":
            raise OSError(128)
        k = min(len(item), n or len(buf))
        buf[:k] = item[:k]
        if k < len(item):
            self.script[0] = item[k:]
        else:
            self.script.pop(0)
        return k
    def send(self, data):
        self.sent.extend(data)
        return len(data)
    def close(self):
        self.closed = True

class FakeListen:
    def __init__(self):
        self.queue = []
    def setsockopt(self, *a):
        pass
    def bind(self, addr):
        pass
    def listen(self, n):
        pass
    def setblocking(self, flag):
        pass
    def accept(self):
        if not self.queue:
            raise OSError(errno.EAGAIN)
        return self.queue.pop(0), ("192.168.1.20", 50000)
    def close(self):
        pass

class FakePool:
    AF_INET = 2
    SOCK_STREAM = 1
    SOL_SOCKET = 1
    SO_REUSEADDR = 2
    def __init__(self):
        self.listener = FakeListen()
    def socket(self, *a):
        return self.listener
    def getaddrinfo(self, host, port, *a):
        return [(2, 1, 0, "", (host, port))]

from adafruit_httpserver import GET, POST, JSONResponse, ChunkedResponse, Route
from services.api.answers import query, read_json
from services.api.server import HardenedServer

T = [1000]
def hi(request):
    return JSONResponse(request, {"q": query(request, "q"), "body": read_json(request, required=False)})
def stream(request):
    def body():
        for i in range(3):
            yield "part%d;" % i
    return ChunkedResponse(request, body, content_type="text/plain")
def boom(request):
    raise KeyError("bug")
STEPS = []
def steps(request):
    try:
        for i in range(2):
            STEPS.append(i)
            yield None
        yield JSONResponse(request, {"steps": len(STEPS)})
    finally:
        STEPS.append("closed")
ROUTES = [Route("/hi", [GET, POST], hi), Route("/s", GET, stream), Route("/boom", GET, boom),
          Route("/steps", GET, steps)]
def dispatch(request):
    # By plain path: the VM's re has no match.groups() that Route.matches needs (CircuitPython's full build has).
    for r in ROUTES:
        if r.path == request.path and request.method in r.methods:
            return r.handler(request)
    return JSONResponse(request, {"error": "Not found"}, status=(404, "Not Found"))

pool = FakePool()
srv = HardenedServer(pool, dispatch, ticks=lambda: T[0])
srv.start("0.0.0.0", 80)

def serve(script, polls=6, advance=0):
    c = FakeConn(script)
    pool.listener.queue.append(c)
    for _ in range(polls):
        srv.poll()
        T[0] += advance
    return c

def show(name, c):
    out = bytes(c.sent)
    print(name, out[:12].decode(), c.closed, out.split(b"\r\n\r\n", 1)[-1].decode().replace("\r\n", "|"))
"""

CASES = r"""
show("split", serve([b"GET /hi?q=a%20b HT", "wait", b"TP/1.1\r\nHost: x\r\n\r\n"]))
body = b'{"x": [1, 2]}'
show("post", serve([b"POST /hi HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body),
                    "wait", body]))
show("timeout", serve([b"GET /hi HTTP/1.1\r\n"], polls=4, advance=100))
show("closed", serve([b"GET /h", "close"]))
show("stream", serve([b"GET /s HTTP/1.1\r\n\r\n"]))
show("boom", serve([b"GET /boom HTTP/1.1\r\n\r\n"]))
# An early answer (413, 400) drains the input for drain_ms (1 s) before closing: six polls 250 ms apart outlast it.
show("big", serve([b"POST /hi HTTP/1.1\r\nContent-Length: 99999\r\n\r\n"], polls=6, advance=250))
show("badjson", serve([b"POST /hi HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 1\r\n\r\n{"]))
show("garbage", serve([b"\x01\x02\r\n\r\n"], advance=250))
show("http10", serve([b"GET /hi HTTP/1.0\r\n\r\n"]))
show("steps", serve([b"GET /steps HTTP/1.1\r\n\r\n"]))
print("stepslog", STEPS)
print("open", srv.connections(), sorted(srv.counters.items()))
show("nospace", serve([b"GET /hi?q=1 HTTP/1.1\r\nHost:x\r\nX-A:\x0bTransfer-Encoding: chunked\r\n\r\n"]))
show("dupcl", serve([b"POST /hi HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n{}"], advance=250))
show("digits", serve([b"POST /hi HTTP/1.1\r\nContent-Length: \xd9\xa2\r\n\r\n{}"], advance=250))
show("spacecolon", serve([b"GET /hi HTTP/1.1\r\nHost : x\r\n\r\n"], advance=250))
# Shedding: two slow clients hold both slots; three more wait with nothing to say, then an honest one.
held = [serve([b"GET /hi HTTP/1.1\r\n"], polls=1) for _ in range(2)]
idle = []
for _ in range(3):
    c = FakeConn([])
    pool.listener.queue.append(c)
    idle.append(c)
honest = FakeConn([b"GET /hi?q=ok HTTP/1.1\r\n\r\n"])
pool.listener.queue.append(honest)
srv.poll()
show("honest", honest)
print("shed", srv.connections(), [c.closed for c in held], [c.closed for c in idle], srv.counters.get("refused"))
# Across the wrap: a stamp older than 2**28 ms is expired, not "in the future".
T[0] = (1 << 29) - 10
late = serve([b"GET /hi HTTP/1.1\r\n"], polls=1)
T[0] = (T[0] + (1 << 28) + 1000) % (1 << 29)
srv.poll()
srv.poll()
show("wrap", late)
"""


def test_server_paths_in_micropython_vm():
    vm = MicroVM(packages=("core", "services"))
    try:
        shutil.copytree(os.path.dirname(adafruit_httpserver.__file__), os.path.join(vm.root, "adafruit_httpserver"),
                        ignore=shutil.ignore_patterns("__pycache__"))
        with open(os.path.join(vm.root, "traceback.py"), "w") as f:
            f.write("def print_exception(e):\n    pass\n")  # CircuitPython has traceback; the VM does not
        out, _fuel = vm.run(PRELUDE + CASES)
    finally:
        vm.close()
    lines = dict(line.split(" ", 1) for line in out.strip().splitlines())
    assert lines["split"] == 'HTTP/1.1 200 True {"q": "a b", "body": null}'
    assert lines["post"] == 'HTTP/1.1 200 True {"q": null, "body": {"x": [1, 2]}}'
    assert lines["timeout"] == 'HTTP/1.1 408 True {"error": "Request timeout", "code": "timeout"}'
    assert lines["closed"] == " True "  # no answer to a peer that left
    assert lines["stream"] == "HTTP/1.1 200 True 6|part0;|6|part1;|6|part2;|0||"
    assert lines["steps"] == 'HTTP/1.1 200 True {"steps": 2}'   # an answer made in steps (a generator)
    assert lines["stepslog"] == "[0, 1, 'closed']"
    assert lines["boom"] == 'HTTP/1.1 500 True {"error": "Internal error", "code": "device_error"}'
    assert lines["big"].startswith("HTTP/1.1 413 True ")
    assert lines["badjson"] == 'HTTP/1.1 400 True {"error": "Malformed JSON", "code": "bad_request"}'
    assert lines["garbage"] == 'HTTP/1.1 400 True {"error": "Malformed request line", "code": "bad_request"}'
    assert lines["http10"] == 'HTTP/1.1 200 True {"q": null, "body": null}'
    assert lines["open"].startswith("0 ")
    assert lines["nospace"] == 'HTTP/1.1 200 True {"q": "1", "body": null}'
    assert lines["dupcl"] == 'HTTP/1.1 400 True {"error": "Invalid Content-Length", "code": "bad_request"}'
    assert lines["digits"] == 'HTTP/1.1 400 True {"error": "Invalid Content-Length", "code": "bad_request"}'
    assert lines["spacecolon"] == 'HTTP/1.1 400 True {"error": "Malformed header line", "code": "bad_request"}'
    assert lines["honest"] == 'HTTP/1.1 200 True {"q": "ok", "body": null}'
    # all from one address: the first idle newcomer waits in the momentary place for its request (_own_grace)
    assert lines["shed"] == "3 [False, False] [False, True, True] 2"
    assert lines["wrap"] == 'HTTP/1.1 408 True {"error": "Request timeout", "code": "timeout"}'
