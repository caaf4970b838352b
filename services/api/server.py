"""Hardened HTTP server on adafruit_httpserver 4.8.2: non-blocking per-connection state machine, deadlines, limits."""

import errno
import json

import adafruit_httpserver
from adafruit_httpserver import ChunkedResponse, JSONResponse, Request, Server
from adafruit_ticks import ticks_add, ticks_diff, ticks_less, ticks_ms

from micropython import const

PINNED_VERSION = "4.8.2"   # the private Response methods used below (_send_headers, _send_chunk) are this version's

_RECV = const(0)     # reading head and body
_SEND = const(1)     # draining the answer (and pulling chunks of a ChunkedResponse)
_DRAIN = const(2)    # answer sent; discarding an unread body so the close does not reset the answer away
_ENOTCONN_LWIP = const(128)   # a non-blocking recv from a closed peer on the device
_ETIMEDOUT_LWIP = const(116)
# CircuitPython's errno lacks EPIPE; 32 is its value on CPython and lwIP.
_GONE = (errno.ECONNRESET, errno.ENOTCONN, getattr(errno, "EPIPE", 32), errno.EBADF, errno.ECONNABORTED,
         _ENOTCONN_LWIP, _ETIMEDOUT_LWIP)
_SEND_SLICE = const(1024)     # bytes handed to send() at once: lwIP's send buffer is a few KB
_CHUNK_REFILL = const(512)    # pull the next chunk when less than this is pending


class ApiError(Exception):
    """Raised by handlers (and the server) for a JSON error answer: status, message, optional fields and headers."""

    def __init__(self, status, message, fields=None, headers=None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.fields = fields
        self.headers = headers


_REASONS = {
    200: "OK", 202: "Accepted", 204: "No Content", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden",
    404: "Not Found", 405: "Method Not Allowed", 408: "Request Timeout", 409: "Conflict", 410: "Gone",
    411: "Length Required", 413: "Payload Too Large", 415: "Unsupported Media Type",
    431: "Request Header Fields Too Large", 429: "Too Many Requests", 500: "Internal Server Error",
    503: "Service Unavailable",
}


def status(code):
    """(code, reason) as adafruit_httpserver responses take it."""
    return (code, _REASONS.get(code, "Error"))


def error_response(request, code, message, fields=None, headers=None):
    """The uniform JSON error answer {"error": message[, "fields": {...}]}."""
    body = {"error": message}
    if fields:
        body["fields"] = fields
    return JSONResponse(request, body, status=status(code), headers=headers)


def read_json(request, required=True):
    """The JSON object of a request body; ApiError 400 for a wrong Content-Type, bad JSON or a non-object."""
    body = request.body
    if not body:
        if required:
            raise ApiError(400, "Request body must be a JSON object")
        return None
    ctype = request.headers.get_directive("Content-Type")
    if ctype is None or ctype.lower() != "application/json":
        raise ApiError(400, "Content-Type must be application/json")
    try:
        data = json.loads(body)
    except Exception:  # ValueError, UnicodeError, or a recursion error from deep nesting (RuntimeError on the device)
        raise ApiError(400, "Malformed JSON")
    if not isinstance(data, dict):
        raise ApiError(400, "Request body must be a JSON object")
    return data


def query(request, name):
    """A query value, percent-decoded, or None (no HTML escaping, no warning print)."""
    values = request.query_params._storage.get(name)
    return values[0] if values else None


def _unquote(text):
    """Percent-decode a query value (adafruit_httpserver 4.8 leaves it encoded); '+' is a space."""
    if "%" not in text and "+" not in text:
        return text
    raw = text.replace("+", " ").encode()
    out = bytearray()
    i = 0
    n = len(raw)
    while i < n:
        c = raw[i]
        if c == 37 and i + 2 < n:  # '%' followed by two characters
            try:
                out.append(int(raw[i + 1:i + 3].decode(), 16))
                i += 3
                continue
            except ValueError:
                pass
        out.append(c)
        i += 1
    try:
        return out.decode()
    except UnicodeError:
        raise ApiError(400, "Query is not valid UTF-8")


class _Conn:
    """One accepted client: bytes received, deadline, pending output; Response objects write into it (send/close)."""

    def __init__(self, sock, addr, now, deadline):
        self.progress = now     # last time a byte moved in either direction
        self.sock = sock
        self.addr = addr
        self.buf = bytearray()
        self.head_end = -1      # index of the blank line once the head is complete
        self.total = -1         # head + body length once Content-Length is known
        self.deadline = deadline
        self.phase = _RECV
        self.out = bytearray()
        self.sent = 0
        self.chunks = None      # iterator of a ChunkedResponse body
        self.streaming = None   # the ChunkedResponse being streamed
        self.after = None       # request.after_sent: called once the answer went out (e.g. the reboot)
        self.request = None
        self.drain = False      # unread input may follow an early answer: drain it before closing

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
    exceptions. Here every connection is a small state machine advanced by non-blocking recv_into/send across
    polls, with one deadline for receiving the request and one for delivering the answer, size limits for head and
    body, and every exception contained. Route, Request and the Response classes stay adafruit_httpserver's, so
    route modules written against the library (including ChunkedResponse streams) work unchanged.
    dispatch(request) -> Response is injected by the owner (auth, limits, routing live there).
    """

    max_connections = 2        # 8 sockets in the system: HTTP listen + 2 clients, Modbus 3, MQTT, NTP
    recv_deadline_ms = 250     # the whole request (head and body) must arrive within this after accept
    send_deadline_ms = 10000   # the whole answer must be taken by the client within this
    drain_ms = 250             # after an early answer (413, 431, 400), discard input this long before closing
    stall_ms = 100             # a connection that moved no byte this long may be replaced by a waiting client
    send_stall_ms = 1000       # a client that takes no byte of its answer this long is dropped
    max_head_bytes = 2048
    max_body_bytes = 8192      # largest accepted body (a PEM CA bundle of a few certificates); larger -> 413
    recv_per_poll = 4096       # bytes read from one connection per poll, so one client cannot hog a cycle
    send_per_poll = 4096       # bytes sent to one connection per poll (a long stream goes out over many cycles)
    accept_per_poll = 8        # new connections taken per poll

    def __init__(self, socket_source, dispatch, ticks=ticks_ms, log=None):
        Server.__init__(self, socket_source, root_path=None, debug=False)
        self._dispatch = dispatch
        self._ticks = ticks
        self._log = log
        self._conns = []
        self.counters = {}

    def _count(self, key):
        self.counters[key] = self.counters.get(key, 0) + 1

    def start(self, host="0.0.0.0", port=80):
        if adafruit_httpserver.__version__ != PINNED_VERSION and self._log is not None:
            self._log.warning("adafruit_httpserver %s, tested with %s", adafruit_httpserver.__version__,
                              PINNED_VERSION)
        Server.start(self, host, port)

    def stop(self):
        for c in self._conns:
            self._close(c)
        self._conns = []
        if self._sock is not None and not self.stopped:
            Server.stop(self)

    def connections(self):
        """Connections currently open."""
        return len(self._conns)

    def poll(self):
        """Advance every connection by one non-blocking step, then accept; never raises, never waits."""
        now = self._ticks()
        if self._conns:  # idle polls allocate nothing here (the device raises EAGAIN from accept anyway)
            keep = []
            for c in self._conns:
                if self._advance(c, now):
                    keep.append(c)
            self._conns = keep
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
        self._close(c)
        if c.after is not None:
            after, c.after = c.after, None
            try:
                after()
            except Exception as exc:
                self._count("errors")
                if self._log is not None:
                    self._log.error("http after_sent: %s %s", type(exc).__name__, exc)
        return False

    def _stalled(self, now):
        """The connection that moved no byte for the longest time, if that is at least stall_ms; else None."""
        worst = None
        for c in self._conns:
            idle = ticks_diff(now, c.progress)
            if idle >= self.stall_ms and (worst is None or idle > ticks_diff(now, worst.progress)):
                worst = c
        return worst

    def _accept(self, now):
        """Take new clients while a slot is free; when all are taken, a waiting client replaces a stalled one.

        Slow-loris clients, half bodies and clients that do not read would otherwise hold the few slots until
        their deadlines while a real request waits in the backlog; a connection that keeps moving bytes (a
        history stream being read) is never replaced. Each new connection is stepped at once, so a client that
        connected and left, or a small request that is already complete, frees its slot in the same poll and
        the backlog drains faster than a flood of connect-and-close clients fills it.
        """
        for _ in range(self.accept_per_poll):
            full = len(self._conns) >= self.max_connections
            if full and self._stalled(now) is None:
                return
            try:
                sock, addr = self._sock.accept()
            except OSError as exc:
                if exc.errno != errno.EAGAIN:
                    self._count("accept_errors")  # e.g. out of sockets: the client is refused or stays queued
                return
            if full:
                victim = self._stalled(now)
                self._conns.remove(victim)
                self._close(victim)
                self._count("evicted")
            try:
                sock.setblocking(False)
            except OSError:
                self._safe_close(sock)
                continue
            c = _Conn(sock, addr, now, ticks_add(now, self.recv_deadline_ms))
            self._count("accepted")
            if self._advance(c, now):
                self._conns.append(c)

    # --- one connection ---

    def _step(self, c, now):
        if c.phase == _RECV:
            # Read first: after a long cycle the whole request may be waiting, and that is not the client's fault.
            if not self._receive(c, now):
                return False
            if c.phase == _RECV and not ticks_less(now, c.deadline):
                self._count("recv_timeouts")
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
        return True

    def _head_complete(self, c, now):
        """Parse the head; check the declared body size. False when an answer was already queued."""
        head = bytes(c.buf[:c.head_end])
        if b"\r\n" not in head:
            head += b"\r\nConnection: close"  # a bare request line (HTTP/1.0) is valid; 4.8 needs one header
        try:
            request = Request(self, c, c.addr, head + b"\r\n\r\n")
        except (ValueError, UnicodeError, IndexError):
            self._answer_error(c, 400, "Malformed request", now)
            return False
        c.request = request
        if request.headers.get("Transfer-Encoding") is not None:
            self._answer_error(c, 411, "Chunked request bodies are not supported; send Content-Length", now)
            return False
        length = request.headers.get("Content-Length")
        if length is None:
            length = "0"
        length = length.strip()
        if not length.isdigit() or len(length) > 9:
            self._answer_error(c, 400, "Invalid Content-Length", now)
            return False
        size = int(length)
        if size > self.max_body_bytes:
            self._answer_error(c, 413, "Request body too large (limit %d bytes)" % self.max_body_bytes, now)
            return False
        c.total = c.head_end + 4 + size
        expect = request.headers.get("Expect")
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
                    values[i] = _unquote(values[i])
            response = self._dispatch(request)
            c.after = getattr(request, "after_sent", None)
        except ApiError as exc:
            response = error_response(request, exc.status, exc.message, exc.fields, exc.headers)
        except Exception as exc:  # a failing handler answers 500 and the loop goes on
            self._count("handler_errors")
            if self._log is not None:
                self._log.error("%s %s: %s %s", request.method, request.path, type(exc).__name__, exc)
            response = error_response(request, 500, "Internal error")
        self._start_answer(c, response, now)
        self._count("requests")

    def _start_answer(self, c, response, now):
        """Render the response into the connection's output (a ChunkedResponse only its head: chunks follow)."""
        c.phase = _SEND
        c.progress = now
        c.deadline = ticks_add(now, self.send_deadline_ms)
        if response is None:
            response = error_response(c.request, 500, "Handler gave no answer")
        self._set_default_server_headers(response)
        if isinstance(response, ChunkedResponse):
            response._send_headers()
            c.chunks = iter(response._body())
            c.streaming = response
        else:
            try:
                response._send()
            except Exception as exc:
                self._count("handler_errors")
                if self._log is not None:
                    self._log.error("http response: %s %s", type(exc).__name__, exc)
                c.out = bytearray()
                self._render_error(c, 500, "Internal error")

    def _answer_error(self, c, code, message, now):
        """Queue an error answer produced by the server itself (before any handler ran)."""
        if c.request is None:
            c.request = Request(self, c, c.addr, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        c.out = bytearray()
        self._render_error(c, code, message)
        c.phase = _SEND
        c.progress = now
        c.deadline = ticks_add(now, self.send_deadline_ms)
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
        if not ticks_less(now, c.deadline) or ticks_diff(now, c.progress) >= self.send_stall_ms:
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
        c.phase = _DRAIN
        c.deadline = ticks_add(now, self.drain_ms)
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
        if not ticks_less(now, c.deadline):
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
            c.progress = now  # draining is progress: not a candidate for replacement
            budget -= n
        return True

    def _close(self, c):
        self._safe_close(c.sock)

    @staticmethod
    def _safe_close(sock):
        try:
            sock.close()
        except Exception:
            pass
