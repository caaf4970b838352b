"""The Shelly Pro 3EM's UDP JSON-RPC as batteries poll it (Marstek, Hoymiles, Zendure): one socket per port."""

from adafruit_ticks import ticks_diff

from micropython import const

from core.ipv4 import parse_ipv4
from core.module import Module
from core.sockets import EAGAIN, close_quietly, errno_of
from services.emulation import shelly_rpc
from services.emulation.meter_view import view


_LONG_AGO = const(1 << 28)      # what _age says of a stamp ticks_diff cannot place (small ints: < 2**30)


def own_addresses(radio):
    """For ShellyUdp's own: a callable -> (station address, its netmask, AP address, its netmask) of a wifi.radio
    (each None while down)."""
    def own():
        return (radio.ipv4_address, radio.ipv4_subnet, radio.ipv4_address_ap, radio.ipv4_subnet_ap)
    return own


def _bad_destinations(own):
    """The addresses an answer must never go to besides broadcast and multicast: the device's own (station, AP) and
    their directed broadcasts, as 32-bit ints. Loopback is left out: it is no WiFi address on the device, and the
    host runtime's stand-in station has 127.0.0.1."""
    out = []
    if own is None:
        return out
    addrs = own()
    for i in (0, 2):
        ip = parse_ipv4(str(addrs[i])) if addrs[i] is not None else None
        if ip is None or ip >> 24 == 127:
            continue
        out.append(ip)
        mask = parse_ipv4(str(addrs[i + 1])) if addrs[i + 1] is not None else None
        if mask is not None and mask != 0xFFFFFFFF:
            out.append(ip | (~mask & 0xFFFFFFFF))
    return out


class ShellyUdp(Module):
    """pool: socketpool.SocketPool; bus (latest "reading"); settings (emulation.*); ident: shelly_rpc.Identity;
    uptime: callable -> seconds; own: callable -> the device's addresses (own_addresses). Listens only while
    emulation.shelly is on, on emulation.shellyUdpPort and shellyUdpPort2 (0 = that one off): each is one of the
    device's 8 sockets.

    Fair and no reflector (docs/emulation.md): each source gets per_source answers per second, all sources
    together total_per_s; a datagram over either limit is read and dropped before it is parsed, so a flood is
    drained as fast as it comes instead of filling the socket's queue in front of the battery's request. No answer
    goes to a broadcast, multicast or own address or to port 0, and none is sent that is more than max_gain times
    the request's size.

    Known sources keep a floor: a source that asked steadily for earn_ms (no pause over seen_ms, never over
    per_source in a second: a battery asking every 1-4 s) is known, and each known source heard within seen_ms has
    per_source of the total_per_s reserved for it; all other sources, however many, share the rest as one pool. At
    most known_max sources are known at once (the first to earn it keep it: a battery that asked for the last hour
    is not pushed aside by addresses that ask politely for a minute and then all flood within their per_source). So
    16 or 40 flooding addresses, each within its per_source or not, take only the pool and never the battery's
    answers. The peer table is fixed (peers rows): a new source takes a free row or a stranger's (one not heard
    within seen_ms, else the one whose steady run is youngest: a flooder's restarts every second it floods, so
    flooders take each other's rows and a steady source keeps its own), never a known source's. A known source that
    goes over per_source is a stranger again, one silent for keep_ms is forgotten."""

    name = "shelly_udp"
    max_per_poll = 4          # datagrams answered per socket and poll: a flood cannot starve the loop
    reads_per_poll = 32       # datagrams read per socket and poll: the ones over a limit cost a read, not a parse
    per_source = 4            # answers per source address per second (a battery asks every 1-4 s)
    total_per_s = 48          # answers per second to everyone: 8 flooding sources beside the battery still fit
    peers = 16                # sources remembered: a fixed table, a stranger's row gives its place (see above)
    earn_ms = 60000           # a source asking steadily this long is known: a floor of per_source answers a second
    seen_ms = 30000           # a pause this long ends a steady run; a known source heard this recently is about
    keep_ms = 3600000         # a known source is forgotten after this long without a request
    known_max = 6             # known sources at most: their floors (24 answers a second) leave the pool half
    max_gain = 24             # an answer at most this many times the request (EM.GetStatus to the smallest request:
    #                           20x; Shelly.GetStatus to a 29-byte request, 40x: not sent)
    own_every_ms = 5000       # the device's own addresses are read again this often
    retry_ms = 5000           # after a failed bind or out of sockets
    max_datagram = 512        # a battery's request is ~60 bytes; longer ones are not JSON-RPC for us
    budget = None             # core.sockbudget.SocketBudget (the loader sets it): asked before a socket is opened
    serve_every_ms = 20       # sockets read at most this often: an empty read raises (EAGAIN), and a battery that
    #                           asks every 1-4 s does not notice 20 ms

    def __init__(self, pool, bus, settings, ident, energy_floor=None, uptime=None, host="0.0.0.0", own=None):
        Module.__init__(self)
        self._pool = pool
        self._bus = bus
        self._settings = settings
        self._ident = ident
        self._floor = energy_floor
        self._uptime = uptime
        self.host = host
        self._in = bytearray(self.max_datagram)
        self._socks = {}          # port -> socket
        self._failed_at = None
        self.last_answer_ms = None
        self._since_up = None   # uptime (s) when the current run of requests began: the page's "asking since"
        self._last_up = None    # uptime (s) of the newest answer (uptime counts seconds without a tick wrap)
        self._served_at = None
        self._own = own
        self._bad = []            # the device's own addresses and broadcasts (ints), read every own_every_ms
        self._own_at = None
        # Per source: address text, start of its one-second window, answers in it, when last heard.
        self._peer_ip = [None] * self.peers
        self._peer_at = [0] * self.peers
        self._peer_n = [0] * self.peers
        self._peer_heard = [0] * self.peers
        self._peer_since = [0] * self.peers    # start of its steady run
        self._peer_known = [False] * self.peers
        self._total_at = None     # the all-sources window
        self._total_n = 0         # answers in it to everyone
        self._known_n = 0         # ... to known sources
        self._reserved = 0        # answers a second reserved for the known sources about (worked out each window)
        self._pruned_at = None
        # The ports are read again only when the settings change: an idle poll allocates nothing of its own.
        self._changes = bus.subscribe("settings", 4)
        self._ports = self.wanted_ports()

    def wanted_ports(self):
        """The ports to listen on now (none while the emulation is off)."""
        s = self._settings
        if not s.get("emulation.shelly", False):
            return ()
        ports = []
        for key in ("emulation.shellyUdpPort", "emulation.shellyUdpPort2"):
            port = s.get(key, 0)
            if isinstance(port, int) and port > 0 and port not in ports:
                ports.append(port)
        return tuple(ports)

    def poll(self, now_ms):
        changed = False
        while self._changes.pop() is not None:
            changed = True
        if changed:
            self._ports = self.wanted_ports()
            for port in list(self._socks):
                if port not in self._ports:
                    self._socks[port] = close_quietly(self._socks[port])
                    del self._socks[port]
        if len(self._socks) < len(self._ports) and (self._failed_at is None or
                                                   not 0 <= ticks_diff(now_ms, self._failed_at) < self.retry_ms):
            for port in self._ports:
                if port not in self._socks:
                    self._open(port, now_ms)
        if self._served_at is not None and 0 <= ticks_diff(now_ms, self._served_at) < self.serve_every_ms:
            return
        self._served_at = now_ms
        if self._pruned_at is None or _age(now_ms, self._pruned_at) >= 1000:
            self._pruned_at = now_ms
            self._prune(now_ms)
        for port in self._ports:
            sock = self._socks.get(port)
            if sock is not None:
                self._serve(sock, now_ms)

    def _admit(self, addr, now_ms):
        """True when a datagram from addr may be parsed and answered (counted against its source and the total);
        False (counted) for a bad sender or one over a limit. Allocates nothing for a known source."""
        ip = addr[0]
        if addr[1] == 0:
            self.count("bad_sender")
            return False
        self._refresh_own(now_ms)
        slot = -1
        for i in range(self.peers):
            if self._peer_ip[i] == ip:
                slot = i
                break
        if slot < 0:
            # Only a good sender gets a row (so the check, which parses the address, runs once per new source,
            # and forged broadcast or multicast senders never push a battery out of the table).
            if self._bad_sender(ip):
                self.count("bad_sender")
                return False
            slot = self._free_row(now_ms)
            if slot < 0:
                self.count("no_row")      # every row is a known source's: they come first
                return False
            self._peer_ip[slot] = ip
            self._peer_at[slot] = now_ms
            self._peer_n[slot] = 0
            self._peer_since[slot] = now_ms
            self._peer_known[slot] = False
        elif _age(now_ms, self._peer_heard[slot]) >= self.seen_ms:
            self._peer_since[slot] = now_ms       # a pause: the steady run begins again
        self._peer_heard[slot] = now_ms
        if _age(now_ms, self._peer_at[slot]) >= 1000:
            self._peer_at[slot] = now_ms
            self._peer_n[slot] = 0
        if self._total_at is None or _age(now_ms, self._total_at) >= 1000:
            self._total_at = now_ms
            self._total_n = 0
            self._known_n = 0
            self._reserved = self.per_source * self._known_about(now_ms, True)
        known = self._peer_known[slot]
        self._peer_n[slot] += 1                   # every datagram counts, answered or not: a source the total
        if self._peer_n[slot] > self.per_source:  # refuses must not look steady while it floods
            self._peer_since[slot] = now_ms       # over its limit: not steady, a stranger again
            if known:
                self._peer_known[slot] = False
                self._reserved = max(0, self._reserved - self.per_source)
            self.count("source_limited")
            return False
        if not known and _age(now_ms, self._peer_since[slot]) >= self.earn_ms:
            self._peer_since[slot] = now_ms       # a full table: it may try again after another earn_ms
            if self._known_about(now_ms, False) < self.known_max:
                known = self._peer_known[slot] = True
                self._reserved += self.per_source
        if known:
            ok = self._known_n < self._reserved or self._total_n < self.total_per_s
        else:
            ok = self._total_n - self._known_n < self.total_per_s - self._reserved and \
                self._total_n < self.total_per_s
        if not ok:
            self.count("total_limited")
            return False
        self._total_n += 1
        if known:
            self._known_n += 1
        return True

    def _free_row(self, now_ms):
        """The row a new source takes: a free one, else a stranger's (one not heard within seen_ms first, else the
        one whose steady run is youngest), never a known source's; -1 when every row is known."""
        best = -1
        best_rank = -1
        for i in range(self.peers):
            if self._peer_ip[i] is None:
                return i
            if self._peer_known[i]:
                continue
            heard = _age(now_ms, self._peer_heard[i])
            # older silence first; among sources about, the youngest run (smallest age) first
            rank = heard + _LONG_AGO if heard >= self.seen_ms else _LONG_AGO - min(_age(now_ms, self._peer_since[i]),
                                                                                   _LONG_AGO)
            if rank > best_rank:
                best, best_rank = i, rank
        return best

    def _known_about(self, now_ms, about):
        """Known sources (about: only those heard within seen_ms)."""
        n = 0
        for i in range(self.peers):
            if self._peer_known[i] and self._peer_ip[i] is not None and \
                    (not about or _age(now_ms, self._peer_heard[i]) < self.seen_ms):
                n += 1
        return n

    def _prune(self, now_ms):
        """Once a second: rows silent beyond keep_ms (known) or seen_ms (strangers) are freed, so no stamp in the
        table grows old enough for the tick wrap to make it look recent again."""
        for i in range(self.peers):
            if self._peer_ip[i] is not None and \
                    _age(now_ms, self._peer_heard[i]) >= (self.keep_ms if self._peer_known[i] else self.seen_ms):
                self._peer_ip[i] = None
                self._peer_known[i] = False
        if self._total_at is not None and _age(now_ms, self._total_at) >= 1000:
            self._total_at = None

    def _refresh_own(self, now_ms):
        """Read the device's own addresses again every own_every_ms; when they changed, the table is emptied (its
        rows were judged against the old ones)."""
        if self._own is None or (self._own_at is not None and _age(now_ms, self._own_at) < self.own_every_ms):
            return
        self._own_at = now_ms
        bad = _bad_destinations(self._own)
        if bad != self._bad:
            self._bad = bad
            for i in range(self.peers):
                self._peer_ip[i] = None

    def _bad_sender(self, ip):
        """True for a source no answer may go to: broadcast, multicast, 0.0.0.0/8, the device's own addresses."""
        n = parse_ipv4(ip)
        if n is None:
            return True
        first = n >> 24
        if first == 0 or first >= 224 or n == 0xFFFFFFFF:
            return True
        return n in self._bad

    def _serve(self, sock, now_ms):
        answered = 0
        for _ in range(self.reads_per_poll):
            if answered >= self.max_per_poll:
                return
            try:
                n, addr = sock.recvfrom_into(self._in)
            except OSError as exc:
                if errno_of(exc) != EAGAIN:
                    self.count("recv_errors")
                return
            if not self._admit(addr, now_ms):
                continue              # dropped before parsing
            answered += 1
            current = view(self._bus.latest("reading"), now_ms, self._floor)
            if current is None or current.power is None:
                self.count("stale_silent")    # no answer at all: the battery keeps its own safe state
                continue
            answer = shelly_rpc.answer_datagram(bytes(self._in[:n]), current, self._ident,
                                                self._uptime() if self._uptime is not None else 0)
            if answer is None:
                self.count("ignored")
                continue
            if len(answer) > self.max_gain * n:
                self.count("too_large")   # a reflector's gain: the request must be larger to get this answer
                continue
            try:
                sock.sendto(answer, addr)
                self.count("answers")
                self.last_answer_ms = now_ms
                self._note_answer()
            except OSError:
                self.count("send_errors")

    def sockets_held(self):
        """Sockets open now: one per listening port (core/sockbudget.py)."""
        return len(self._socks)

    def lend_socket(self):
        """A listening socket the SMA sender may send its datagrams through (the lowest port's), or None."""
        if not self._socks:
            return None
        return self._socks[min(self._socks)]

    def _open(self, port, now_ms):
        if self.budget is not None and not self.budget.may_take():
            self.count("budget_refused")   # HTTP keeps its three: tried again after retry_ms
            self._failed_at = now_ms
            return
        try:
            sock = self._pool.socket(self._pool.AF_INET, self._pool.SOCK_DGRAM)
        except (OSError, RuntimeError):  # out of sockets is a RuntimeError on CircuitPython
            self.count("no_socket")
            self._failed_at = now_ms
            return
        try:
            sock.setblocking(False)
            sock.bind((self.host, port))
        except OSError:
            sock.close()
            self.count("bind_errors")
            self._failed_at = now_ms
            return
        self._socks[port] = sock
        self._failed_at = None

    def stop(self):
        for port in list(self._socks):
            close_quietly(self._socks[port])
        self._socks = {}

    def release(self):
        """Stop receiving settings changes: the listener is let go (services/emulation/loader.py)."""
        self._bus.unsubscribe("settings", self._changes)

    quiet_s = 60  # a pause this long ends a run of requests: the next answer starts a new one

    def _note_answer(self):
        if self._uptime is None:
            return
        up = self._uptime()
        if self._last_up is None or up - self._last_up > self.quiet_s:
            self._since_up = up
        self._last_up = up

    def describe(self):
        d = Module.describe(self)
        d["ports"] = ",".join(str(p) for p in sorted(self._socks))   # a string: /system/info sections skip lists
        # For the page's words ("asking since 12:03 · 1,234 answers"): seconds since the run of requests began and
        # since the newest answer, None before the first answer.
        up = self._uptime() if self._uptime is not None else None
        d["since_s"] = up - self._since_up if up is not None and self._since_up is not None else None
        d["last_s"] = up - self._last_up if up is not None and self._last_up is not None else None
        return d


def _age(now_ms, stamp):
    """Milliseconds since stamp; a stamp ticks_diff cannot place (or from the future) counts as long ago."""
    d = ticks_diff(now_ms, stamp)
    return d if d >= 0 else _LONG_AGO
