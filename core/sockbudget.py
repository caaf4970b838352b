"""The socket budget: the device's 8 sockets, of which the HTTP API always keeps its listener and two clients.

One place owns the arithmetic (docs/api.md "Socket budget"): the settings refuse a combination whose standing
sockets leave HTTP short (problem()), the mDNS responder asks whether its socket fits beside the worst case
(worst_case()), and at run time every socket a feature opens on a stranger's behalf or for itself (a Modbus
client, the Shelly WebSocket session, a UDP socket, an NTP round) asks SocketBudget.may_take() first: it is
refused when taking it would leave fewer than the listener and two clients to HTTP.

Before it refuses, the budget asks the owners of reclaimable sockets (RECLAIMERS) to give one up, so a newcomer
is never turned away while a socket it outranks is held (issue 36 points 3 and 4). Every socket and every taker
has a rank; a taker may only take the socket of a lower rank:
  IDLE   a Modbus client that asked nothing within its grace time or is quiet past shed_idle_ms, the least recently
         served of an address holding two (services/modbus/server.py)
  ANON   an anonymous WebSocket session (services/emulation/shelly_ws.py); a Modbus client beyond the two the
         budget counts on (one that only borrowed a free socket)
  KNOWN  a Modbus client of the two; a WebSocket session with a token or of a known address; the device's own
         sockets (an NTP round, a UDP port, the mDNS responder): what may_take() asks with by default
An anonymous session therefore never holds a socket a Modbus client or Home Assistant needs, and is never given
one a known client holds. Which session is "known" is the WebSocket's own order (shelly_ws); the budget keeps the
addresses it knows (vouch(), known()): one that showed a valid token to the API within the hour, or held a
WebSocket session that was served for settled_ms.
"""

from micropython import const

from adafruit_ticks import ticks_diff

from core.elapsed import fresh

TOTAL = const(8)       # socketpool sockets in the whole system on the ESP32-S3 build (CONFIG_LWIP_MAX_SOCKETS)
HTTP_KEEP = const(3)   # HTTP listener + two client sockets: the owner's way in, whatever else runs
FLOATING_MIN = const(1)  # a Modbus client, the WebSocket session and an NTP round share what is left: at least one
# The WebSocket sessions the worst case counts: Home Assistant's one. ShellyWs keeps a second place (a second client,
# or a newcomer while a silent session is replaced); that one is always asked for at run time (may_take), so the
# mDNS responder is not given up for a session that is rarely there.
WS_SESSIONS = const(1)
MODBUS_CLIENTS = const(2)  # services/modbus/server.py ModbusServer.max_clients
NTP_ROUND = const(1)       # an NTP round's socket (a second or two, a few times a day): our mDNS responder lends its
#                            own for the round (LENDERS), so the responder need not fit beside it (responder_fits)

# Ranks of sockets and of takers (see the module's docstring): a taker may take a held socket of a lower rank only.
IDLE = const(0)
ANON = const(1)
KNOWN = const(2)
# What the budget knows of an address (known()): nothing, a WebSocket session of it was served for long, it showed a
# valid token to the API (the owner's browser, Home Assistant's WattWaechter integration with its READ token).
STRANGER = const(0)
SETTLED = const(1)
VOUCHED = const(2)
KNOWN_ROWS = const(8)       # addresses remembered; the least recently vouched one gives its place
KNOWN_MS = 3600000          # an address stays known this long after its last token or served session (wrap-safe)

# App attributes (core/app.py) whose object may give up a socket: reclaimable() -> the rank of the socket it would
# give up (or None), reclaim() gives that one up (closes it; counted by its owner).
RECLAIMERS = ("modbus", "shelly_ws")
# App attributes whose object lends its socket to a round of the device's own (may_take(borrow=True): the NTP round)
# and takes it back after: lendable() -> bool, lend() closes it (the owner opens it again once it fits).
LENDERS = ("mdns",)
# App attributes (core/app.py) whose object may hold sockets; each answers sockets_held() -> int.
HOLDERS = ("http", "modbus", "mqtt", "clock", "captive_dns", "mdns", "shelly_udp", "shelly_ws", "sma", "ota",
           "cloud")


def standing(get):
    """[(feature key, sockets, what)] held all the time by the features on in a settings getter get(key, default):
    sockets that are opened at start and kept, whoever asks."""
    out = []
    shelly_udp = False
    if get("mqtt.enable", False) is True:
        out.append(("mqtt.enable", 1, "MQTT"))
    if get("modbus.enable", False) is True:
        out.append(("modbus.enable", 1, "Modbus listener"))
    if get("emulation.shelly", False) is True:
        seen = []
        for key in ("emulation.shellyUdpPort", "emulation.shellyUdpPort2"):
            port = get(key, 0)
            if isinstance(port, int) and not isinstance(port, bool) and port > 0 and port not in seen:
                seen.append(port)
                shelly_udp = True
                out.append((key, 1, "Shelly UDP port %d" % port))
    if get("emulation.sma", False) is True and not shelly_udp:
        # With a Shelly UDP port open the SMA sender sends through that socket (services/emulation/sma_sender.py
        # lender): both emulations hold one socket.
        out.append(("emulation.sma", 1, "SMA emulation"))
    if get("accessPoint.enable", False) is True:
        out.append(("accessPoint.enable", 1, "access point DNS"))
    return out


def worst_case(get):
    """Sockets the features on may hold at once: HTTP's 3, the standing ones, both Modbus clients, the WebSocket
    session and an NTP round (what the mDNS responder must fit beside, or give way to CircuitPython's)."""
    need = HTTP_KEEP + 1   # + an NTP round
    for _key, n, _what in standing(get):
        need += n
    if get("modbus.enable", False) is True:
        need += MODBUS_CLIENTS
    if get("emulation.shelly", False) is True:
        need += WS_SESSIONS
    return need


def responder_fits(get):
    """True when our mDNS responder's socket fits beside what the features on may hold at once, an NTP round left
    out: the responder lends its socket to the round (LENDERS) and takes it back after."""
    return worst_case(get) - NTP_ROUND + 1 <= TOTAL


def problem(get, touched=()):
    """None when the features on fit (HTTP 3 + the standing sockets + one floating socket <= 8), else (key, message):
    key is the feature to name: the last standing one (in standing()'s order) that touched holds, else the last."""
    rows = standing(get)
    held = 0
    for _key, n, _what in rows:
        held += n
    if HTTP_KEEP + held + FLOATING_MIN <= TOTAL:
        return None
    key = rows[-1][0]
    for k, _n, _what in rows:
        if k in touched:
            key = k
    parts = ", ".join(["%s %d" % (what, n) for _k, n, what in rows])
    offs = ", ".join([_off(k) for k, _n, _what in rows])
    return key, ("socket budget: %s hold %d of the %d sockets all the time; the HTTP API keeps 3 and a Modbus "
                 "client, the WebSocket or an NTP round needs 1 more: turn off %s (one of: %s)"
                 % (parts, held, TOTAL, _off(key), offs))


def _off(key):
    """How to turn the feature of key off."""
    if key.startswith("emulation.shellyUdpPort"):
        return "%s (set 0)" % key
    return "%s (set false)" % key


class SocketBudget:
    """app: core.app.App (its HOLDERS answer sockets_held(), its RECLAIMERS give a socket up). Counts what the
    firmware holds right now and says whether one more socket may be taken without leaving HTTP short of its
    listener and two clients, after asking the owners of lower-ranked sockets to give one up."""

    def __init__(self, app, total=TOTAL, keep=HTTP_KEEP):
        self._app = app
        self.total = total
        self.keep = keep
        self.refused = 0
        self.reclaimed = 0
        self.lent = 0
        # the known addresses: parallel rows (address, what it is known as, ticks of its last vouch); None = free
        self._addr = [None] * KNOWN_ROWS
        self._level = [STRANGER] * KNOWN_ROWS
        self._at = [0] * KNOWN_ROWS

    def _held_by(self, name):
        obj = getattr(self._app, name, None)
        fn = getattr(obj, "sockets_held", None) if obj is not None else None
        return fn() if fn is not None else 0

    def held(self):
        """Sockets the firmware holds now."""
        n = 0
        for name in HOLDERS:
            n += self._held_by(name)
        return n

    def _fits(self, n):
        http = self._held_by("http")
        short = self.keep - http if http < self.keep else 0
        return self.held() + n + short <= self.total

    def _cheapest(self, rank):
        """The owner holding the lowest-ranked socket below rank, or None."""
        pick, low = None, rank
        for name in RECLAIMERS:
            obj = getattr(self._app, name, None)
            fn = getattr(obj, "reclaimable", None) if obj is not None else None
            r = fn() if fn is not None else None
            if r is not None and r < low:
                pick, low = obj, r
        return pick

    def may_take(self, n=1, rank=KNOWN, borrow=False):
        """True when n more sockets leave HTTP its listener and two clients, once the owners of sockets ranked below
        rank gave up what it takes; a refusal is counted. (The WebSocket taking over an HTTP connection after its
        101 asks for 1: the HTTP server no longer counts a connection it is handing over.) borrow: a round of the
        device's own (NTP) may also have a lender's socket for its duration (LENDERS)."""
        tries = self.total       # each reclaim frees a socket: at most this many can be asked for
        while not self._fits(n):
            owner = self._cheapest(rank) if tries > 0 else None
            if owner is None and borrow and tries > 0:
                lender = self._lender()
                if lender is not None:
                    tries -= 1
                    lender.lend()
                    self.lent += 1
                    continue
            if owner is None:
                self.refused += 1
                return False
            tries -= 1
            owner.reclaim()
            self.reclaimed += 1
        return True

    def _lender(self):
        """The first of LENDERS holding a socket it would lend, or None."""
        for name in LENDERS:
            obj = getattr(self._app, name, None)
            fn = getattr(obj, "lendable", None) if obj is not None else None
            if fn is not None and fn():
                return obj
        return None

    def could_take(self, n=1, rank=KNOWN):
        """may_take() without taking, reclaiming or counting: True when n fit now or a lower-ranked socket is held
        (the WebSocket handshake asks this before its 101, may_take after)."""
        return self._fits(n) or self._cheapest(rank) is not None

    # ---------------------------------------------------------------- the addresses the device knows

    def prune(self, now):
        """Forget the rows older than KNOWN_MS (a stamp left for 2**29 ms would look recent again): vouch() and
        known() prune first, and the WebSocket's poll calls this once a minute while the emulation is on."""
        for i in range(KNOWN_ROWS):
            if self._addr[i] is not None and not fresh(self._at[i], now, KNOWN_MS):
                self._addr[i] = None
                self._level[i] = STRANGER

    def vouch(self, addr, now, level=VOUCHED):
        """Address addr showed a valid token (VOUCHED) or held a session served for long (SETTLED) at now."""
        if not addr:
            return
        self.prune(now)
        free = oldest = -1
        for i in range(KNOWN_ROWS):
            a = self._addr[i]
            if a == addr:
                if level > self._level[i]:
                    self._level[i] = level
                self._at[i] = now
                return
            if a is None:
                if free < 0:
                    free = i
            elif oldest < 0 or ticks_before(self._at[i], self._at[oldest]):
                oldest = i
        i = free if free >= 0 else oldest
        self._addr[i], self._level[i], self._at[i] = addr, level, now

    def known(self, addr, now):
        """What addr is known as now: STRANGER, SETTLED or VOUCHED."""
        if not addr:
            return STRANGER
        self.prune(now)
        for i in range(KNOWN_ROWS):
            if self._addr[i] == addr:
                return self._level[i]
        return STRANGER

    def describe(self):
        """{"held", "total", "refused", "reclaimed", "lent"} for /system/info."""
        return {"held": self.held(), "total": self.total, "refused": self.refused, "reclaimed": self.reclaimed,
                "lent": self.lent}


def ticks_before(a, b):
    """True when ticks stamp a lies before b (both recent: the rows are pruned first)."""
    return ticks_diff(a, b) < 0
