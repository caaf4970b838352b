"""Modbus TCP server for the SunSpec map: non-blocking sockets, MBAP framing, exceptions, client limits."""

import errno

from adafruit_ticks import ticks_diff
from micropython import const

from core.elapsed import fresh
from core.module import OK, WARN, Module
from core.sockbudget import ANON, IDLE, KNOWN
from meter.decimal import parse_ct
from services.modbus.sunspec_map import SunSpecMap, energy_sf, registers_json

_MBAP = const(7)             # transaction id, protocol id, length, unit id
_FRAME_MAX = const(260)      # MBAP + the largest PDU (253 bytes)
_LEN_MAX = const(254)        # MBAP length field: unit id + PDU
_READ_MAX = const(125)       # registers per FC 3/4 request (Modbus application protocol 6.3)
_FC_HOLDING = const(3)
_FC_INPUT = const(4)
_EX_FUNCTION = const(1)      # illegal function
_EX_ADDRESS = const(2)       # illegal data address
_EX_VALUE = const(3)         # illegal data value
_EX_GATEWAY = const(11)      # gateway target device failed to respond: a unit id we are not
_ENOTCONN = const(128)       # lwIP's ENOTCONN: a non-blocking recv from a closed peer on the device


# Pure (no sockets), so it runs and is measured in the MicroPython VM; it allocates only the memoryview.
def handle_frame(frame, flen, sunspec, tx):
    """Answer the complete MBAP frame frame[:flen] into tx; return the reply length, or -1 to close."""
    if frame[2] or frame[3]:
        return -1                                  # protocol id must be 0 (Modbus)
    length = (frame[4] << 8) | frame[5]
    if length < 2 or length > _LEN_MAX or length + 6 != flen:
        return -1
    unit = frame[6]
    fc = frame[7]
    tx[0] = frame[0]
    tx[1] = frame[1]
    tx[2] = 0
    tx[3] = 0
    tx[4] = 0
    tx[6] = unit
    tx[7] = fc | 0x80
    if unit != 1 and unit != 0 and unit != 255:
        code = _EX_GATEWAY
    elif fc != _FC_HOLDING and fc != _FC_INPUT:
        code = _EX_FUNCTION
    elif length != 6:
        code = _EX_VALUE                           # FC 3/4 carry exactly start and count
    else:
        start = (frame[8] << 8) | frame[9]
        count = (frame[10] << 8) | frame[11]
        if count < 1 or count > _READ_MAX:
            code = _EX_VALUE
        else:
            off = sunspec.offset(start, count)
            if off < 0:
                code = _EX_ADDRESS
            else:
                nb = count * 2
                tx[5] = nb + 3
                tx[7] = fc
                tx[8] = nb
                tx[9:9 + nb] = memoryview(sunspec.image)[off:off + nb]
                return 9 + nb
    tx[5] = 3
    tx[8] = code
    return 9


class _Client:
    """One connection: its socket, a receive buffer holding at most one frame, a pending reply, its idle clock."""

    def __init__(self):
        self.sock = None
        self.rx = bytearray(_FRAME_MAX)
        self.rxn = 0
        self.tx = bytearray(_FRAME_MAX)
        self.txn = 0
        self.txoff = 0
        self.last_ms = 0
        self.peer = None
        self.asked = False     # a complete request came in on this connection


class ModbusServer(Module):
    """pool: socketpool.SocketPool; bus: core.bus.Bus; settings: core.settings.Settings; port_override wins."""

    name = "modbus"
    poll_every_ms = 50      # energy managers ask every 1-5 s; 50 ms added is not felt
    max_clients = 2           # the clients the socket budget counts on (core/sockbudget.py MODBUS_CLIENTS)
    # With a budget, up to extra_clients more while it has sockets to spare (Modbus alone: a third energy manager is
    # served beside two that poll every 10 s); such a borrowed socket is the first one given back to a known taker
    # (rank ANON: an NTP round, Home Assistant's WebSocket session), never one of the max_clients.
    extra_clients = 2
    idle_ms = 300000          # a client without a complete request for 5 minutes is closed
    # At the limit a newcomer from another address takes a slot (_shed_for): from an address holding both, the one
    # it asked least recently on; else the slot of a client that never asked within grace_ms of connecting; else
    # of the least recently served client when its last request is shed_idle_ms old (evcc asks every few seconds,
    # Home Assistant's Modbus integration every 30 s by default: both keep their slots; one request a minute does
    # not).
    shed_idle_ms = 45000
    grace_ms = 2000
    # The pipeline publishes None after 10 s without a telegram; this second line of defence covers a
    # pipeline that died and can publish nothing: a Reading this old is never served as current.
    stale_ms = 15000
    backlog = 1
    # core.sockbudget.SocketBudget (the wiring sets it): asked before each accept; it may ask this server to give up
    # an idle client for another taker (reclaimable(), reclaim()) and the WebSocket to give up an anonymous session
    # for a Modbus newcomer
    budget = None

    # port_override: the host runtime's --modbus-port; serial and version go into model 1 (SN, Vr).
    def __init__(self, pool, bus, settings, host="0.0.0.0", port_override=None, serial="", version="", log=None):
        Module.__init__(self)
        self._pool = pool
        self._bus = bus
        self._settings = settings
        self.host = host
        self._port_override = port_override
        self._serial = serial
        self._version = version
        self._log = log
        self._changes = bus.subscribe("settings", 4)
        self._clients = [_Client() for _ in range(self.max_clients + self.extra_clients)]
        self._now = 0             # the last poll's ticks: the budget may ask for a client between two polls
        self._listen = None
        self.enabled = False
        self.port = 0
        self.map = None
        self._expired = None   # the last reading found too old: never served again
        self._config = None
        self._configure()

    def _note(self, msg, *args):
        if self._log is not None:
            self._log.warning(msg, *args)

    def _read_config(self):
        """(enable, port, model, TotWh_SF floor) from the settings document."""
        s = self._settings
        enable = s.get("modbus.enable", False) is True
        port = self._port_override if self._port_override is not None else s.get("modbus.port", 502)
        model = s.get("modbus.model", 203)
        if model not in (203, 213):
            self._note("modbus.model %r is not 203 or 213: serving 203", model)
            model = 203
        return enable, int(port), model, energy_sf(parse_ct(s.get("ctRatio", 1)) or 10)

    def _configure(self):
        """Apply the settings (a new map when model or energy SF floor change); True when enable/port changed."""
        cfg = self._read_config()
        old = self._config
        if cfg == old:
            return False
        self._config = cfg
        self.enabled = cfg[0]
        self.port = cfg[1]
        if old is None or old[2] != cfg[2] or old[3] != cfg[3]:
            # one allocation per configuration change; the image is reused for every Reading
            self.map = SunSpecMap(cfg[2], version=self._version, serial=self._serial, energy_sf_min=cfg[3])
            self.map.update(self._bus.latest("reading"))
        return old is None or old[0] != cfg[0] or old[1] != cfg[1]

    @property
    def running(self):
        """True while the listen socket is open."""
        return self._listen is not None

    def active_connections(self):
        """Connected clients right now."""
        n = 0
        for c in self._clients:
            if c.sock is not None:
                n += 1
        return n

    def sockets_in_use(self):
        """Sockets this service holds: the listener plus its clients (the device has 8 in all)."""
        return self.active_connections() + (1 if self._listen is not None else 0)

    sockets_held = sockets_in_use

    def start(self):
        """Open the listener when modbus.enable is true; a disabled server holds no socket."""
        self._configure()
        if self.enabled:
            self._open()

    def _open(self):
        sock = self._pool.socket(self._pool.AF_INET, self._pool.SOCK_STREAM)
        try:
            sock.setsockopt(self._pool.SOL_SOCKET, self._pool.SO_REUSEADDR, 1)
            sock.bind((self.host, self.port))
            sock.listen(self.backlog)
            sock.setblocking(False)
        except Exception:
            sock.close()
            raise
        self._listen = sock

    def _close_all(self):
        for c in self._clients:
            self._drop(c)
        if self._listen is not None:
            try:
                self._listen.close()
            except OSError:
                pass
            self._listen = None

    def stop(self):
        self._close_all()

    def _drop(self, c):
        if c.sock is not None:
            try:
                c.sock.close()
            except OSError:
                pass
        c.sock = None
        c.rxn = 0
        c.txn = 0
        c.txoff = 0
        c.peer = None
        c.asked = False

    def poll(self, now_ms):
        """Follow settings and the latest Reading, do one transaction per client, then accept one client."""
        changed = False
        while self._changes.pop() is not None:
            changed = True
        if changed and self._configure():
            self._close_all()
            if self.enabled:
                self._open()          # a failure raises: the supervisor retries start() with backoff
        reading = self._bus.latest("reading")
        if reading is not None and (reading is self._expired or not fresh(reading.ts_ms, now_ms, self.stale_ms)):
            # Latched: a reading left on the bus (a dead pipeline) must not come back when the tick wrap makes its
            # stamp look recent again 2**29 ms later.
            self._expired = reading
            reading = None
        if reading is not self.map.source:
            self.map.update(reading)
        self._now = now_ms
        if self._listen is None:
            return
        # clients first: a client that just hung up frees its slot before a newcomer is judged, so a
        # reconnect right after a close (pysunspec2 scan, evcc retry) is not refused as a third client
        for c in self._clients:
            if c.sock is not None:
                self._serve(c, now_ms)
        self._accept(now_ms)
        self.state = WARN if self.map.overflow else OK

    def _accept(self, now_ms):
        try:
            sock, addr = self._listen.accept()
        except OSError as exc:
            if exc.errno != errno.EAGAIN:
                self.count("accept_errors")   # e.g. out of sockets (ENFILE): the peer sees a reset
            return
        budget = self.budget
        n = self.active_connections()
        limit = self.max_clients + (self.extra_clients if budget is not None else 0)
        free = None
        short = False        # the budget had no socket for it (rather than every slot being taken)
        if n < limit:
            # One of the max_clients is a known taker: it may take an anonymous WebSocket session's socket or an
            # idle client's; a client beyond them only borrows a free socket (or an idle client's). Asked after
            # accept, so an idle poll costs no budget count; the momentary socket is back before HTTP polls.
            rank = KNOWN if n < self.max_clients else ANON
            if budget is None or (budget.could_take(1, rank) and budget.may_take(1, rank)):
                for i in range(limit):          # not a slice: no list made per newcomer
                    if self._clients[i].sock is None:
                        free = self._clients[i]
                        break
            else:
                short = True
        if free is None:
            # No socket to add: the newcomer takes the slot of a client that asks rarely (or never) or of an address
            # holding two while it waits (_shed_for), so the count of sockets stays as it is. Tried before refusing
            # (issue 36: the budget refused every newcomer before this ran).
            free = self._shed_for(addr[0] if addr else None, now_ms)
            if free is not None:
                self.count("shed")
                self._drop(free)
        if free is None:
            # Closed within this poll: it sees the close at once instead of hanging in the backlog, and the served
            # clients' sockets stay untouched.
            if short:
                self.count("budget_refused")      # keeping it would leave HTTP short of its listener and two clients
                budget.refused += 1
            else:
                self.count("refused")
            try:
                sock.close()
            except OSError:
                pass
            return
        sock.setblocking(False)
        free.sock = sock
        free.peer = addr
        free.last_ms = now_ms
        self.count("accepted")

    def _spare(self, now_ms):
        """(client, rank) of the client this server gives up first when another taker needs its socket, or
        (None, None): IDLE for one that asked nothing within grace_ms, one quiet for shed_idle_ms, or the least
        recently served of an address holding more than one quiet for grace_ms; ANON for the least recently served
        beyond max_clients (a borrowed socket). Never one waiting for its answer."""
        best, best_rank, best_idle = None, None, -1
        n = self.active_connections()
        for c in self._clients:
            if c.sock is None or c.txn:
                continue
            idle = self._idle(c, now_ms)
            rank = None
            if (not c.asked and idle >= self.grace_ms) or idle >= self.shed_idle_ms:
                rank = IDLE
            elif idle >= self.grace_ms and c.peer is not None and self._held_by(c.peer[0]) > 1:
                rank = IDLE
            elif n > self.max_clients:
                rank = ANON
            if rank is None:
                continue
            if best is None or rank < best_rank or (rank == best_rank and idle > best_idle):
                best, best_rank, best_idle = c, rank, idle
        return best, best_rank

    def _held_by(self, host):
        """Slots held by address host."""
        n = 0
        for d in self._clients:
            if d.sock is not None and d.peer is not None and d.peer[0] == host:
                n += 1
        return n

    def reclaimable(self):
        """The rank (core/sockbudget.py) of the client socket reclaim() would give up, or None."""
        return self._spare(self._now)[1]

    def reclaim(self):
        """Give up the client _spare() names: another taker of a higher rank needs its socket."""
        c = self._spare(self._now)[0]
        if c is not None:
            self.count("shed")
            self._drop(c)

    def _idle(self, c, now_ms):
        """Milliseconds since c's last request (or its accept); a stamp too old for ticks_diff counts as idle_ms."""
        d = ticks_diff(now_ms, c.last_ms)
        return d if d >= 0 else self.idle_ms

    def _shed_for(self, peer, now_ms):
        """The client whose slot a newcomer from address peer takes, or None (the newcomer is refused).

        A client waiting for its answer is never shed. In order: the least recently served client of another
        address that holds more than one slot (one slot per address while another waits); when the newcomer's own
        address holds more than one, the least recently served of them quiet for grace_ms (the same host opens
        another: it keeps its others); else a newcomer's own address's slot only when that one is quiet for
        shed_idle_ms (a reconnect after a lost connection); a client that sent no request within grace_ms of
        connecting; the least recently served one quiet for shed_idle_ms.
        """
        best = None
        best_idle = -1
        for c in self._clients:       # an address holding more than one slot
            if c.sock is None or c.txn or c.peer is None or c.peer[0] == peer:
                continue
            idle = self._idle(c, now_ms)
            if self._held_by(c.peer[0]) > 1 and idle > best_idle:
                best, best_idle = c, idle
        if best is not None:
            return best
        if peer is not None and self._held_by(peer) > 1:
            for c in self._clients:   # the newcomer's own address holds more than one
                if c.sock is None or c.txn or c.peer is None or c.peer[0] != peer:
                    continue
                idle = self._idle(c, now_ms)
                if idle >= self.grace_ms and idle > best_idle:
                    best, best_idle = c, idle
            if best is not None:
                return best
        for c in self._clients:
            if c.sock is None or c.txn:
                continue
            idle = self._idle(c, now_ms)
            if (not c.asked and idle >= self.grace_ms) or idle >= self.shed_idle_ms:
                key = idle + (self.idle_ms if not c.asked else 0)   # one that never asked goes first
                if key > best_idle:
                    best, best_idle = c, key
        return best

    def _serve(self, c, now_ms):
        """One step for one client: finish a pending reply, else read and answer at most one frame."""
        sock = c.sock
        if ticks_diff(now_ms, c.last_ms) >= self.idle_ms:
            self.count("idle_closed")     # also a client that stopped reading its answers
            self._drop(c)
            return
        if c.txn:
            self._send(c)
            return
        if c.rxn < _FRAME_MAX:
            try:
                n = sock.recv_into(memoryview(c.rx)[c.rxn:], _FRAME_MAX - c.rxn)
            except OSError as exc:
                if exc.errno == errno.EAGAIN:
                    n = -1
                else:
                    if exc.errno != _ENOTCONN and exc.errno != errno.ENOTCONN:
                        self.count("recv_errors")
                    self._drop(c)
                    return
            if n == 0:
                self._drop(c)             # CPython's way of saying the peer closed
                return
            if n > 0:
                c.rxn += n
        if c.rxn < _MBAP:
            return
        rx = c.rx
        length = (rx[4] << 8) | rx[5]
        if rx[2] or rx[3] or length < 2 or length > _LEN_MAX:
            self.count("bad_frames")      # not Modbus: nothing after it can be framed, so hang up
            self._drop(c)
            return
        flen = length + 6
        if c.rxn < flen:
            return
        c.txn = handle_frame(rx, flen, self.map, c.tx)
        c.txoff = 0
        if c.txn < 0:
            self.count("bad_frames")
            self._drop(c)
            return
        rest = c.rxn - flen
        if rest:
            rx[0:rest] = rx[flen:c.rxn]   # pipelined requests: keep the next one for the next poll
        c.rxn = rest
        c.last_ms = now_ms
        c.asked = True
        if c.tx[7] & 0x80:
            self.count("exceptions")
        self.count("requests")
        self._send(c)

    def _send(self, c):
        try:
            sent = c.sock.send(memoryview(c.tx)[c.txoff:c.txn])
        except OSError as exc:
            if exc.errno != errno.EAGAIN:
                self.count("send_errors")
                self._drop(c)
            return
        c.txoff += sent
        if c.txoff >= c.txn:
            c.txn = 0
            c.txoff = 0

    def status_json(self):
        """GET /api/v1/modbus/status body (aio-wattwaechter ModbusStatus) as JSON text, keys in a fixed order."""
        return status_json(self.enabled, self.running, self.port, self.active_connections(),
                           registers_json(self.map.registers()))

    def describe(self):
        d = Module.describe(self)
        d["enabled"] = self.enabled
        d["port"] = self.port
        d["model"] = self.map.model
        d["clients"] = self.active_connections()
        d["sockets"] = self.sockets_in_use()
        d["overflows"] = self.map.overflows
        return d


def status_json(enabled, running, port, connections, registers):
    """The status object's text; registers is the JSON array text of the register rows."""
    return ('{"enabled":%s,"running":%s,"port":%d,"active_connections":%d,"registers":%s}'
            % ("true" if enabled else "false", "true" if running else "false", port, connections, registers))
