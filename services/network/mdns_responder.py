"""Our own mDNS responder (RFC 6762/6763) on one UDP socket: A, SRV, TXT and PTR records, probing, announcing,
QM/QU/legacy answers, known-answer suppression, goodbyes and conflict renaming."""

import errno

from adafruit_ticks import ticks_diff
from micropython import const

from core.elapsed import fresh
from core.module import OK, WARN, Module
from core.sockets import close_quietly
from services.network.mdns_wire import (
    CACHE_FLUSH,
    CLASS_IN,
    TYPE_A,
    TYPE_ANY,
    TYPE_PTR,
    TYPE_SRV,
    TYPE_TXT,
    Record,
    Writer,
    compare_bytes,
    encode_name,
    encode_txt,
    name_equals,
    name_hash,
    skip_name,
)

MDNS_GROUP = "224.0.0.251"
MDNS_PORT = 5353
_IPPROTO_IP = const(0)
_IP_ADD_MEMBERSHIP = const(3)   # lwIP's number: CircuitPython's setsockopt passes level and option to lwIP as given
_IP_MULTICAST_TTL = const(5)
_HEADER = const(12)
_MAX_QUESTIONS = const(32)      # parsed per packet: bounded work whatever the counts in the header say
_MAX_RECORDS = const(64)
_TTL_HOST = const(120)          # RFC 6762 10: records with a host name in them
_TTL_OTHER = const(4500)
_TTL_LEGACY = const(10)         # RFC 6762 6.7: answers to a legacy (non-5353) querier
_PROBE_MS = const(250)
_ANNOUNCE_MS = const(1000)
_DEFER_MS = const(1000)         # lost a simultaneous-probe tie-break: probe again after a second
_SERVICES = "_services._dns-sd._udp.local"

# phases
_IDLE = const(0)       # no address yet
_PROBING = const(1)
_ANNOUNCING = const(2)
_RUNNING = const(3)


class MdnsResponder(Module):
    """pool (socketpool.SocketPool); address: callable -> the station's IPv4 as 4 bytes or None; hostname (without
    .local); services: callable -> [(instance, service type such as "_http._tcp", port, [TXT "k=v", ...])], asked
    again when changed() says so; host/port to bind: 0.0.0.0:5353 joins 224.0.0.251 (the device), any other port
    answers unicast only (the host runtime's --mdns-port). fallback: callable -> a Module used instead when the
    multicast join fails (CircuitPython's own mdns module, without TXT). log: core.log.Log or None.
    """

    name = "mdns"
    poll_every_ms = 100          # RFC 6762 6: a unique answer within ~10 ms, shared 20-120 ms; 100 ms is our tick
    max_per_poll = 4             # datagrams handled per poll: a flood cannot starve the loop
    address_every_ms = 2000      # how often the station address is checked (an ipaddress object on the device)
    conflict_burst = 15          # RFC 6762 8.1: this many conflicts within burst_window_ms, and probing waits...
    burst_window_ms = 10000
    burst_wait_ms = 5000         # ... this long before each further attempt, until a window passes without one

    sockets = None     # core.sockbudget.SocketBudget (the wiring sets it): asked before the socket is opened

    def sockets_held(self):
        """1 while our responder's socket is open (core/sockbudget.py)."""
        return 0 if self._sock is None else 1

    def lendable(self):
        """True while our socket is open: an NTP round may have it when no other is free (core/sockbudget.py)."""
        return self._sock is not None

    def lend(self):
        """Give our socket to an NTP round (the budget asks when none other is free): closed without a goodbye, as
        the name comes back within seconds; poll() opens it again once it fits, then joins and probes afresh."""
        self._sock = close_quietly(self._sock)
        self._lent = True
        self._ip = None
        self._phase = _IDLE
        self.count("lent")

    def __init__(self, pool, address, hostname, services, changed=None, host="0.0.0.0", port=MDNS_PORT,
                 fallback=None, log=None, budget=None):
        Module.__init__(self)
        self._budget = budget        # callable -> None while our socket fits the device's 8, else why not
        self._budget_was = None
        self._pool = pool
        self._address = address
        self.base = hostname
        self.hostname = hostname
        self._services_fn = services
        self._changed = changed      # callable -> a value that differs when the services change (or None)
        self._changed_was = None
        self.host = host
        self.port = port
        self.multicast = port == MDNS_PORT
        self._fallback_fn = fallback
        self.fallback = None
        self.fallback_reason = None
        self._log = log
        self._in = bytearray(1500)
        self._out = bytearray(1200)
        self._w = Writer(self._out)
        self._sock = None
        self._ip = None
        self._records = []
        self._want = bytearray(0)    # per record: 1 answer, 2 additional
        self._wanted = 0             # records marked 1
        self._asked = []             # a legacy query's questions we answer: (our name, qtype, qclass, offset)
        self._phase = _IDLE
        self._step = 0
        self._next_ms = 0
        self._addr_ms = None
        self._renames = 0
        self._burst_ms = None        # ticks: the start of the conflict window being counted
        self._burst_n = 0
        self._held = False           # 15 conflicts within 10 s: at most one rename per burst_wait_ms, not logged
        self._conflict_ms = None     # ticks of the last conflict heard
        self._renamed_ms = None      # ticks of the last rename
        self._group = (MDNS_GROUP, MDNS_PORT)
        self._lent = False           # our socket is an NTP round's for now (lend): taken back once it fits

    # --- the record set ---

    def fqdn(self):
        return self.hostname + ".local"

    def _suffix(self):
        return "" if self._renames == 0 else "-%d" % (self._renames + 1)

    def build(self):
        """(Re)build the records from the host name, the address and the services (allocation, not per packet)."""
        suffix = self._suffix()
        self.hostname = self.base + suffix
        host = encode_name(self.hostname + ".local")
        recs = []
        a = None
        if self._ip is not None:
            a = Record(host, TYPE_A, True, _TTL_HOST, bytes(self._ip))
            recs.append(a)
        types = []
        for instance, stype, port, txt in self._services_fn():
            tname = encode_name(stype + ".local")
            iname = encode_name(instance + suffix + "." + stype + ".local")
            srv = Record(iname, TYPE_SRV, True, _TTL_HOST,
                         bytes((0, 0, 0, 0, port >> 8, port & 0xFF)) + host, 6)
            txtr = Record(iname, TYPE_TXT, True, _TTL_OTHER, encode_txt(txt))
            ptr = Record(tname, TYPE_PTR, False, _TTL_OTHER, iname, 0)
            ptr.extra = (srv, txtr) + ((a,) if a is not None else ())
            srv.extra = (a,) if a is not None else ()
            recs.append(ptr)
            recs.append(srv)
            recs.append(txtr)
            if tname not in types:
                types.append(tname)
        enum = encode_name(_SERVICES)
        for tname in types:
            recs.append(Record(enum, TYPE_PTR, False, _TTL_OTHER, tname, 0))
        self._records = recs
        self._want = bytearray(len(recs))
        return recs

    def records(self):
        return self._records

    # --- life cycle ---

    def start(self):
        if self._changed is not None:
            self._changed_was = self._changed()
        self._phase = _IDLE
        self._addr_ms = None
        self._ip = None
        if self.fallback is not None:       # a restart after a fault: the system responder again
            self.fallback.start()
            return
        self._budget_was = self._budget() if self._budget is not None else None
        if self._budget_was is not None:
            # The features on may need every socket: the HTTP API (the owner's way in) must keep its own, and
            # CircuitPython's responder uses none (ESP-IDF's own UDP pcb).
            self._use_fallback(self._budget_was)
            return
        why = self._open()
        if why is not None:
            self._use_fallback(why)
            return
        self.build()

    def _open(self):
        """Open and bind our socket; None, or why not."""
        self._lent = False
        if self.sockets is not None and not self.sockets.may_take():
            return "socket budget: the HTTP API keeps its listener and two clients"
        try:
            sock = self._pool.socket(self._pool.AF_INET, self._pool.SOCK_DGRAM)
        except (OSError, RuntimeError) as exc:   # out of sockets is a RuntimeError on CircuitPython
            return "no socket: %s" % exc
        try:
            sock.setblocking(False)
            sock.bind((self.host, self.port))
        except OSError as exc:
            sock.close()
            return "bind to port %d failed: %s" % (self.port, exc)
        self._sock = sock
        return None

    def _take_back(self, now_ms):
        """After an NTP round had our socket: open it again when it fits (looked at every address_every_ms)."""
        if self._addr_ms is not None and 0 <= ticks_diff(now_ms, self._addr_ms) < self.address_every_ms:
            return
        self._addr_ms = now_ms
        if self._open() is None:
            self._addr_ms = None       # the address at once: join the group, probe, announce
            self.count("taken_back")
        else:
            self._lent = True          # still every socket in use: the next look

    def _join(self, ip):
        """Join 224.0.0.251 on the station interface (an ip_mreq: group, interface); False when lwIP refuses."""
        try:
            mreq = bytes((224, 0, 0, 251)) + bytes(ip)
            self._sock.setsockopt(_IPPROTO_IP, _IP_ADD_MEMBERSHIP, mreq)
            self._sock.setsockopt(_IPPROTO_IP, _IP_MULTICAST_TTL, 255)
            return True
        except (OSError, TypeError, ValueError) as exc:
            self._use_fallback("multicast join failed: %s" % exc)
            return False

    def _use_fallback(self, reason):
        self.fallback_reason = reason
        self.state = WARN
        if self._log is not None:
            self._log.warning("mdns: %s, using the system responder (no TXT records)", reason)
        self._sock = close_quietly(self._sock)
        if self._fallback_fn is not None:
            self.fallback = self._fallback_fn()
            self.fallback.start()

    def stop(self):
        if self.fallback is not None:
            self.fallback.stop()        # kept: start() after a restart goes back to it
            return
        if self._sock is not None and self.multicast and self._phase >= _ANNOUNCING:
            self._goodbye(self._records)
        self._sock = close_quietly(self._sock)
        self._phase = _IDLE

    def describe(self):
        d = Module.describe(self)
        d["hostname"] = self.fqdn()
        d["responder"] = "system" if self.fallback is not None else "own"
        if self.fallback_reason is not None:
            d["fallback_reason"] = self.fallback_reason
        d["records"] = len(self._records)
        return d

    # --- the loop ---

    def _budget_changed(self, now_ms):
        """Settings changed what the features need (Modbus, the emulations): start again, with our socket or the
        system responder, whichever the budget says (looked at every address_every_ms)."""
        if self._budget is None:
            return False
        if self._addr_ms is not None and 0 <= ticks_diff(now_ms, self._addr_ms) < self.address_every_ms:
            return False
        verdict = self._budget()
        if verdict == self._budget_was:
            return False
        self.stop()
        if self.fallback is not None:
            self.fallback = None          # the system responder let go: start() decides afresh
            self.fallback_reason = None
            self.state = OK
        self.start()
        self._addr_ms = now_ms
        return True

    def poll(self, now_ms):
        if self.fallback is not None:
            if self._budget_was is not None and self._budget_changed(now_ms):
                return
            if self.fallback is not None:
                self.fallback.poll(now_ms)
                if self._addr_ms is None or ticks_diff(now_ms, self._addr_ms) >= self.address_every_ms:
                    self._addr_ms = now_ms
            return
        if self._budget_changed(now_ms):
            return
        if self._sock is None:
            if self._lent:
                self._take_back(now_ms)
            return
        if self._addr_ms is None or ticks_diff(now_ms, self._addr_ms) >= self.address_every_ms:
            self._addr_ms = now_ms
            self._check_address(now_ms)
            if self._sock is None:
                return
            self._check_services(now_ms)
        for _ in range(self.max_per_poll):
            try:
                n, addr = self._sock.recvfrom_into(self._in)
            except OSError as exc:
                if exc.errno != errno.EAGAIN:
                    self.count("recv_errors")
                break
            if self._ip is None:       # asked before the periodic check saw the address: look now (the A record)
                self._check_address(now_ms)
                if self._sock is None:
                    return
            try:
                self._handle(n, addr, now_ms)
            except Exception:      # a packet never takes the responder down (fuzzed: this is a last net)
                self.count("bad_packets")
        if self._phase in (_PROBING, _ANNOUNCING) and ticks_diff(now_ms, self._next_ms) >= 0:
            self._advance(now_ms)

    def _check_address(self, now_ms):
        ip = self._address()
        if ip == self._ip:
            return
        ip = bytes(ip) if ip is not None else None
        if self._ip is not None and ip is None and self.multicast and self._phase >= _ANNOUNCING:
            self._goodbye(self._records)
        self._ip = ip
        self.build()
        if ip is None:
            self._phase = _IDLE
            return
        if self.multicast:
            if not self._join(ip):
                return
            self._probe_from(now_ms)
        else:
            self._phase = _RUNNING

    def _check_services(self, now_ms):
        if self._changed is None:
            return
        v = self._changed()
        if v == self._changed_was:
            return
        self._changed_was = v
        old = self._records
        self.build()
        if not self.multicast or self._phase == _IDLE:
            return
        gone = [r for r in old if not self._has(r)]
        if gone and self._phase >= _ANNOUNCING:
            self._goodbye(gone)
        self._probe_from(now_ms)
        self.count("service_changes")

    def _has(self, rec):
        for r in self._records:
            if r.rtype == rec.rtype and r.name == rec.name and r.rdata == rec.rdata:
                return True
        return False

    def _probe_from(self, now_ms):
        self._phase = _PROBING
        self._step = 0
        self._next_ms = now_ms

    def _advance(self, now_ms):
        if self._phase == _PROBING:
            if self._step < 3:
                self._send_probe(self._step == 0)
                self._step += 1
                self._next_ms = now_ms + _PROBE_MS
                return
            self._phase = _ANNOUNCING
            self._step = 0
        if self._step < 2:
            self._announce(now_ms)
            self._step += 1
            self._next_ms = now_ms + _ANNOUNCE_MS
            return
        self._phase = _RUNNING

    # --- sending ---

    def _send(self, size, addr):
        try:
            self._sock.sendto(memoryview(self._out)[:size], addr)
            self.count("sent")
            return True
        except OSError:
            self.count("send_errors")
            return False

    def _unique_names(self):
        names = []
        for r in self._records:
            if r.unique and r.name not in names:
                names.append(r.name)
        return names

    def _send_probe(self, qu):
        """A query for every unique name (ANY, QU on the first) with our proposed records in the authority section."""
        w = self._w
        w.reset(len(self._out), _HEADER)
        names = self._unique_names()
        for nm in names:
            w.name(nm)
            w.u16(TYPE_ANY)
            w.u16(CLASS_IN | (CACHE_FLUSH if qu else 0))
        ns = 0
        for r in self._records:
            if r.unique and w.record(r, CLASS_IN, r.ttl):
                ns += 1
        self._header(0, 0, len(names), 0, ns, 0)
        self._send(w.pos, self._group)
        self.count("probes")

    def _announce(self, now_ms):
        w = self._w
        w.reset(len(self._out), _HEADER)
        an = 0
        for r in self._records:
            if w.record(r, CLASS_IN | (CACHE_FLUSH if r.unique else 0), r.ttl):
                r.sent_ms = now_ms
                an += 1
        self._header(0, 0x8400, 0, an, 0, 0)
        self._send(w.pos, self._group)
        self.count("announcements")

    def _goodbye(self, recs):
        """RFC 6762 10.1: the records with TTL 0, so caches drop them within a second."""
        w = self._w
        w.reset(len(self._out), _HEADER)
        an = 0
        for r in recs:
            if w.record(r, CLASS_IN | (CACHE_FLUSH if r.unique else 0), 0):
                an += 1
        if an:
            self._header(0, 0x8400, 0, an, 0, 0)
            self._send(w.pos, self._group)
            self.count("goodbyes")

    def _header(self, qid, flags, qd, an, ns, ar):
        o = self._out
        for i, v in enumerate((qid, flags, qd, an, ns, ar)):
            o[2 * i] = v >> 8
            o[2 * i + 1] = v & 0xFF

    # --- receiving ---

    def _handle(self, n, addr, now_ms):
        buf = self._in
        if n < _HEADER:
            self.count("bad_packets")
            return
        flags = (buf[2] << 8) | buf[3]
        if flags & 0x7800:          # opcode other than QUERY: ignored (RFC 6762 18.3)
            return
        if flags & 0x8000:
            # RFC 6762 6: every mDNS response comes from port 5353; one from any other port (a legacy unicast DNS
            # answer, or a forgery from an ephemeral port) is silently ignored: it never claims one of our names
            if addr[1] != MDNS_PORT:
                self.count("responses_off_port")
                return
            self._response(buf, n, now_ms)
        else:
            self._query(buf, n, addr, now_ms)

    def _query(self, buf, n, addr, now_ms):
        qd = (buf[4] << 8) | buf[5]
        an = (buf[6] << 8) | buf[7]
        ns = (buf[8] << 8) | buf[9]
        if qd == 0 or qd > _MAX_QUESTIONS:
            return
        recs = self._records
        want = self._want
        for i in range(len(want)):
            want[i] = 0
        self._wanted = 0
        legacy = addr[1] != MDNS_PORT or not self.multicast
        qu = False
        pos = _HEADER
        asked = self._asked
        del asked[:]
        for _ in range(qd):
            end = skip_name(buf, n, pos)
            if end < 0 or end + 4 > n:
                self.count("bad_packets")
                return
            qtype = (buf[end] << 8) | buf[end + 1]
            qclass = (buf[end + 2] << 8) | buf[end + 3]
            h = name_hash(buf, n, pos)
            if (qclass & 0x7FFF) in (CLASS_IN, TYPE_ANY) and h >= 0:
                for i in range(len(recs)):
                    r = recs[i]
                    if r.hash == h and (qtype == r.rtype or qtype == TYPE_ANY) and name_equals(buf, n, pos, r.name):
                        if want[i] == 0:
                            self._wanted += 1
                        want[i] = 1
                        if qclass & CACHE_FLUSH:
                            qu = True
                        if legacy and len(asked) < 4 and (not asked or asked[-1][3] != pos):
                            asked.append((r.name, qtype, qclass, pos))
            pos = end + 4
        # known answers (RFC 6762 7.1): a record the asker holds with at least half its TTL left is not sent
        pos = self._known_answers(buf, n, pos, an, now_ms)
        if pos < 0:
            return
        if ns and self._phase == _PROBING and not legacy:   # a probe comes from port 5353 (RFC 6762 8.2)
            self._tie_break(buf, n, pos, ns, now_ms)
        if self._wanted == 0:
            return
        for i in range(len(recs)):
            if want[i] == 1:
                for x in recs[i].extra:
                    j = recs.index(x)
                    if want[j] == 0:
                        want[j] = 2
        if self._phase != _RUNNING and self._phase != _ANNOUNCING and self.multicast:
            return                  # not ours to answer until the probes are through
        if legacy or not self.multicast:   # off port 5353 (the host's --mdns-port) every answer goes to the asker
            self._answer_legacy(buf, n, addr)
            return
        if qu and self._answer_unicast(n, addr, now_ms):
            return
        self._answer_multicast(now_ms)

    def _known_answers(self, buf, n, pos, an, now_ms):
        recs = self._records
        want = self._want
        for _ in range(an if an < _MAX_RECORDS else _MAX_RECORDS):
            end = skip_name(buf, n, pos)
            if end < 0 or end + 10 > n:
                self.count("bad_packets")
                return -1
            rtype = (buf[end] << 8) | buf[end + 1]
            ttl = (buf[end + 4] << 24) | (buf[end + 5] << 16) | (buf[end + 6] << 8) | buf[end + 7]
            rdlen = (buf[end + 8] << 8) | buf[end + 9]
            data = end + 10
            if data + rdlen > n:
                self.count("bad_packets")
                return -1
            h = name_hash(buf, n, pos)
            for i in range(len(recs)):
                r = recs[i]
                if (want[i] and r.hash == h and r.rtype == rtype and 2 * ttl >= r.ttl
                        and name_equals(buf, n, pos, r.name) and r.rdata_equals(buf, n, data, rdlen)):
                    want[i] = 0
                    self._wanted -= 1
                    self.count("known_answers")
            pos = data + rdlen
        return pos

    def _tie_break(self, buf, n, pos, ns, now_ms):
        """Someone else probes for a name we probe for (RFC 6762 8.2): the lexicographically later data wins; we
        defer a second when theirs is later. Identical data is our own probe looped back."""
        for _ in range(ns if ns < _MAX_RECORDS else _MAX_RECORDS):
            end = skip_name(buf, n, pos)
            if end < 0 or end + 10 > n:
                return
            rtype = (buf[end] << 8) | buf[end + 1]
            rdlen = (buf[end + 8] << 8) | buf[end + 9]
            data = end + 10
            if data + rdlen > n:
                return
            h = name_hash(buf, n, pos)
            for r in self._records:
                if r.unique and r.hash == h and r.rtype == rtype and name_equals(buf, n, pos, r.name):
                    if r.name_at < 0 and compare_bytes(buf, data, data + rdlen, r.rdata) > 0:
                        self.count("probe_deferred")
                        self._phase = _PROBING
                        self._step = 0
                        self._next_ms = now_ms + _DEFER_MS
                        return
            pos = data + rdlen

    def _response(self, buf, n, now_ms):
        """A response on the link: one that claims a unique name of ours with other data is a conflict."""
        qd = (buf[4] << 8) | buf[5]
        count = ((buf[6] << 8) | buf[7]) + ((buf[8] << 8) | buf[9]) + ((buf[10] << 8) | buf[11])
        pos = _HEADER
        for _ in range(qd if qd < _MAX_QUESTIONS else _MAX_QUESTIONS):
            end = skip_name(buf, n, pos)
            if end < 0 or end + 4 > n:
                return
            pos = end + 4
        for _ in range(count if count < _MAX_RECORDS else _MAX_RECORDS):
            end = skip_name(buf, n, pos)
            if end < 0 or end + 10 > n:
                return
            rtype = (buf[end] << 8) | buf[end + 1]
            rclass = ((buf[end + 2] << 8) | buf[end + 3]) & 0x7FFF
            ttl = (buf[end + 4] << 24) | (buf[end + 5] << 16) | (buf[end + 6] << 8) | buf[end + 7]
            rdlen = (buf[end + 8] << 8) | buf[end + 9]
            data = end + 10
            if data + rdlen > n:
                return
            h = name_hash(buf, n, pos) if rclass == CLASS_IN and ttl else -1
            if h >= 0:
                for r in self._records:
                    if not r.unique or r.hash != h or not name_equals(buf, n, pos, r.name):
                        continue
                    # probing: any record with our name is a conflict; later: the same type with other data. Never
                    # a record equal to one of ours (RFC 6762 9: inconsistent rdata): a probe after the services
                    # changed (the Shelly turned on) hears our own earlier announcement, looped back or from a cache.
                    if self._phase == _PROBING or (r.rtype == rtype and not r.rdata_equals(buf, n, data, rdlen)):
                        if not self._same_set(buf, n, pos, rtype, data, rdlen):
                            self._conflict(now_ms)
                            return
            pos = data + rdlen

    def _same_set(self, buf, n, pos, rtype, data, rdlen):
        # a record of ours with this name, type and data (we may hold several of one type): no conflict
        for r in self._records:
            if r.rtype == rtype and name_equals(buf, n, pos, r.name) and r.rdata_equals(buf, n, data, rdlen):
                return True
        return False

    def _conflict(self, now_ms):
        """RFC 6762 9: another host holds our name: take the next one (meterplus-<id>-2, -3, ...) and probe it.
        RFC 6762 8.1: after conflict_burst conflicts within burst_window_ms each further probe waits burst_wait_ms;
        here the rename waits with it (a conflict heard meanwhile is for the name that waits to be probed: the probe
        finds out) and is not logged, until a whole window passes without a conflict. A host that answers from port
        5353 for every name we take costs at most one rename and no log line per 5 s."""
        self.count("conflicts")
        quiet = self._conflict_ms is None or not fresh(self._conflict_ms, now_ms, self.burst_window_ms)
        self._conflict_ms = now_ms
        if self._held and quiet:
            self._held = False
        entering = False
        if self._held:
            if self._renamed_ms is not None and fresh(self._renamed_ms, now_ms, self.burst_wait_ms):
                self.count("conflicts_held")
                return
        else:
            if self._burst_ms is None or not fresh(self._burst_ms, now_ms, self.burst_window_ms):
                self._burst_ms = now_ms
                self._burst_n = 0
            self._burst_n += 1
            if self._burst_n >= self.conflict_burst:
                self._held = entering = True
                self.count("conflict_bursts")
        old = self._records
        if self._phase >= _ANNOUNCING:
            self._goodbye(old)
        self._renames += 1
        self._renamed_ms = now_ms
        self.build()
        self._probe_from(now_ms)
        if self._held:
            self._next_ms = now_ms + self.burst_wait_ms
        if self._log is not None and (entering or not self._held):
            if entering:
                self._log.warning("mdns: %d name conflicts within %d s, now %s: each further rename waits %d s and is "
                                  "not logged (see the conflicts counters)", self._burst_n,
                                  self.burst_window_ms // 1000, self.fqdn(), self.burst_wait_ms // 1000)
            else:
                self._log.warning("mdns: name conflict, now %s", self.fqdn())

    # --- answering ---

    def _answer_multicast(self, now_ms):
        w = self._w
        w.reset(len(self._out), _HEADER)
        an = self._write(w, 1, True, now_ms, True)
        ar = self._write(w, 2, True, now_ms, True)
        if an == 0:
            self.count("suppressed")
            return
        self._header(0, 0x8400, 0, an, 0, ar)
        self._send(w.pos, self._group)
        self.count("answers")

    def _answer_unicast(self, n, addr, now_ms):
        """QU from port 5353: a unicast reply to the asker, at most twice the query's size (no amplification);
        False when even the answers do not fit, so they go to the group instead (RFC 6762 5.4)."""
        w = self._w
        w.reset(2 * n, _HEADER)
        an = self._write(w, 1, True, now_ms, False)
        if an == 0 or an < self._wanted:
            return False
        ar = self._write(w, 2, True, now_ms, False)
        self._header(0, 0x8400, 0, an, 0, ar)
        self._send(w.pos, addr)
        self.count("answers_unicast")
        return True

    def _answer_legacy(self, buf, n, addr):
        """A querier not on port 5353 (a plain DNS resolver, RFC 6762 6.7): its id and the questions we answer
        repeated (in our spelling, so the answers' names compress against them), no cache-flush bit, TTL at most
        10 s, the whole answer at most twice the query's size (TC when an answer had to be left out)."""
        w = self._w
        w.reset(2 * n, _HEADER)
        qd = 0
        for name, qtype, qclass, _pos in self._asked:
            if not w.name(name) or not w.fits(4):
                return
            w.u16(qtype)
            w.u16(qclass & 0x7FFF)
            qd += 1
        an = self._write(w, 1, False, 0, False)
        ar = self._write(w, 2, False, 0, False)
        cut = an < self._wanted
        self._header((buf[0] << 8) | buf[1], 0x8400 | (0x0200 if cut else 0), qd, an, 0, ar)
        self._send(w.pos, addr)
        self.count("answers_legacy")

    def _write(self, w, which, flush, now_ms, multicast):
        """Write the records marked `which` (1 answers, 2 additionals) that fit; returns how many."""
        recs = self._records
        want = self._want
        count = 0
        for i in range(len(recs)):
            if want[i] != which:
                continue
            r = recs[i]
            if multicast and r.sent_ms is not None and 0 <= ticks_diff(now_ms, r.sent_ms) < 1000:
                continue           # multicast within the last second (RFC 6762 6)
            rrclass = CLASS_IN | (CACHE_FLUSH if flush and r.unique else 0)
            ttl = r.ttl if flush else (r.ttl if r.ttl < _TTL_LEGACY else _TTL_LEGACY)
            if not w.record(r, rrclass, ttl):
                if which == 1:
                    break
                continue
            if multicast:
                r.sent_ms = now_ms
            count += 1
        return count


def service_list(device_id, port, version, shelly_on, shelly_ident=None):
    """What Meter Plus advertises: the web interface (_http._tcp), the API for the WattWächter integration
    (_wattwaechter._tcp with the TXT keys its zeroconf step reads: id, model, ver, mac as AA:BB:CC:DD:EE:FF, the
    form /system/info gives) and, while the Shelly emulation is on, a Shelly Pro 3EM (_shelly._tcp and _http._tcp
    under shellypro3em-<id> with Gen2 TXT keys).
    """
    # The instance name carries the id's last 6 digits (as CircuitPython's cpy-xxxxxx): a plain DNS query for
    # _http._tcp is 34 bytes, and its answer fits twice that only with an instance name of at most 19 characters.
    inst = "meterplus-" + device_id[-6:]
    mac = ":".join(device_id[i:i + 2] for i in range(0, 12, 2)).upper()
    out = [
        (inst, "_http._tcp", port, ["path=/"]),
        (inst, "_wattwaechter._tcp", port, ["id=" + device_id, "model=MeterPlus", "ver=" + version, "mac=" + mac]),
    ]
    if shelly_on:
        if shelly_ident is None:
            from services.emulation.shelly_rpc import APP, FW_ID, FW_VER
            shelly_ident = (APP, FW_VER, FW_ID)
        app, ver, fw_id = shelly_ident
        sid = "shellypro3em-" + device_id
        # the keys Gen2 firmware publishes (arch as Gen2 devices give it)
        txt = ["gen=2", "app=" + app, "ver=" + ver, "id=" + sid, "arch=esp8266", "fw_id=" + fw_id]
        out.append((sid, "_shelly._tcp", port, txt))
        out.append((sid, "_http._tcp", port, txt))
    return out
