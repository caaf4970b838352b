"""The socket budget: the device's 8 sockets, of which the HTTP API always keeps its listener and two clients.

One place owns the arithmetic (docs/api.md "Socket budget"): the settings refuse a combination whose standing
sockets leave HTTP short (problem()), the mDNS responder asks whether its socket fits beside the worst case
(worst_case()), and at run time every socket a feature opens on a stranger's behalf or for itself (a Modbus
client, the Shelly WebSocket session, a UDP socket, an NTP round) asks SocketBudget.may_take() first: it is
refused when taking it would leave fewer than the listener and two clients to HTTP.
"""

from micropython import const

TOTAL = const(8)       # socketpool sockets in the whole system on the ESP32-S3 build (CONFIG_LWIP_MAX_SOCKETS)
HTTP_KEEP = const(3)   # HTTP listener + two client sockets: the owner's way in, whatever else runs
FLOATING_MIN = const(1)  # a Modbus client, the WebSocket session and an NTP round share what is left: at least one
# The WebSocket sessions the worst case counts: Home Assistant's one. ShellyWs keeps a second place (a second client,
# or a newcomer while a silent session is replaced); that one is always asked for at run time (may_take), so the
# mDNS responder is not given up for a session that is rarely there.
WS_SESSIONS = const(1)
MODBUS_CLIENTS = const(2)  # services/modbus/server.py ModbusServer.max_clients

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
    """app: core.app.App (its HOLDERS answer sockets_held()). Counts what the firmware holds right now and says
    whether one more socket may be taken without leaving HTTP short of its listener and two clients."""

    def __init__(self, app, total=TOTAL, keep=HTTP_KEEP):
        self._app = app
        self.total = total
        self.keep = keep
        self.refused = 0

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

    def may_take(self, n=1):
        """True when n more sockets leave HTTP its listener and two clients; a refusal is counted. (The WebSocket
        taking over an HTTP connection after its 101 asks for 1: the HTTP server no longer counts a connection it
        is handing over.)"""
        http = self._held_by("http")
        short = self.keep - http if http < self.keep else 0
        if self.held() + n + short <= self.total:
            return True
        self.refused += 1
        return False

    def describe(self):
        """{"held", "total", "refused"} for /system/info."""
        return {"held": self.held(), "total": self.total, "refused": self.refused}
