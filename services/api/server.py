"""Hardened HTTP server on adafruit_httpserver 4.8.2: non-blocking per-connection state machine, deadlines, limits."""

import errno
import json

import adafruit_httpserver
from adafruit_httpserver import ChunkedResponse, Headers, JSONResponse, Redirect, Response, Server
from adafruit_httpserver.mime_types import MIMETypes
from adafruit_ticks import ticks_diff, ticks_ms

from micropython import const
from services.api.answers import ApiError, error_response
from services.api.http_parse import ParsedRequest, content_length, parse_head, unquote

PINNED_VERSION = "4.8.2"   # the private Response methods used below (_send_headers, _send_chunk) are this version's

_RECV = const(0)     # reading head and body
_SEND = const(1)     # draining the answer (and pulling chunks of a ChunkedResponse)
_DRAIN = const(2)    # answer sent; discarding an unread body so the close does not reset the answer away
_WORK = const(3)     # the handler makes its answer in steps, one per poll (a generator: see _work)
_ENOTCONN_LWIP = const(128)   # a non-blocking recv from a closed peer on the device
_ETIMEDOUT_LWIP = const(116)
# CircuitPython's errno lacks EPIPE; 32 is its value on CPython and lwIP.
_GONE = (errno.ECONNRESET, errno.ENOTCONN, getattr(errno, "EPIPE", 32), errno.EBADF, errno.ECONNABORTED,
         _ENOTCONN_LWIP, _ETIMEDOUT_LWIP)
_SEND_SLICE = const(1024)     # bytes handed to send() at once: lwIP's send buffer is a few KB
_CHUNK_REFILL = const(512)    # pull the next chunk when less than this is pending
_LONG_AGO = const(1 << 28)    # what elapsed() says of a stamp ticks_diff can no longer place


def _steps():
    yield


_STEPS = type(_steps())   # what a handler returns to make its answer over several polls


def elapsed(now, stamp):
    """Milliseconds from stamp (an earlier ticks_ms) to now; a stamp over ~3.1 days old counts as long ago.

    ticks_diff is only meaningful within +-2**28 ms: past that an old stamp reads as one in the future, and a
    deadline computed from it would never expire. Every stamp here was taken from an earlier now, so a
    negative difference can only mean "wrapped": treat it as expired.
    """
    d = ticks_diff(now, stamp)
    return d if d >= 0 else _LONG_AGO


class _Conn:
    """One accepted client: bytes received, phase and its time limit, pending output; Response objects write into
    it (send/close)."""

    def __init__(self, sock, addr, now, limit):
        self.sock = sock
        self.addr = addr
        self.peer = addr[0] if addr else None
        self.progress = now     # last time a byte moved in either direction
        self.since = now        # start of the phase; the phase ends by since + limit
        self.limit = limit
        self.buf = bytearray()
        self.head_end = -1      # index of the blank line once the head is complete
        self.total = -1         # head + body length once Content-Length is known
        self.phase = _RECV
        self.out = bytearray()
        self.sent = 0
        self.chunks = None      # iterator of a ChunkedResponse body
        self.streaming = None   # the ChunkedResponse being streamed
        self.after = None       # request.after_sent: called once the answer went out (e.g. the reboot)
        self.take_over = None   # request.take_over(sock, addr): gets the socket instead of a close (a WebSocket)
        self.request = None
        self.work = None        # the handler's generator while the answer is made in steps (_WORK)
        self.drain = False      # unread input may follow an early answer: drain it before closing
        self.slotted = False    # holds one of the max_connections slots (a newcomer does not yet)
        self.starved = False    # the last read stopped at our per-poll budget, not at an empty socket

    def enter(self, phase, now, limit):
        self.phase = phase
        self.since = now
        self.limit = limit
        self.progress = now

    # What adafruit_httpserver's Response calls on request.connection: collect, never block.
    def send(self, data):
        self.out.extend(data)
        return len(data)

    def close(self):
        pass  # the server closes once the output is drained


class HardenedServer(Server):
    """adafruit_httpserver.Server whose poll() never blocks.

    Why a subclass and not the stock poll(): 4.8 reads a whole request synchronously after accept() with no overall
    deadline and no size limit, spins forever on a peer that closes early (upstream #21) and re-raises handler
    exceptions; its header parser splits on more than CRLF. Here every connection is a small state machine
    advanced by non-blocking recv_into/send across polls, with one time limit for receiving the request and one
    for delivering the answer, size limits for head and body, a strict head parser (parse_head), and every
    exception contained. Route, Request and the Response classes stay adafruit_httpserver's, so route modules
    written against the library (including ChunkedResponse streams) work unchanged.
    dispatch(request) -> Response is injected by the owner (auth, limits, routing live there).

    Hostile clients (slow loris, half bodies, clients that never read, connect floods) are shed, not waited for:
    every poll accepts what is pending (up to accept_per_poll) and reads each newcomer at once. A newcomer whose
    request is already complete is answered on the spot; one that still needs its socket takes a free slot, or
    the slot of the oldest stalled connection, or is closed. See _admit.
    """

    # Socket budget (the device has 8 in all): HTTP listen 1 + 2 clients + 1 momentary (a newcomer being judged
    # while both slots are taken) = 4; Modbus listen 1 + 2 clients (+ a momentary one it refuses) = 3; MQTT 1;
    # NTP 1 during a sync round. docs/api.md counts it through.
    max_connections = 2
    per_peer = 1               # while another peer waits, a peer keeps at most this many slots
    listen_backlog = 255       # pending handshakes; one poll judges them all (accept_per_poll)
    accept_per_poll = 64       # newcomers accepted and judged per poll
    recv_deadline_ms = 250     # the whole request (head and body) must arrive within this after accept
    send_deadline_ms = 10000   # the whole answer must be taken by the client within this
    drain_ms = 1000            # after an early answer (413, 431, 400), discard input this long before closing;
    #                            a client still sending its body when we close would get a reset instead of the answer
    stall_ms = 100             # receiving or draining without a byte this long: stalled (a newcomer may take the slot)
    answer_stall_ms = 300      # an answer the client took no byte of this long: stalled
    send_stall_ms = 1000       # a client that takes no byte of its answer this long is dropped
    max_head_bytes = 2048
    max_body_bytes = 8192      # largest accepted body (a PEM CA bundle of a few certificates); larger -> 413
    recv_per_poll = 4096       # bytes read from one connection per poll, so one client cannot hog a cycle
    send_per_poll = 4096       # bytes sent to one connection per poll (a long stream goes out over many cycles)
    bad_ms = 10000             # an address whose connection stalled or ran out of time this recently is a "stalling"
    #                            one: a newcomer of another address may take its receiving connection's slot
    bad_peers = 8              # stalling addresses remembered (a fixed table, the oldest entry gives its place)
    work_deadline_ms = 20000   # an answer made in steps must be ready within this (then 503)
    spare = None               # () -> True while one more socket may be accepted (HttpApi: the socket budget); None:
    #                            no limit known. Accepting past a newcomer waiting in the momentary place needs it.
    accept_every_ms = 0        # > 0: while no client is connected, the listener is asked only this often (an empty
    #                            accept() raises EAGAIN, and an exception is heap garbage); HttpApi sets it

    def __init__(self, socket_source, dispatch, ticks=ticks_ms, log=None):
        Server.__init__(self, socket_source, root_path=None, debug=False)
        # On every answer (API JSON, errors, 429s, the page): no MIME sniffing, and nothing of the device may be
        # framed by another site (clickjacking: a framed page restarted the device with one click). The page adds
        # its Content-Security-Policy (services/web/static.py).
        self.headers.add("X-Content-Type-Options", "nosniff")
        self.headers.add("X-Frame-Options", "DENY")
        self._dispatch = dispatch
        self._ticks = ticks
        self._log = log
        self._conns = []
        self._listen_at = None     # ticks of the last accept() that found nobody waiting
        self._handing = None       # the connection whose socket take_over is getting: no longer the server's
        self._grace = None         # the newcomer waiting in the momentary place for its request (_own_grace)
        self._answering = None     # the connection whose request the handler is answering now
        self.flooding = None       # (peer, now) -> True while the API's rate limits refuse peer (HttpApi sets it)
        self._bad_peer = [None] * self.bad_peers   # addresses whose connections stalled or timed out, and when
        self._bad_at = [0] * self.bad_peers
        self.counters = {}

    def _count(self, key):
        self.counters[key] = self.counters.get(key, 0) + 1

    def start(self, host="0.0.0.0", port=80):
        if adafruit_httpserver.__version__ != PINNED_VERSION and self._log is not None:
            self._log.warning("adafruit_httpserver %s, tested with %s", adafruit_httpserver.__version__,
                              PINNED_VERSION)
        Server.start(self, host, port)

    def _create_server_socket(self, socket_source, ssl_context, host, port):
        """The library's listening socket with our backlog (it listens with 10)."""
        sock = socket_source.socket(socket_source.AF_INET, socket_source.SOCK_STREAM)
        try:
            sock.setsockopt(socket_source.SOL_SOCKET, socket_source.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.listen(self.listen_backlog)
            sock.setblocking(False)
        except Exception:
            sock.close()
            raise
        return sock

    def stop(self):
        for c in self._conns:
            self._close(c)
        self._conns = []
        if self._sock is not None and not self.stopped:
            Server.stop(self)

    def connections(self):
        """Connections currently open: the table, and a newcomer answered at accept while its handler runs (not in
        the table, but its socket is held); one being handed over to its taker no longer counts."""
        n = len(self._conns)
        if self._handing is not None and self._handing in self._conns:
            n -= 1
        if self._answering is not None and self._answering not in self._conns:
            n += 1
        return n

    def other_connections(self):
        """connections() besides the one whose request is being answered now (the figure that request reports)."""
        n = self.connections()
        return n - 1 if self._answering is not None else n

    def poll(self):
        """Advance every connection by one non-blocking step, then accept; never raises, never waits."""
        now = self._ticks()
        if self._conns:  # idle polls allocate nothing here
            keep = []
            for c in self._conns:
                if self._advance(c, now):
                    keep.append(c)
            self._conns = keep
        elif self._listen_at is not None and 0 <= ticks_diff(now, self._listen_at) < self.accept_every_ms:
            return       # nobody was waiting a moment ago: an idle cycle raises no EAGAIN
        self._accept(now)

    def _advance(self, c, now):
        """One step of a connection; False (and closed, after_sent run) once it is finished."""
        try:
            alive = self._step(c, now)
        except Exception as exc:  # a bug or a socket surprise costs this connection only
            self._count("errors")
            if self._log is not None:
                self._log.error("http connection: %s %s", type(exc).__name__, exc)
            alive = False
        if alive:
            return True
        self._finish(c)
        return False

    def _finish(self, c):
        """Close a connection (or hand it to its taker once the whole answer went out) and run its after_sent once."""
        if self._grace is c:
            self._grace = None
        take, c.take_over = c.take_over, None
        if take is not None and c.phase == _SEND and c.sent >= len(c.out) and c.chunks is None:
            self._handing = c          # the socket budget counts it as the taker's from here (core/sockbudget.py)
            try:
                take(c.sock, c.addr)   # e.g. a WebSocket after its 101: the slot is free, the socket lives on
                self._count("handed_over")
            except Exception as exc:
                self._count("errors")
                self._close(c)
                if self._log is not None:
                    self._log.error("http take_over: %s %s", type(exc).__name__, exc)
            self._handing = None
        else:
            self._close(c)
        if c.after is not None:
            after, c.after = c.after, None
            try:
                after()
            except Exception as exc:
                self._count("errors")
                if self._log is not None:
                    self._log.error("http after_sent: %s %s", type(exc).__name__, exc)

    # --- accepting and shedding ---

    def _stalled(self, c, now, pressed=False):
        """True when the connection moved no byte for long enough that a newcomer deserves its slot.

        Receiving and draining: stall_ms without a byte. Answering: answer_stall_ms without the client taking a
        byte (stall_ms when pressed: an answer waits for the socket); an answer that is flowing is never stalled,
        however long it takes.
        """
        if c.phase == _WORK:
            return False     # the device is working on its answer: not the client's stall
        limit = self.answer_stall_ms if c.phase == _SEND and not pressed else self.stall_ms
        return elapsed(now, c.progress) >= limit

    def _victim(self, now, peer=None, receiving=False, pressed=False):
        """The oldest stalled connection (of peer, if given), or None; with receiving, the oldest one that is still
        receiving its request, stalled or not. Oldest = longest without a byte, the first accepted on a tie."""
        worst = None
        worst_idle = -1
        for c in self._conns:
            if peer is not None and c.peer != peer:
                continue
            if receiving:
                if c.phase != _RECV:
                    continue
            elif not self._stalled(c, now, pressed):
                continue
            idle = elapsed(now, c.progress)
            if idle > worst_idle:
                worst = c
                worst_idle = idle
        return worst

    def _hog(self, peer):
        """A peer other than peer that holds more than per_peer slots, or None."""
        for c in self._conns:
            if c.peer == peer:
                continue
            n = 0
            for d in self._conns:
                if d.peer == c.peer:
                    n += 1
            if n > self.per_peer:
                return c.peer
        return None

    def _mark_stalling(self, peer, now):
        """Remember that a connection of peer stalled or ran out of time (fixed table, oldest entry replaced)."""
        if peer is None:
            return
        slot = 0
        oldest = -1
        for i in range(self.bad_peers):
            if self._bad_peer[i] == peer:
                slot = i
                break
            age = elapsed(now, self._bad_at[i]) if self._bad_peer[i] is not None else _LONG_AGO + 1
            if age > oldest:
                slot, oldest = i, age
        self._bad_peer[slot] = peer
        self._bad_at[slot] = now

    def _stalling(self, peer, now):
        """True when a connection of peer stalled or ran out of time within bad_ms."""
        for i in range(self.bad_peers):
            if self._bad_peer[i] == peer and peer is not None:
                return elapsed(now, self._bad_at[i]) < self.bad_ms
        return False

    def _misbehaving(self, peer, now):
        """True when peer stalled lately or the API's rate limits refuse it now (flooding)."""
        if self._stalling(peer, now):
            return True
        return self.flooding is not None and self.flooding(peer, now)

    def _floor_victim(self, c, now):
        """For a newcomer c still receiving, whose address holds no slot and behaves: the oldest receiving
        connection of an address that stalls or floods (its floor: one slot per address that behaves, whatever the
        others hold), else None. A flooder's request often lands a moment after its connection (then it holds a
        slot still receiving), and so does an honest one's: without this, eight flooding addresses could fill
        both slots at the moment a battery's connection came, and it was closed."""
        if self._misbehaving(c.peer, now):
            return None
        for d in self._conns:
            if d.peer == c.peer:
                return None
        worst = None
        worst_age = -1
        for d in self._conns:
            if d.phase == _RECV and self._misbehaving(d.peer, now):
                age = elapsed(now, d.since)
                if age > worst_age:
                    worst, worst_age = d, age
        return worst

    def _own_grace(self, c):
        """True when every slot is held by c's own address and the momentary socket is free: c may wait there for
        its request (until it stalls, stall_ms) instead of being refused. Its address can only be crowding itself
        out: a script stalling on the owner's computer must not cost the owner's browser there its requests (whose
        bytes may come a moment after the connection), and the floor (_floor_victim) is for addresses that behave."""
        if len(self._conns) != self.max_connections:
            return False
        for d in self._conns:
            if d.peer != c.peer:
                return False
        self._grace = c
        return True

    def _graced(self):
        """True when the one connection over max_connections is a graced newcomer still waiting for its request."""
        g = self._grace
        return len(self._conns) == self.max_connections + 1 and g is not None and g.phase == _RECV and g in self._conns

    def _evict(self, c):
        if c.phase == _RECV:
            self._mark_stalling(c.peer, self._ticks())   # shed for a newcomer while it had not said its request
        self._conns.remove(c)
        self._finish(c)
        self._count("evicted")

    def _accept(self, now):
        """Accept every pending client (up to accept_per_poll), read it at once, then keep it only if it needs to.

        Each newcomer is stepped before anything is decided: one that connected and left, or whose small request
        was already complete (every honest client sends it right after connecting), is finished within this poll
        and never needs a slot, so the listen backlog drains as fast as a flood fills it and an honest request is
        answered in the poll that accepts it. A newcomer still waiting for bytes competes for a slot (_admit).
        """
        for _ in range(self.accept_per_poll):
            if len(self._conns) > self.max_connections:
                # The momentary socket is held by an answer: free it (or a stalled slot) before judging more. Held
                # by a newcomer of the address that holds both slots (_own_grace), accepting goes on while the
                # system has a socket to spare (spare): the next newcomers are answered at accept or refused, and
                # that one keeps its place for its request. With none to spare an accept would reset the client.
                victim = self._victim(now, pressed=True)
                if victim is not None:
                    self._evict(victim)
                elif not (self._graced() and (self.spare is None or self.spare())):
                    return
            elif len(self._conns) == self.max_connections and self.spare is not None and not self.spare():
                # Every socket of the system is in use: an accept now would reset the newcomer (on the device, and
                # the host's stand-in, "Out of sockets"). Free a stalled slot first, else let it wait in the backlog
                # until one of ours is done (issue 36 finding 7: the owner's probe reset while others held the rest).
                victim = self._victim(now, pressed=True)
                if victim is None:
                    self._count("backlog_waits")
                    return
                self._evict(victim)
            try:
                sock, addr = self._sock.accept()
            except OSError as exc:
                if exc.errno == errno.EAGAIN:
                    self._listen_at = now
                    return
                self._out_of_sockets(now)
                return
            except RuntimeError:  # CircuitPython's "Out of sockets"
                self._out_of_sockets(now)
                return
            try:
                sock.setblocking(False)
            except OSError:
                self._safe_close(sock)
                continue
            c = _Conn(sock, addr, now, self.recv_deadline_ms)
            self._count("accepted")
            if self._advance(c, now):
                self._admit(c, now)

    def _out_of_sockets(self, now):
        """accept() failed (on the device: no socket left, the client got a reset): free a stalled slot for the
        next newcomer."""
        self._count("accept_errors")
        victim = self._victim(now)
        if victim is not None:
            self._evict(victim)

    def _room_for(self, c, now, answering=False):
        """The connection a newcomer c would replace: (True, victim or None) when it may stay, (False, None)
        when every slot is moving bytes for someone who may keep it. answering: c has a complete request."""
        if len(self._conns) < self.max_connections:
            return True, None
        victim = self._victim(now, pressed=answering)
        if victim is None:
            hog = self._hog(c.peer)
            if hog is not None:
                victim = self._victim(now, hog, receiving=True)
        if victim is None and answering:
            victim = self._victim(now, receiving=True)
        if victim is None and not answering:
            victim = self._floor_victim(c, now)
        return victim is not None, victim

    def _admit(self, c, now):
        """Give a newcomer that still needs its socket a slot, or close it.

        In order: a free slot; the slot of the oldest stalled connection; when another peer holds more than
        per_peer slots, that peer's oldest connection still receiving (one device cannot hold the whole API);
        for a newcomer already being answered, the oldest connection still receiving (an answer beats an
        unfinished request), and failing that the momentary socket until the answer is out (a stream was
        already turned into a short 503 by _complete). Otherwise the newcomer is closed: it sent no complete
        request and every slot is moving bytes.
        """
        if c.phase == _DRAIN and len(self._conns) >= self.max_connections:
            self._finish(c)  # its early error answer is out; draining is a courtesy a full house cannot afford
            return
        ok, victim = self._room_for(c, now, c.phase != _RECV)
        if victim is not None:
            self._evict(victim)
        elif not ok:
            if c.phase == _RECV and not self._own_grace(c):
                self._count("refused")
                self._finish(c)
                return
            # A short answer the socket did not take at once, or a newcomer of the address that holds every slot
            # (it waits there for its request, _own_grace): the momentary socket.
            self._count("over_limit")
        c.slotted = True
        self._conns.append(c)

    # --- one connection ---

    def _step(self, c, now):
        if c.phase == _WORK:         # first here, so a request's first step comes in the poll after it was read
            self._work(c, now)
        if c.phase == _RECV:
            # Read first: after a long cycle the whole request may be waiting, and that is not the client's fault.
            if not self._receive(c, now):
                return False
            # Late only if the socket ran dry: bytes left waiting because this poll's read budget ran out arrived
            # in time (a long cycle on a busy device is not the client's fault). Bounded: a body is at most
            # max_body_bytes, so starving lasts a few polls, and a trickling client runs dry every poll.
            if c.phase == _RECV and not c.starved and elapsed(now, c.since) >= c.limit:
                self._count("recv_timeouts")
                self._mark_stalling(c.peer, now)
                if not c.buf:
                    return False  # connected and said nothing: nobody to answer
                self._answer_error(c, 408, "Request timeout", now)
        if c.phase == _SEND:
            return self._send(c, now)
        if c.phase == _DRAIN:
            return self._drain(c, now)
        return True

    def _receive(self, c, now):
        """Read what is there; when the request is complete, dispatch it. False when the connection is finished."""
        budget = self.recv_per_poll
        buf = self._buffer
        c.starved = False
        while budget > 0:
            try:
                n = c.sock.recv_into(buf, len(buf))
            except OSError as exc:
                if exc.errno == errno.EAGAIN:
                    return True
                if exc.errno in _GONE:
                    self._count("peer_closed")
                    return False
                raise
            if n == 0:  # CPython's way of saying the peer closed
                self._count("peer_closed")
                return False
            budget -= n
            c.progress = now
            c.buf.extend(memoryview(buf)[:n])
            if c.head_end < 0:
                start = len(c.buf) - n - 3
                idx = c.buf.find(b"\r\n\r\n", start if start > 0 else 0)
                if idx < 0:
                    if len(c.buf) > self.max_head_bytes:
                        self._answer_error(c, 431, "Request header too large", now)
                        return True
                    continue
                if idx > self.max_head_bytes:
                    self._answer_error(c, 431, "Request header too large", now)
                    return True
                c.head_end = idx
                if not self._head_complete(c, now):
                    return True
            if c.total >= 0 and len(c.buf) >= c.total:
                self._complete(c, now)
                return True
        c.starved = True
        return True

    def _head_complete(self, c, now):
        """Parse the head; check the declared body size. False when an answer was already queued."""
        try:
            method, path, query_string, version, headers = parse_head(bytes(c.buf[:c.head_end]))
        except ApiError as exc:
            self._answer_error(c, exc.status, exc.message, now)
            return False
        request = ParsedRequest(self, c, c.addr, method, path, query_string, version, headers)
        c.request = request
        if headers.get("Transfer-Encoding") is not None:
            self._answer_error(c, 411, "Chunked request bodies are not supported; send Content-Length", now)
            return False
        size = content_length(headers)
        if size < 0:
            self._answer_error(c, 400, "Invalid Content-Length", now)
            return False
        if size > self.max_body_bytes:
            self._answer_error(c, 413, "Request body too large (limit %d bytes)" % self.max_body_bytes, now)
            return False
        if headers.get("Content-Length") is not None:
            headers.set("Content-Length", str(size))  # one canonical value for the library and the handlers
        c.total = c.head_end + 4 + size
        expect = headers.get("Expect")
        if expect is not None and expect.lower() == "100-continue" and len(c.buf) < c.total:
            self._raw_send(c, b"HTTP/1.1 100 Continue\r\n\r\n")
        return True

    def _complete(self, c, now):
        """The whole request is here: build the answer through dispatch and start sending it."""
        request = c.request
        request.raw_request = bytes(c.buf[:c.total])
        c.buf = bytearray()  # free the receive buffer before the handler allocates
        try:
            for values in request.query_params._storage.values():
                for i in range(len(values)):
                    values[i] = unquote(values[i])
            self._answering = c
            try:
                response = self._dispatch(request)
            finally:
                self._answering = None
            c.after = getattr(request, "after_sent", None)
            c.take_over = getattr(request, "take_over", None)
            if type(response) is _STEPS:
                if c.slotted or self._room_for(c, now, True)[0]:
                    # Made over the next polls (one step each): an import on the device is a whole-heap collection,
                    # so a request that needs two must not pay both inside one cycle.
                    c.work = response
                    c.enter(_WORK, now, self.work_deadline_ms)
                    self._count("requests")
                    return
                response.close()
                self._count("busy")
                response = error_response(request, 503, "Server busy", headers={"Retry-After": "1"}, key="busy")
            elif not c.slotted and isinstance(response, ChunkedResponse) and not self._room_for(c, now, True)[0]:
                # A stream needs a slot for many polls and every slot is busy: a clear "later" instead of a
                # newcomer that would hold the momentary socket (and stop all accepting) while it trickles out.
                self._count("busy")
                response = error_response(request, 503, "Server busy", headers={"Retry-After": "1"}, key="busy")
        except ApiError as exc:
            response = error_response(request, exc.status, exc.message, exc.fields, exc.headers, exc.code)
        except Exception as exc:  # a failing handler answers 500 and the loop goes on
            self._count("handler_errors")
            if self._log is not None:
                self._log.error("%s %s: %s %s", request.method, request.path, type(exc).__name__, exc)
            response = error_response(request, 500, "Internal error")
        self._start_answer(c, response, now)
        self._count("requests")

    def _work(self, c, now):
        """One step of an answer made in steps: the handler's generator yields None while it has more to do, then
        its Response (or raises, like a handler). Closed once it gave its answer, so its cleanup (finally) runs."""
        request = c.request
        self._answering = c
        try:
            response = next(c.work)
            if response is None and elapsed(now, c.since) >= c.limit:
                self._count("work_timeouts")
                response = error_response(request, 503, "Took too long: try again", headers={"Retry-After": "5"})
            elif response is not None:
                c.after = getattr(request, "after_sent", None)
                c.take_over = getattr(request, "take_over", None)
        except StopIteration:
            response = error_response(request, 500, "Handler gave no answer")
        except ApiError as exc:
            response = error_response(request, exc.status, exc.message, exc.fields, exc.headers, exc.code)
        except Exception as exc:
            self._count("handler_errors")
            if self._log is not None:
                self._log.error("%s %s: %s %s", request.method, request.path, type(exc).__name__, exc)
            response = error_response(request, 500, "Internal error")
        finally:
            self._answering = None
        if response is None:
            return
        self._end_work(c)
        self._start_answer(c, response, now)

    @staticmethod
    def _end_work(c):
        work, c.work = c.work, None
        if work is not None:
            try:
                work.close()
            except Exception:
                pass

    def _start_answer(self, c, response, now):
        """Render the response into the connection's output (a ChunkedResponse only its head: chunks follow)."""
        c.enter(_SEND, now, self.send_deadline_ms)
        if response is None:
            response = error_response(c.request, 500, "Handler gave no answer")
        self._set_default_server_headers(response)
        if isinstance(response, ChunkedResponse):
            response._send_headers()
            c.chunks = iter(response._body())
            c.streaming = response
        else:
            try:
                if not self._send_whole(response):
                    response._send()
            except Exception as exc:
                self._count("handler_errors")
                if self._log is not None:
                    self._log.error("http response: %s %s", type(exc).__name__, exc)
                c.out = bytearray()
                self._render_error(c, 500, "Internal error")

    @staticmethod
    def _send_whole(response):
        """Write a Response, Redirect or JSONResponse as the library's _send does (same status line, headers,
        defaults and body), in one join; False for other kinds (files), which the library writes. The library's
        _send_headers copies the headers by printing and parsing them again and builds the head by repeated
        concatenation: ~0.2 ms per answer here, ~25 ms on an ESP32-S3."""
        kind = type(response)
        if kind is JSONResponse:
            body = json.dumps(response._data)
            content_type = "application/json"
        elif kind is Response or kind is Redirect:
            body = response._body
            content_type = response._content_type
        else:
            return False
        if isinstance(body, str):
            body = body.encode("utf-8")
        status = response._status
        store = response._headers._storage
        head = ["HTTP/1.1 %d %s\r\n" % (status.code, status.text)]
        for name, values in store.items():   # names in lower case, as the library's copy sends them
            for value in values:
                if value is not None:
                    head.append("%s: %s\r\n" % (name, value))
        if "content-type" not in store:
            head.append("content-type: %s\r\n" % (content_type or MIMETypes.DEFAULT))
        if "content-length" not in store:
            head.append("content-length: %d\r\n" % len(body))
        if "connection" not in store:
            head.append("connection: close\r\n")
        for name, value in response._cookies.items():
            head.append("set-cookie: %s=%s\r\n" % (name, value))
        head.append("\r\n")
        conn = response._request.connection
        conn.send("".join(head).encode("utf-8"))
        conn.send(body)
        response._close_connection()
        return True

    def _answer_error(self, c, code, message, now):
        """Queue an error answer produced by the server itself (before any handler ran)."""
        if c.request is None:
            c.request = ParsedRequest(self, c, c.addr, "GET", "/", "", "HTTP/1.1", Headers())
        c.out = bytearray()
        self._render_error(c, code, message)
        c.enter(_SEND, now, self.send_deadline_ms)
        if code != 408:  # a fast client may still be sending: drain it before closing (a slow one is not worth it)
            c.drain = True

    def _render_error(self, c, code, message):
        response = error_response(c.request, code, message)
        self._set_default_server_headers(response)
        response._send()

    @staticmethod
    def _raw_send(c, data):
        """Send a short interim line now (25 bytes always fit an empty send buffer; if not, the client goes on)."""
        try:
            c.sock.send(data)
        except OSError:
            pass

    def _send(self, c, now):
        """Push pending output without blocking; refill from a chunk stream; False once everything went out."""
        if elapsed(now, c.since) >= c.limit or elapsed(now, c.progress) >= self.send_stall_ms:
            self._count("send_timeouts")
            return False
        budget = self.send_per_poll
        while budget > 0:
            pending = len(c.out) - c.sent
            if pending < _CHUNK_REFILL and c.chunks is not None:
                if c.sent:
                    c.out = c.out[c.sent:]
                    c.sent = 0
                self._refill(c)
                pending = len(c.out)
            if pending <= 0:
                break
            end = c.sent + (pending if pending < _SEND_SLICE else _SEND_SLICE)
            try:
                n = c.sock.send(memoryview(c.out)[c.sent:end])
            except OSError as exc:
                if exc.errno == errno.EAGAIN:
                    return True
                if exc.errno in _GONE:
                    self._count("peer_closed")
                    return False
                raise
            if not n:
                return True
            c.progress = now
            c.sent += n
            budget -= n
        if budget <= 0:
            return True
        if c.chunks is not None:
            return True
        if not c.drain:
            return False
        c.enter(_DRAIN, now, self.drain_ms)
        return True

    def _refill(self, c):
        """Pull chunks from the stream until enough is pending or it ends (then the terminating chunk)."""
        response = c.streaming
        while len(c.out) < _CHUNK_REFILL:
            try:
                chunk = next(c.chunks)
            except StopIteration:
                c.chunks = None
                response._send_chunk()
                return
            except Exception as exc:  # a failing stream: end the answer here, the client sees a short body
                self._count("handler_errors")
                if self._log is not None:
                    self._log.error("http stream: %s %s", type(exc).__name__, exc)
                c.chunks = None
                c.drain = False
                return
            if chunk:
                response._send_chunk(chunk)

    def _drain(self, c, now):
        """Discard input until the peer closes or the drain time ends, so our close does not reset the answer."""
        if elapsed(now, c.since) >= c.limit:
            return False
        buf = self._buffer
        budget = self.recv_per_poll
        while budget > 0:
            try:
                n = c.sock.recv_into(buf, len(buf))
            except OSError as exc:
                if exc.errno == errno.EAGAIN:
                    return True
                return False
            if n == 0:
                return False
            c.progress = now
            budget -= n
        return True

    def _close(self, c):
        self._end_work(c)
        self._safe_close(c.sock)

    @staticmethod
    def _safe_close(sock):
        try:
            sock.close()
        except Exception:
            pass
