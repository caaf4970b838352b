"""HttpApi's request guards in-process on the socketpool stand-in with a stepped clock: the rate limit (what counts,
the alive reserve, Retry-After, recovery across the tick wrap), the Host rule (DNS rebinding), the same-origin rule
for state changes (CSRF) and the absence of CORS headers."""

import json

import pytest
import socketpool
from adafruit_httpserver import DELETE, GET, POST, JSONResponse, Route
from adafruit_httpserver.headers import Headers

from core.app import App
from core.bus import Bus
from core.log import Log
from core.settings import Settings
from services.api import routes_auth
from services.api.auth import Tokens
from services.api.origin import cross_site, device_names, host_allowed
from services.api.service import HttpApi
from tests.inproc import exchange, server_port, split_answer
from tests.steppedclock import SteppedClock

DEVICE_ID = "024d50000001"


class _Routes:
    """Stand-ins for the real routes: alive, a READ endpoint and a state-changing one that records its calls."""

    def __init__(self):
        self.changes = []

    def routes(self, app):
        def alive(request):
            return JSONResponse(request, {"alive": True})

        def settings(request):
            return JSONResponse(request, {"ok": True})

        def change(request):
            self.changes.append(request.method)
            return JSONResponse(request, {"rebooting": True})

        def broken(request):
            raise RuntimeError("maximum recursion depth exceeded")   # CircuitPython's deep-nesting error

        return [Route("/api/v1/system/alive", GET, alive), Route("/api/v1/settings", GET, settings),
                Route("/rpc/broken", GET, broken), Route("/api/v1/broken", GET, broken),
                Route("/api/v1/system/reboot", POST, change), Route("/api/v1/mqtt/ca", [GET, POST, DELETE], change)]


class Api:
    """An HttpApi on 127.0.0.1 whose time the test steps; send() returns (status, headers, body)."""

    def __init__(self, tmp_path, rate_limit=25):
        self.clock = SteppedClock()
        settings = Settings(str(tmp_path / "settings.json"), zone_ok=lambda z: True)
        app = App(Bus(), settings, Log(echo=None))
        app.device_id = DEVICE_ID
        app.auth = Tokens(str(tmp_path / "tokens.json"))
        app.mem_free = lambda: 10 ** 6
        self.app = app
        self.fake = _Routes()
        self.api = HttpApi(socketpool.SocketPool(None), app, host="127.0.0.1", port=0, rate_limit=rate_limit,
                           route_modules=[self.fake, routes_auth], ticks=self.clock)
        self.api.accept_every_ms = 0   # time stands still between this harness's polls: ask the listener every poll
        self.api.start()
        self.port = server_port(self.api)
        self.host = "127.0.0.1:%d" % self.port

    def poll(self):
        self.api.poll(self.clock())

    def silence(self, ms, step=1 << 20):
        """Let ms pass with the supervisor polling (coarsely: every step ms)."""
        while ms > 0:
            self.clock.advance(min(ms, step))
            ms -= step
            self.poll()

    def raw(self, data):
        status, headers, body = split_answer(exchange(self.port, data, self.poll, polls=200))
        return status, headers, json.loads(body) if body else None

    def send(self, method, path, headers=None, body=b"", host=True):
        lines = ["%s %s HTTP/1.1" % (method, path)]
        if host is not None:
            lines.append("Host: %s" % (self.host if host is True else host))
        for k, v in (headers or {}).items():
            lines.append("%s: %s" % (k, v))
        if body or method == "POST":
            lines.append("Content-Length: %d" % len(body))
        return self.raw(("\r\n".join(lines) + "\r\n\r\n").encode() + body)

    def status(self, method, path, **kw):
        return self.send(method, path, **kw)[0]

    def stop(self):
        self.api.stop()


@pytest.fixture
def api(tmp_path):
    a = Api(tmp_path)
    yield a
    a.stop()


# --- token-free errors (issue 26 finding 8) ---


def test_a_strangers_failure_is_counted_never_logged_and_the_owners_is_logged(api):
    lines = api.app.log.entries
    before = len(list(lines()))
    for path in ("/rpc/broken", "/api/v1/broken", "/rpc/broken"):
        status, _h, body = api.send("GET", path)
        assert status == 500 and body["code"] == "device_error"
    assert len(list(lines())) == before                           # no line from a request without a valid token
    d = api.api.describe()
    assert d["open_errors"] == 3 and d["last_open_error"] == "GET /rpc/broken: RuntimeError"
    assert d.get("handler_errors", 0) == 0
    read, write = api.app.auth.generate(api.clock())
    api.app.auth.confirm(write, api.clock())
    status, _h, _b = api.send("GET", "/api/v1/broken", headers={"Authorization": "Bearer " + read})
    assert status == 500
    assert any("RuntimeError" in e[2] for e in lines())           # the owner's failure is logged as before
    assert api.api.describe()["open_errors"] == 3
    status, _h, _b = api.send("GET", "/rpc/broken", headers={"Authorization": "Bearer " + "f" * 64})
    assert status == 500 and api.api.describe()["open_errors"] == 4    # a wrong token is no token


# --- rate limit ---


def test_budget_comes_back_after_days_of_silence_across_the_tick_wrap(api):
    assert [api.status("GET", "/api/v1/settings") for _ in range(25)] == [200] * 25
    assert api.status("GET", "/api/v1/settings") == 429
    api.silence((1 << 28) + 20000)  # ~74.6 h: the old ring saw every stamp "in the future" and refused for days
    assert api.status("GET", "/api/v1/settings") == 200
    api.silence((1 << 29) - 40000)  # and a stamp kept for a whole period must not look recent either
    assert [api.status("GET", "/api/v1/settings") for _ in range(24)] == [200] * 24


def test_429_carries_retry_after_and_refused_requests_do_not_count(api):
    for _ in range(25):
        api.send("GET", "/api/v1/settings")
    api.clock.advance(5000)
    for _ in range(5):  # retrying while refused does not extend the lockout
        status, headers, body = api.send("GET", "/api/v1/settings")
        assert status == 429 and headers["retry-after"] == "10"
        assert body == {"error": "Too many requests", "code": "too_many_requests"}
        assert headers["content-type"] == "application/json"
    api.clock.advance(4999)
    assert api.status("GET", "/api/v1/settings") == 429
    api.clock.advance(1)  # 10 s after the first 25: the window has moved past them
    assert api.status("GET", "/api/v1/settings") == 200


def test_what_counts_404_405_401_and_alive(api):
    for _ in range(5):
        assert api.status("GET", "/api/v1/nothing") == 404
        assert api.status("PUT", "/api/v1/settings") == 405
        assert api.status("GET", "/api/v1/system/alive") == 200
        assert api.status("POST", "/api/v1/auth/tokens/confirm", headers={"Content-Type": "application/json"},
                          body=b'{"new_write_token": "x"}') == 409
    write = _first_pair(api)  # 22 requests so far
    api.app.settings.update({"api_auth_required": True})
    # Failed authentication counts, on a budget of its own (issue 26, finding 4): guessing is throttled, and
    # token-free requests (401s, 404s, a wrong token) never spend what the token holders have left.
    free = api.api.unauthenticated_budget
    assert free == 10                                   # 40 % of the API's 25
    assert [api.status("GET", "/api/v1/settings") for _ in range(free)] == [401] * free
    assert api.status("GET", "/api/v1/settings", headers={"Authorization": "Bearer " + "0" * 64}) == 429
    assert api.status("GET", "/api/v1/nothing") == 429  # routing comes after the limit
    assert api.status("GET", "/api/v1/settings", headers={"Authorization": "Bearer " + write}) == 200
    assert [api.status("GET", "/api/v1/settings", headers={"Authorization": "Bearer " + write})
            for _ in range(3)] == [200, 200, 429]            # the token holders' own 25


def _first_pair(api):
    """Generate and confirm a pair through the API (2 requests); the WRITE token."""
    status, _, body = api.send("POST", "/api/v1/auth/tokens/generate")
    assert status == 200
    w = body["pending"]["token_write"]
    assert api.status("POST", "/api/v1/auth/tokens/confirm", headers={"Content-Type": "application/json"},
                      body=json.dumps({"new_write_token": w}).encode()) == 200
    return w


def test_alive_counts_but_has_a_small_reserve_once_the_budget_is_spent(api):
    assert [api.status("GET", "/api/v1/system/alive") for _ in range(25)] == [200] * 25  # an alive flood...
    assert api.status("GET", "/api/v1/settings") == 429  # ...spends the budget of everything else
    reserve = HttpApi.alive_reserve
    assert [api.status("GET", "/api/v1/system/alive") for _ in range(reserve + 2)] == [200] * reserve + [429] * 2
    assert api.status("POST", "/api/v1/system/reboot") == 429 and api.fake.changes == []
    assert api.status("HEAD", "/api/v1/system/alive") == 429  # the reserve is for GET alive only
    api.clock.advance(10000)
    assert api.status("GET", "/api/v1/settings") == 200


def test_refused_browser_requests_cost_no_budget(api):
    for _ in range(30):
        assert api.status("GET", "/api/v1/settings", host="evil.example") == 421
        assert api.status("POST", "/api/v1/system/reboot", headers={"Origin": "http://evil.example"}) == 403
    assert [api.status("GET", "/api/v1/settings") for _ in range(25)] == [200] * 25


# --- Host rule ---


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.1:8080", "192.168.178.23", "[::1]", "[::1]:80",
                                  "[fe80::1:2:3]:8080", "[::ffff:192.168.1.5]", "localhost", "LOCALHOST:80",
                                  "meterplus-024d50000001.local", "MeterPlus-024D50000001.local.",
                                  "meterplus-024d50000001.local:80", "meterplus-024d50000001"])
def test_hosts_the_device_answers_to(api, host):
    assert api.status("GET", "/api/v1/settings", host=host) == 200


@pytest.mark.parametrize("host", ["evil.example", "evil.example:80", "127.0.0.1.nip.io", "1.2.3.4.evil.example",
                                  "meterplus-024d50000001.local.evil.example", "meterplus-000000000000.local",
                                  "meterplus.local", "127.0.0.1:", "127.0.0.1:http", "127.1", "256.1.1.1",
                                  "[::1", "[evil]", "local host"])
def test_other_hosts_are_misdirected_even_for_get(api, host):
    status, headers, body = api.send("GET", "/api/v1/settings", host=host)
    assert status == 421 and "Host" in body["error"] and headers["content-type"] == "application/json"
    assert api.status("POST", "/api/v1/system/reboot", host=host) == 421 and api.fake.changes == []


def test_two_host_headers_are_misdirected(api):
    assert api.status("GET", "/api/v1/settings", headers={"Host": "evil.example"}) == 421


def test_a_request_without_host_is_served(api):
    # HTTP/1.0 without headers: no browser sends that, so no rebinding page can; curl --http1.0 -H "Host:" can.
    status, _, body = api.raw(b"GET /api/v1/system/alive HTTP/1.0\r\n\r\n")
    assert status == 200 and body == {"alive": True}


# --- same-origin rule for state changes ---


@pytest.mark.parametrize("headers", [
    {"Origin": "http://evil.example"},
    {"Origin": "null"},  # sandboxed frames, file: pages
    {"Origin": "http://127.0.0.1:1"},  # another port of the same host is another origin
    {"Origin": "http://127.0.0.1"},  # the default port is not this one
    {"Origin": "http://{host}/path"},
    {"Origin": "http://{host}", "Sec-Fetch-Site": "cross-site"},
    {"Sec-Fetch-Site": "cross-site"},
    {"Sec-Fetch-Site": "same-site"},
])
def test_cross_site_state_changes_are_refused(api, headers):
    headers = dict((k, v.replace("{host}", api.host)) for k, v in headers.items())
    for method, path in (("POST", "/api/v1/system/reboot"), ("DELETE", "/api/v1/mqtt/ca"),
                         ("POST", "/api/v1/auth/tokens/generate")):
        status, _, body = api.send(method, path, headers=headers)
        assert status == 403 and body["error"].startswith("Cross-site request refused")
    assert api.fake.changes == [] and api.app.auth.describe()["pending"] is False


def test_same_origin_and_non_browser_state_changes_pass(api):
    same = {"Origin": "http://%s" % api.host, "Sec-Fetch-Site": "same-origin"}
    assert api.status("POST", "/api/v1/system/reboot", headers=same) == 200
    assert api.status("POST", "/api/v1/system/reboot", headers={"Origin": "http://%s" % api.host.upper()}) == 200
    assert api.status("POST", "/api/v1/system/reboot", headers={"Sec-Fetch-Site": "none"}) == 200  # typed URL
    assert api.status("POST", "/api/v1/system/reboot") == 200  # scripts and Home Assistant send neither
    assert api.fake.changes == ["POST"] * 4


def test_the_default_port_of_the_origin_matches_a_host_without_port(api):
    h = Headers({"Host": "192.168.1.5", "Origin": "http://192.168.1.5:80", "Sec-Fetch-Site": "same-origin"})
    assert cross_site("POST", h) is None
    h = Headers({"Host": "meterplus-024d50000001.local:80", "Origin": "http://meterplus-024d50000001.local"})
    assert cross_site("POST", h) is None


def test_cross_site_reads_are_not_refused_by_the_origin_rule(api):
    # a cross-site page can trigger a GET (an <img>) but cannot read the answer without CORS, and GET changes nothing
    assert api.status("GET", "/api/v1/settings", headers={"Origin": "http://evil.example",
                                                          "Sec-Fetch-Site": "cross-site"}) == 200


# --- no CORS ---


def test_no_cors_headers_on_answers_or_preflights(api):
    _, headers, _ = api.send("GET", "/api/v1/settings", headers={"Origin": "http://evil.example"})
    assert not [k for k in headers if k.startswith("access-control-")]
    status, headers, _ = api.send("OPTIONS", "/api/v1/system/reboot", headers={
        "Origin": "http://evil.example", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type"})
    assert status == 405 and not [k for k in headers if k.startswith("access-control-")]
    assert api.fake.changes == []


# --- the pure rules ---


def test_device_names_and_host_rule():
    names = device_names("024D50000001")
    assert names == ("meterplus-024d50000001.local", "meterplus-024d50000001", "localhost")
    assert host_allowed(None, names)
    assert host_allowed(" 10.0.0.1 ", names)
    assert not host_allowed("10.0.0.1:123456", names)
    assert not host_allowed("[::1]x", names)


VM_CODE = r"""
from services.api.origin import cross_site, device_names, host_allowed


class H:
    def __init__(self, d):
        self.d = d

    def get_list(self, name):
        return self.d.get(name, [])


names = device_names("024D50000001")
for h in ("192.168.1.5:80", "[fe80::1]:8080", "MeterPlus-024d50000001.local", "localhost", "evil.example",
          "127.0.0.1:abc", "[evil]"):
    print("host", h, host_allowed(h, names))
print("csrf", cross_site("POST", H({"Host": ["10.0.0.2"], "Origin": ["http://evil.example"]})) is not None)
print("same", cross_site("POST", H({"Host": ["10.0.0.2"], "Origin": ["http://10.0.0.2:80"],
                                    "Sec-Fetch-Site": ["same-origin"]})))
print("site", cross_site("DELETE", H({"Sec-Fetch-Site": ["same-site"]})))
print("get", cross_site("GET", H({"Origin": ["http://evil.example"]})))
from core.elapsed import fresh
print("fresh", fresh(0, 999, 1000), fresh(0, 1000, 1000), fresh(5, (1 << 28) + 10, 1 << 29), fresh(10, 5, 1000))
"""


def test_guards_in_micropython_vm():
    from tools.mpvm import MicroVM

    with MicroVM(packages=("core", "services")) as vm:
        out, _fuel = vm.run(VM_CODE)
    assert out.strip().splitlines() == [
        "host 192.168.1.5:80 True", "host [fe80::1]:8080 True", "host MeterPlus-024d50000001.local True",
        "host localhost True", "host evil.example False", "host 127.0.0.1:abc False", "host [evil] False",
        "csrf True", "same None", "site Sec-Fetch-Site: same-site", "get None", "fresh True False False False"], out
