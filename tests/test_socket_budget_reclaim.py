"""Issue 36 points 3 and 4 on the real Modbus server, the real WebSocket and the real socket budget (core/sockbudget.py)
with every feature on (HTTP 3, MQTT, the Modbus listener, a Shelly UDP port: two floating sockets): the budget asks
the owners of lower-ranked sockets to give one up before it refuses, so idle Modbus holders and anonymous WebSocket
sessions no longer lock out Modbus newcomers, Home Assistant's session or each other; a session's standing decides
who gives way (TOKEN > VOUCHED > SETTLED > ANON), and an anonymous newcomer never takes a known one's place."""

import pytest
import socketpool
from adafruit_ticks import ticks_add, ticks_ms

from core import sockbudget
from core.sockbudget import SocketBudget
from meter.reading import Reading
from services.emulation import shelly_ws
from services.emulation.shelly_ws import ShellyWs
from tests.steppedclock import SteppedClock
from tests.test_modbus_server import VALUES, Harness, _ask, _poll, closed_by_peer, raw_from
from tests.test_shelly_emulation import IDENT, THREE_PHASE, FakeBus, FakeSettings, FakeTcp, _client_frame


class _Holder:
    def __init__(self, n):
        self.n = n

    def sockets_held(self):
        return self.n


class _App:
    """Every feature on: HTTP's listener and two clients, MQTT, one Shelly UDP port (SMA sends through it)."""

    def __init__(self, udp_ports=1):
        self.http = _Holder(3)
        self.mqtt = _Holder(1)
        self.shelly_udp = _Holder(udp_ports)


def _everything_on(udp_ports=1):
    """(harness, budget, app): the Modbus server polled by the test, in an app with every feature on."""
    h = Harness(thread=False)
    h.bus.publish("reading", Reading(ticks_ms(), dict(VALUES)))
    app = _App(udp_ports)
    app.modbus = h.server
    budget = SocketBudget(app)
    h.server.budget = budget
    app.sockets = budget
    return h, budget, app


@pytest.fixture
def on():
    h, budget, app = _everything_on()
    yield h, budget, app
    h.close()
    assert socketpool.open_count() == 0


def _source(i, addresses, base=10):
    return "127.0.0.%d" % (base + i % addresses)


# ---------------------------------------------------------------- point 3: Modbus newcomers beside idle holders

@pytest.mark.parametrize("asked", [False, True])
@pytest.mark.parametrize("addresses", [1, 2, 8])
def test_modbus_newcomers_are_served_beside_one_address_holding_two_silent_connections(on, addresses, asked):
    """The audit: one address holding two silent connections reset 14 of 14 newcomers (budget_refused 269, shed 0):
    the budget refused before the code that frees an idle slot ran. The holder tops its two up before every probe
    (and asks once on each when asked); newcomers come from `addresses` addresses, the holder's among them."""
    h, budget, _app = on
    holder = "127.0.0.10"       # with one address the newcomers come from the holder's own address
    now = ticks_ms()
    held, served = [], 0
    try:
        for i in range(10):                               # 40 s: a newcomer every 4 s
            t = ticks_add(now, i * 4000)
            _poll(h, t)
            held = [s for s in held if not closed_by_peer_now(s)]
            while len(held) < 2:
                s = raw_from(h, holder)
                held.append(s)
                _poll(h, t)
                if asked:
                    _ask(h, s, 99, t)
            assert h.server.active_connections() == 2 and budget.held() == 8     # nothing left for a newcomer
            probe = raw_from(h, _source(i, addresses))
            ok = _ask(h, probe, i + 1, ticks_add(t, 3000))
            served += ok
            probe.close()
            _poll(h, ticks_add(t, 3100))
        assert served == 10, (served, h.server.counters)
        assert h.server.counters.get("budget_refused", 0) == 0 and h.server.counters["shed"] >= 10
        assert budget.held() <= 8
    finally:
        for s in held:
            s.close()


def closed_by_peer_now(s):
    """True when the server has closed s (checked without waiting)."""
    s.settimeout(0.05)
    try:
        return closed_by_peer(s)
    finally:
        s.settimeout(2)


@pytest.mark.parametrize("addresses", [1, 2, 8])
def test_modbus_alone_a_newcomer_is_served_beside_two_addresses_asking_every_10_s(addresses):
    """Modbus alone (HTTP 3, the listener, the mDNS responder: three sockets to spare): two energy managers asking
    every 10 s held both slots and reset 12 of 12 newcomers. A third client now borrows a spare socket; the two
    keep theirs."""
    h = Harness(thread=False)
    h.bus.publish("reading", Reading(ticks_ms(), dict(VALUES)))
    app = _App(0)
    app.mqtt.n = 0
    app.mdns = _Holder(1)
    app.modbus = h.server
    h.server.budget = SocketBudget(app)
    now = ticks_ms()
    a, b = raw_from(h, "127.0.0.2"), raw_from(h, "127.0.0.3")
    served = 0
    try:
        _poll(h, now)
        for i in range(12):                               # two minutes
            t = ticks_add(now, i * 10000)
            assert _ask(h, a, 2 * i + 1, t) and _ask(h, b, 2 * i + 2, ticks_add(t, 50))
            probe = raw_from(h, _source(i, addresses, base=20))
            served += _ask(h, probe, 100 + i, ticks_add(t, 5000))
            probe.close()
            _poll(h, ticks_add(t, 5100))
        assert served == 12, h.server.counters
        assert h.server.counters.get("shed", 0) == 0       # nobody lost a slot for it
    finally:
        a.close()
        b.close()
        h.close()
    assert socketpool.open_count() == 0


def test_a_borrowed_modbus_socket_is_given_back_to_a_known_taker_never_one_of_the_two():
    h = Harness(thread=False)
    h.bus.publish("reading", Reading(ticks_ms(), dict(VALUES)))
    app = _App(0)
    app.mqtt.n = 0
    app.mdns = _Holder(1)
    app.modbus = h.server
    budget = h.server.budget = SocketBudget(app)
    now = ticks_ms()
    clients = []
    try:
        for i in range(4):                          # the listener's backlog is 1: one at a time
            clients.append(raw_from(h, "127.0.0.%d" % (2 + i)))
            _poll(h, ticks_add(now, 10 * i))
            if i < 3:
                assert _ask(h, clients[i], i + 1, ticks_add(now, 10 * i))
        assert h.server.active_connections() == 3 and budget.held() == 8
        assert closed_by_peer(clients[3])          # a fourth has no socket: 3 + 1 + 1 + 3 = 8
        assert budget.may_take()                   # an NTP round (KNOWN) takes the borrowed one
        assert sum(closed_by_peer_now(s) for s in clients[:3]) == 1 and h.server.active_connections() == 2
        app.mdns.n = 2                             # held by the round now
        assert not budget.may_take()               # the two the budget counts on are never given up
        assert h.server.active_connections() == 2 and budget.refused == 2     # the fourth client, the round
    finally:
        for s in clients:
            s.close()
        h.close()


# ---------------------------------------------------------------- point 4: anonymous sessions give way

def _session(ws, addr, standing, sessions):
    sock = FakeTcp()
    ws.adopt(sock, (addr, 40000 + len(sessions)), standing)
    sessions.append(sock)
    return sock


def _ws(budget, clock, bus=None):
    ws = ShellyWs(bus or FakeBus(Reading(clock(), THREE_PHASE)), FakeSettings({"emulation.shelly": True}), IDENT,
                  ticks=clock)
    ws.budget = budget
    return ws


@pytest.mark.parametrize("addresses", [1, 2, 8])
def test_two_anonymous_sessions_lock_out_neither_home_assistant_nor_modbus(on, addresses):
    """The audit: two token-free sessions asking every 20 s kept Home Assistant's session out (503, 8 of 8) and
    reset every Modbus client (11 of 11). Home Assistant's address showed its READ token to the API (VOUCHED)."""
    h, budget, app = on
    clock = SteppedClock(start=ticks_ms())
    ws = app.shelly_ws = _ws(budget, clock)
    socks = []
    strangers = [_session(ws, _source(i, addresses, base=30), shelly_ws.ANON, socks) for i in range(2)]
    assert ws.sessions() == 2 and budget.held() == 8
    budget.vouch("127.0.0.5", clock())                       # Home Assistant's REST polls carry its READ token
    st = shelly_ws.standing_of(budget.known("127.0.0.5", clock()))
    assert st == shelly_ws.VOUCHED
    assert ws.room(st) and not ws.room(shelly_ws.ANON)       # a stranger's third handshake is still refused
    ha = _session(ws, "127.0.0.5", st, socks)
    assert not ha.closed and ws.sessions() == 2 and sum(s.closed for s in strangers) == 1
    assert ws.describe()["replaced"] == 1
    # Modbus (KNOWN) takes the other stranger's socket before it would be refused
    now = ticks_ms()
    m = raw_from(h, "127.0.0.6")
    try:
        assert _ask(h, m, 1, now)
        assert all(s.closed for s in strangers) and not ha.closed and ws.describe()["reclaimed"] == 1
        assert budget.reclaimed == 1 and h.server.counters.get("budget_refused", 0) == 0
        # a stranger's newcomer now finds no lower-ranked socket: refused, nobody known is touched
        assert not ws.room(shelly_ws.ANON)
        late = _session(ws, "127.0.0.30", shelly_ws.ANON, socks)
        assert late.closed and not ha.closed and ws.describe()["budget_refused"] == 1
        assert _ask(h, m, 2, now) and h.server.active_connections() == 1
    finally:
        m.close()


def test_with_two_udp_ports_one_anonymous_session_gives_its_socket_to_modbus_and_home_assistant():
    """Two Shelly UDP ports leave one floating socket: one token-free session held it against everyone."""
    h, budget, app = _everything_on(udp_ports=2)
    clock = SteppedClock(start=ticks_ms())
    ws = app.shelly_ws = _ws(budget, clock)
    socks = []
    try:
        stranger = _session(ws, "127.0.0.30", shelly_ws.ANON, socks)
        assert budget.held() == 8 and not stranger.closed
        m = raw_from(h, "127.0.0.6")
        assert _ask(h, m, 1, ticks_ms()) and stranger.closed
        # Home Assistant with a token in its handshake: the Modbus client of the two is KNOWN too, so HA waits
        # (equal ranks never take each other's socket) until the client leaves
        assert not ws.room(shelly_ws.TOKEN)
        m.close()
        _poll(h, ticks_ms())
        assert ws.room(shelly_ws.TOKEN)
        ha = _session(ws, "127.0.0.5", shelly_ws.TOKEN, socks)
        assert not ha.closed and ws.sessions() == 1
    finally:
        h.close()
    assert socketpool.open_count() == 0


@pytest.mark.parametrize("newcomer", [shelly_ws.ANON, shelly_ws.SETTLED, shelly_ws.VOUCHED, shelly_ws.TOKEN])
def test_a_newcomer_replaces_only_a_lower_standing_and_never_an_equal_one(newcomer):
    clock = SteppedClock()
    budget = SocketBudget(_App())
    ws = _ws(budget, clock)
    budget._app.shelly_ws = ws
    socks = []
    held = [_session(ws, "10.0.0.%d" % st, st, socks) for st in (shelly_ws.VOUCHED, shelly_ws.TOKEN)]
    assert ws.sessions() == 2
    clock.advance(5000)
    ws.poll(clock())
    assert ws.room(newcomer) == (newcomer == shelly_ws.TOKEN)
    late = _session(ws, "10.0.0.66", newcomer, socks)
    if newcomer == shelly_ws.TOKEN:
        assert held[0].closed and not held[1].closed and not late.closed     # the VOUCHED one gave way
    else:
        assert late.closed and not any(s.closed for s in held)


def test_an_anonymous_session_served_for_ten_minutes_settles_its_address_across_the_wrap():
    """Home Assistant with authentication off has no token anywhere: its session, served for settled_ms, makes its
    address SETTLED for an hour, so a stranger cannot take its place, nor Modbus its socket; after its reconnect it
    still comes before strangers."""
    clock = SteppedClock(start=(1 << 29) - 60000)
    bus = FakeBus(Reading(clock(), THREE_PHASE))
    budget = SocketBudget(_App())
    ws = _ws(budget, clock, bus)
    budget._app.shelly_ws = ws
    socks = []
    ha = _session(ws, "10.0.0.3", shelly_ws.ANON, socks)
    for _ in range(11):                                        # pongs to our pings, a minute apart
        clock.advance(60000)
        bus.publish("reading", Reading(clock(), THREE_PHASE))
        ha.script.append(_client_frame(10, b""))
        ws.poll(clock())
    assert not ha.closed and budget.known("10.0.0.3", clock()) == sockbudget.SETTLED
    assert ws.reclaimable() is None                            # no longer anonymous: Modbus may not take it
    stranger = _session(ws, "10.0.0.66", shelly_ws.ANON, socks)
    assert ws.reclaimable() == sockbudget.ANON
    assert not ws.room(shelly_ws.ANON) and ws.room(shelly_ws.SETTLED)
    ha.script.append("gone")                                   # Home Assistant restarts
    clock.advance(1000)
    ws.poll(clock())
    assert ha.closed and ws.sessions() == 1
    second = _session(ws, "10.0.0.67", shelly_ws.ANON, socks)  # a second stranger: both places taken
    assert ws.sessions() == 2 and not second.closed
    clock.advance(1000)
    standing = shelly_ws.standing_of(budget.known("10.0.0.3", clock()))
    assert standing == shelly_ws.SETTLED
    again = _session(ws, "10.0.0.3", standing, socks)          # HA's reconnect takes a stranger's place
    assert not again.closed and stranger.closed and not second.closed and ws.sessions() == 2
    clock.advance(sockbudget.KNOWN_MS)                         # an hour without a session: a stranger again
    ws.poll(clock())
    assert budget.known("10.0.0.3", clock()) == sockbudget.STRANGER


# ---------------------------------------------------------------- the budget's own rules

class _Owner(_Holder):
    def __init__(self, ranks):
        _Holder.__init__(self, len(ranks))
        self.ranks = sorted(ranks)

    def reclaimable(self):
        return self.ranks[0] if self.ranks else None

    def reclaim(self):
        self.ranks.pop(0)
        self.n -= 1


def test_the_budget_reclaims_the_lowest_rank_below_the_taker_before_it_refuses():
    app = _App()                                               # 5 held, HTTP's 3 among them
    app.modbus = _Owner([sockbudget.IDLE, sockbudget.KNOWN])
    app.shelly_ws = _Owner([sockbudget.ANON])
    budget = SocketBudget(app)
    assert budget.held() == 8 and not budget.could_take(1, sockbudget.IDLE)
    assert not budget.may_take(1, sockbudget.IDLE) and budget.refused == 1      # nothing below IDLE
    assert budget.could_take(1, sockbudget.ANON)
    assert budget.may_take(1, sockbudget.ANON)                 # the idle Modbus client, not the session
    assert app.modbus.ranks == [sockbudget.KNOWN] and app.shelly_ws.ranks == [sockbudget.ANON]
    app.mqtt.n += 1                                            # the taker holds it now
    assert not budget.may_take(1, sockbudget.ANON)             # an equal rank is never taken
    assert budget.may_take()                                   # KNOWN (the default: the device's own) takes it
    assert app.shelly_ws.ranks == [] and budget.reclaimed == 2 and budget.refused == 2
    app.mqtt.n += 1
    assert not budget.may_take()                               # a KNOWN socket is never given up


def test_known_addresses_are_bounded_refreshed_and_forgotten_after_an_hour():
    clock = SteppedClock()
    budget = SocketBudget(_App())
    budget.vouch("10.0.0.1", clock())
    for i in range(2, 2 + sockbudget.KNOWN_ROWS - 1):
        clock.advance(1000)
        budget.vouch("10.0.0.%d" % i, clock(), sockbudget.SETTLED)
    budget.vouch("10.0.0.1", clock(), sockbudget.SETTLED)      # refreshed; a token's standing is kept
    clock.advance(1000)
    budget.vouch("10.0.0.99", clock())                         # the table is full: the least recent (10.0.0.2) goes
    assert budget.known("10.0.0.2", clock()) == sockbudget.STRANGER
    assert budget.known("10.0.0.1", clock()) == sockbudget.VOUCHED
    assert budget.known("10.0.0.99", clock()) == sockbudget.VOUCHED
    assert budget.known(None, clock()) == sockbudget.STRANGER
    clock.advance(sockbudget.KNOWN_MS)                         # across the wrap (the clock starts just below it)
    assert budget.known("10.0.0.1", clock()) == sockbudget.STRANGER
    assert budget._addr == [None] * sockbudget.KNOWN_ROWS      # pruned, so no stamp outlives the tick period


def test_the_websockets_poll_prunes_the_known_addresses_once_a_minute():
    clock = SteppedClock()
    budget = SocketBudget(_App())
    ws = _ws(budget, clock)
    budget.vouch("10.0.0.1", clock())
    clock.advance(sockbudget.KNOWN_MS)
    ws.poll(clock())                                           # no session, no handshake: pruned all the same
    assert budget._addr == [None] * sockbudget.KNOWN_ROWS
