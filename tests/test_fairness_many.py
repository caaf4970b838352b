"""Fairness past twelve addresses (issue 36, finding 5): floods and trickles from 1, 2, 8, 16 and 40 source addresses
must not cost the known clients (asked politely for a minute, or showed a token) their answers, on HTTP (the API's
budgets, services/api/ratelimit.py) and on the Shelly UDP port (services/emulation/shelly_udp.py)."""

import json
import socket
import threading
import time

import pytest
from adafruit_httpserver import GET, JSONResponse, Route

from services.api.ratelimit import RateLimiter
from services.emulation.shelly_udp import ShellyUdp
from tests.steppedclock import SteppedClock

ADDRESSES = [1, 2, 8, 16, 40]


def _stranger(i):
    return "10.1.%d.%d" % (i // 200, 1 + i % 200)


def _earn(rl, clock, who, every_ms=5000, ms=70000):
    """who asks politely every every_ms for ms: known afterwards."""
    for _ in range(ms // every_ms):
        assert rl.allow(clock(), who)
        clock.advance(every_ms)
    assert rl.known(who)


def _windows(accepted, steps_per_window):
    """The most accepted in any window (accepted: step numbers)."""
    most = 0
    j = 0
    for i in range(len(accepted)):
        while accepted[i] - accepted[j] >= steps_per_window:
            j += 1
        most = max(most, i - j + 1)
    return most


# --- the limiter alone, stepped clock across the tick wrap ------------------------------------------------------

@pytest.mark.parametrize("flooders", ADDRESSES)
def test_known_clients_keep_their_answers_beside_floods_from_many_addresses(flooders):
    clock = SteppedClock(start=(1 << 29) - 40000)
    rl = RateLimiter(25, 10000)
    _earn(rl, clock, "10.0.0.7")                         # Home Assistant
    _earn(rl, clock, "10.0.0.8", every_ms=2000)          # the owner's page, polling the API
    served = {"10.0.0.7": 0, "10.0.0.8": 0}
    asked = dict(served)
    accepted = []
    for step in range(600):                              # 60 s in 100 ms steps
        now = clock()
        for f in range(flooders):                        # 50 requests a second per address
            for _ in range(5):
                if rl.allow(now, _stranger(f)):
                    accepted.append(step)
        for who, every in (("10.0.0.7", 20), ("10.0.0.8", 20)):
            if step % every == 7:
                asked[who] += 1
                if rl.allow(now, who):
                    served[who] += 1
                    accepted.append(step)
        clock.advance(100)
    assert served == asked, (served, asked)
    # The budget holds, but for the stamps the known clients' requests took over (_reclaim): at most their 10 a window
    assert _windows(sorted(accepted), 100) <= 25 + 10


@pytest.mark.parametrize("flooders", ADDRESSES)
def test_floods_from_many_addresses_stay_within_the_budget(flooders):
    """The audit: from 16-40 addresses the flood was no longer limited at all (166,956 answers in 26 s)."""
    clock = SteppedClock(start=(1 << 29) - 20000)
    rl = RateLimiter(25, 10000)
    accepted = []
    for step in range(400):
        now = clock()
        for f in range(flooders):
            for _ in range(3):
                if rl.allow(now, _stranger((f * 7 + step) % flooders)):
                    accepted.append(step)
        clock.advance(100)
    assert _windows(accepted, 100) <= 25


def test_a_trickle_from_24_addresses_under_the_budget_leaves_home_assistant_every_answer():
    """The audit: 24 addresses at 1.1 requests/s in all (under the budget) left Home Assistant 7 of 20: every address
    seen kept a reserved share."""
    clock = SteppedClock(start=(1 << 29) - 80000)
    rl = RateLimiter(25, 10000)
    _earn(rl, clock, "10.0.0.7")
    served = 0
    n = 0
    for step in range(1000):                             # 100 s in 100 ms steps
        now = clock()
        if step % 9 == 0:                                # 1.1 requests a second, round the 24 addresses
            rl.allow(now, _stranger(n % 24))
            n += 1
        if step % 20 == 3:                               # Home Assistant every 2 s: 50 asks
            served += rl.allow(now, "10.0.0.7")
        clock.advance(100)
    assert served == 50


def test_addresses_that_earn_a_place_and_then_flood_cannot_thin_the_floors_of_the_clients_known_before():
    clock = SteppedClock(start=(1 << 29) - 100000)
    rl = RateLimiter(25, 10000)
    _earn(rl, clock, "10.0.0.7")
    for step in range(700):                              # 40 addresses ask politely for 70 s (HA goes on)
        now = clock()
        if step % 10 == 0:
            for f in range(40):
                if (step // 10) % 10 == f % 10:          # each one every 10 s
                    rl.allow(now, _stranger(f))
        if step % 50 == 0:
            assert rl.allow(now, "10.0.0.7")
        clock.advance(100)
    earned = sum(1 for r in rl._rows if r[0] is not None and r[5] >= 2)
    assert earned <= RateLimiter.known_max
    served = 0
    for step in range(300):                              # then they all flood
        now = clock()
        for f in range(40):
            rl.allow(now, _stranger(f))
        if step % 20 == 0:
            served += rl.allow(now, "10.0.0.7")
        clock.advance(100)
    assert served == 15


def test_a_known_row_is_kept_beside_strangers_and_forgotten_after_an_hour_across_the_wrap():
    clock = SteppedClock(start=(1 << 29) - 80000)
    rl = RateLimiter(25, 10000)
    _earn(rl, clock, "10.0.0.7")
    for i in range(200):                                 # 200 strangers come and go
        rl.allow(clock(), _stranger(i))
        clock.advance(10)
    assert rl.known("10.0.0.7")
    for _ in range(8):                                   # an hour and more of silence, pruned as poll() does
        clock.advance(1 << 19)
        rl.prune(clock())
    assert not rl.known("10.0.0.7") and all(r[0] is None for r in rl._rows)
    for _ in range(1100):                                # the rest of the tick period: nothing looks recent again
        clock.advance(1 << 19)
        rl.prune(clock())
    assert rl.used() == 0 and rl._pool == 0 and rl._pool_heard is None


def test_a_token_makes_an_address_known_at_once_and_flooding_costs_an_earned_place():
    clock = SteppedClock()
    rl = RateLimiter(25, 10000)
    assert rl.allow(clock(), "10.0.0.9", 3) and rl.known("10.0.0.9")          # TOKEN
    _earn(rl, clock, "10.0.0.7")
    for _ in range(30):                                  # more than the whole budget in a window: a stranger again
        rl.allow(clock(), "10.0.0.7")
    assert not rl.known("10.0.0.7")
    for _ in range(30):
        rl.allow(clock(), "10.0.0.9")
    assert rl.known("10.0.0.9")                          # a token holder stays known (its floor, no more)


# --- through the API: owner, Home Assistant and a battery beside 40 loopback addresses, auth on and off ---------

class _Rpc:
    def routes(self, app):
        def rpc(request):
            return JSONResponse(request, {"total_act_power": 1.5})
        return [Route("/rpc/EM.GetStatus", GET, rpc)]


def _send(api, source, path, token=None):
    from tests.inproc import read_until_closed, split_answer

    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((source, 0))
    s.settimeout(2)
    s.connect(("127.0.0.1", api.port))
    head = "GET %s HTTP/1.1\r\nHost: %s\r\n" % (path, api.host)
    if token:
        head += "Authorization: Bearer %s\r\n" % token
    s.sendall((head + "\r\n").encode())
    return split_answer(read_until_closed(s, api.poll, polls=200))[0]


@pytest.mark.parametrize("auth", [False, True])
@pytest.mark.parametrize("flooders", ADDRESSES)
def test_owner_home_assistant_and_battery_are_answered_beside_many_flooding_addresses(tmp_path, auth, flooders):
    from tests.inproc import server_port
    from tests.test_api_guards import Api

    api = Api(tmp_path)
    api.api._route_modules = [api.fake, _Rpc()]
    api.api.stop()
    api.api.start()
    api.port = server_port(api.api)
    api.host = "127.0.0.1:%d" % api.port
    try:
        read, write = api.app.auth.generate(api.clock())
        api.app.auth.confirm(write, api.clock())
        if auth:
            api.app.settings.update({"api_auth_required": True})
        clients = (("127.0.0.1", "/api/v1/settings", write), ("127.0.0.2", "/api/v1/settings", read),
                   ("127.0.0.3", "/rpc/EM.GetStatus", None))
        for _ in range(15):                              # they asked before, every 5 s (with auth off: known by it)
            for source, path, token in clients:
                assert _send(api, source, path, token if auth else None) == 200
            api.clock.advance(5000)
        got = {c[0]: [] for c in clients}
        for step in range(40):                           # 20 s in 500 ms steps; each flooder asks twice a step
            for f in range(flooders):
                source = "127.0.1.%d" % (10 + f)
                _send(api, source, "/api/v1/settings")
                _send(api, source, "/rpc/EM.GetStatus")
            if step % 4 == 1:                            # each client every 2 s: 10 asks
                for source, path, token in clients:
                    got[source].append(_send(api, source, path, token if auth else None))
            api.clock.advance(500)
        for source, statuses in got.items():
            assert statuses.count(200) >= 9, (source, statuses)
        assert api.api.counters.get("emulation_rate_limited", 0) > 0 or flooders < 8
    finally:
        api.stop()


# --- the Shelly UDP port ------------------------------------------------------------------------------------------

REQ = b'{"id":1,"method":"EM.GetStatus","params":{"id":0}}'
BATTERY = ("192.168.1.60", 45000)


def _udp_answered(flooders, per_s, earn=True):
    """A battery asking every second (for 70 s first, when earn), then sources flooding at per_s datagrams a second
    each for 20 s; how many of the battery's 20 asks were answered."""
    from meter.reading import Reading
    from tests.test_shelly_emulation import THREE_PHASE, FakePool
    from tests.test_shelly_udp_fairness import _udp

    clock = SteppedClock(start=(1 << 29) - 30000)
    pool = FakePool()
    udp = _udp(pool, now=clock())
    udp.poll(clock())
    sock = pool.sockets[0]
    if earn:
        for _ in range(70):
            pool.inbox.append((REQ, BATTERY))
            for _ in range(40):
                clock.advance(25)
                udp._bus.publish("reading", Reading(clock(), THREE_PHASE))
                udp.poll(clock())
    answered = 0
    due = 0.0
    n = 0
    for step in range(800):                              # 20 s in 25 ms steps
        due += flooders * per_s / 40.0
        while due >= 1:                                  # the sources in turn, evenly spread
            due -= 1
            f = n % flooders
            n += 1
            pool.inbox.append((REQ, ("192.168.2.%d" % (10 + f), 40000 + f)))
        if step % 40 == 33:
            pool.inbox.append((REQ, BATTERY))
        before = len(sock.sent)
        udp._bus.publish("reading", Reading(clock(), THREE_PHASE))
        udp.poll(clock())
        answered += sum(1 for _d, a in sock.sent[before:] if a == BATTERY)
        clock.advance(25)
    return answered, udp


@pytest.mark.parametrize("flooders,per_s", [(1, 200), (2, 100), (8, 25), (16, 4), (16, 12.5), (40, 5), (40, 1)])
def test_a_steady_battery_keeps_its_udp_answers_beside_many_sources(flooders, per_s):
    """The audit: 16 sources within their 4/s each left the battery 7 of 16, 200 packets/s from many 0 of 20."""
    answered, udp = _udp_answered(flooders, per_s)
    assert answered == 20, (answered, udp.counters)
    assert len(udp._peer_ip) == ShellyUdp.peers


def test_udp_answers_in_all_stay_within_the_total_beside_a_known_battery():
    answered, udp = _udp_answered(40, 5)
    assert udp.counters["answers"] <= 70 + ShellyUdp.total_per_s * 21
    assert udp.counters["total_limited"] > 0


# --- real sockets: a battery on UDP and on /rpc beside 16 and 40 loopback addresses --------------------------------

def _flood_udp(source, port, stop, rate):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((source, 0))
    gap = 1.0 / rate
    nxt = time.monotonic()
    while not stop.is_set():
        try:
            s.sendto(REQ, ("127.0.0.1", port))
        except OSError:
            pass
        nxt += gap
        delay = nxt - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    s.close()


@pytest.mark.slow   # ~10 s per case in real time
@pytest.mark.parametrize("flooders", [16, 40])
def test_the_battery_is_answered_on_udp_beside_flooding_loopback_addresses(flooders):
    from tests.test_shelly_udp_fairness import Runner

    r = Runner()
    r.udp.earn_ms = 2000                                 # known after 2 s of steady asking, not a minute
    battery = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    battery.bind(("127.0.0.1", 0))
    battery.settimeout(1.0)
    stop = threading.Event()
    threads = [threading.Thread(target=_flood_udp, args=("127.0.0.%d" % (2 + i), r.port, stop, 200.0 / flooders),
                                daemon=True) for i in range(flooders)]

    def ask():
        battery.sendto(REQ, ("127.0.0.1", r.port))
        try:
            while b"total_act_power" not in battery.recvfrom(4096)[0]:
                pass
            return True
        except socket.timeout:
            return False

    try:
        for _ in range(6):                               # the battery asked steadily before
            ask()
            time.sleep(0.5)
        for t in threads:
            t.start()
        time.sleep(1.0)
        answered = 0
        for _ in range(10):
            answered += ask()
            time.sleep(0.5)
    finally:
        stop.set()
        for t in threads:
            t.join(5)
        battery.close()
        r.close()
    assert r.error is None, r.error
    assert answered >= 9, (answered, r.udp.counters)


@pytest.mark.slow   # ~15 s per case in real time
@pytest.mark.parametrize("flooders", [16, 40])
def test_home_assistant_and_a_battery_on_rpc_are_answered_beside_concurrent_floods(tmp_path, flooders, monkeypatch):
    """Real sockets, the API polled in a thread with its real budgets (auth off: both known only by asking)."""
    import http.client

    import socketpool
    from adafruit_ticks import ticks_ms

    from services.api.service import HttpApi
    from tests.hostproc import free_port
    from tests.test_api_fairness import _rpc_app
    from tests.test_api_guards import _Routes

    monkeypatch.setattr(RateLimiter, "earn_ms", 1500)

    def get(source, port, path):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=5, source_address=(source, 0))
        try:
            c.request("GET", path)
            return c.getresponse().status
        except OSError as exc:
            return repr(exc)
        finally:
            c.close()

    port = free_port()
    api = HttpApi(socketpool.SocketPool(None), _rpc_app(tmp_path), host="127.0.0.1", port=port,
                  route_modules=[_Routes(), _Rpc()])
    api.start()
    stop = threading.Event()
    flood = []

    def loop():
        while not stop.is_set():
            api.poll(ticks_ms())

    def flooder(source):
        while not stop.is_set():
            flood.append(get(source, port, "/api/v1/settings"))
            flood.append(get(source, port, "/rpc/EM.GetStatus"))

    poller = threading.Thread(target=loop, daemon=True)
    poller.start()
    threads = [threading.Thread(target=flooder, args=("127.0.0.%d" % (10 + i),), daemon=True) for i in range(flooders)]
    clients = (("127.0.0.2", "/api/v1/settings"), ("127.0.0.3", "/rpc/EM.GetStatus"))
    got = {c[0]: [] for c in clients}
    try:
        for _ in range(4):                               # Home Assistant and the battery asked before
            for source, path in clients:
                assert get(source, port, path) == 200
            time.sleep(0.6)
        for t in threads:
            t.start()
        time.sleep(1.0)
        for _ in range(10):
            for source, path in clients:
                got[source].append(get(source, port, path))
            time.sleep(1.0)
    finally:
        stop.set()
        for t in threads:
            t.join(10)
        poller.join(5)
        api.stop()
    assert 429 in flood                                  # the flood was limited
    for source, statuses in got.items():
        assert statuses.count(200) >= 9, (source, statuses, json.dumps(api.counters))
