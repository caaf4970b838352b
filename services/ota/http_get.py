"""A small HTTP/1.0 GET on the socket pool whose work is spread over polls: a non-blocking TCP connect stepped once
per poll, TLS wrapped round the connected socket (its handshake runs inside the sends and receives), then non-blocking
send and recv_into, a few KB per poll, into a sink. Only the name lookup blocks (the device's getaddrinfo has no
non-blocking form); an address literal or the device's DNS cache keeps it short."""

import errno

from adafruit_ticks import ticks_add, ticks_less
from micropython import const

from core.url import split_url
from core.sockets import close_quietly, connect_step
from services.ota.stream import DownloadError

_EAGAIN = errno.EAGAIN
_ETIMEDOUT_DEV = const(116)
_ENOTCONN_DEV = const(128)     # lwIP: a non-blocking recv from a peer that closed
_ENOTCONN_POSIX = errno.ENOTCONN
_MAX_HEADER = const(2048)

CONNECTING = "connecting"
SENDING = "sending"
HEADERS = "headers"
BODY = "body"
DONE = "done"
FAILED = "failed"


def _code(exc):
    return exc.args[0] if exc.args and isinstance(exc.args[0], int) else 0


class HttpGet:
    """GET url into sink (write(chunk)/finish()/abort()). pool: socketpool; ssl_factory: ssl.create_default_context
    (for https). poll(now_ms) advances it; state ends DONE or FAILED with error (a DownloadError)."""

    connect_timeout_ms = 10000  # TCP connect, stepped without blocking (the TLS handshake counts to stall_ms)
    stall_ms = 15000          # no byte for this long: the network is gone
    total_ms = 120000         # the whole request: a server that trickles a byte now and then cannot hold a check
    reads_per_poll = 2        # at most this many recv_into of len(buf) per poll

    def __init__(self, pool, url, sink, buf, ssl_factory=None):
        self._pool = pool
        self.url = url
        self._sink = sink
        self._buf = buf
        self._ssl_factory = ssl_factory
        self._sock = None
        self._out = b""
        self._head = bytearray()
        self.state = None
        self.error = None
        self.status = 0
        self.length = None       # Content-Length, when the server sent one
        self.received = 0        # body bytes
        self._deadline = 0
        self._started = None
        self._addr = None
        self._host = ""
        self._https = False

    def _fail(self, err):
        self.state = FAILED
        self.error = err
        self._close()
        try:
            self._sink.abort()
        except Exception:
            pass

    def _close(self):
        self._sock = close_quietly(self._sock)

    def sockets_held(self):
        """1 while the request's socket is open."""
        return 0 if self._sock is None else 1

    def cancel(self):
        """Stop and release the socket."""
        if self.state not in (DONE, FAILED):
            self._fail(DownloadError("network", "cancelled"))

    def _open(self, now):
        try:
            scheme, host, port, path = split_url(self.url)
        except ValueError as exc:
            raise DownloadError("url", "bad URL %s: %s" % (self.url, exc))
        if host.endswith(".invalid"):  # RFC 6761: never resolves; the default URL asks no DNS server at all
            raise DownloadError("network", "%s is a placeholder (set ota.url to your update server)" % host)
        try:
            addr = self._pool.getaddrinfo(host, port, 0, self._pool.SOCK_STREAM)[0][-1]
        except (OSError, IndexError) as exc:
            raise DownloadError("network", "cannot resolve %s: %s" % (host, exc))
        try:
            sock = self._pool.socket(self._pool.AF_INET, self._pool.SOCK_STREAM)
        except (OSError, RuntimeError) as exc:
            raise DownloadError("network", "no socket free: %s" % exc)
        self._sock = sock
        if scheme == "https" and self._ssl_factory is None:
            raise DownloadError("url", "https needs the ssl module, which this build lacks")
        self._addr = addr
        self._host = host
        self._https = scheme == "https"
        default = 80 if scheme == "http" else 443
        hosthdr = host if port == default else "%s:%d" % (host, port)
        self._out = ("GET %s HTTP/1.0\r\nHost: %s\r\nUser-Agent: MeterPlus\r\nConnection: close\r\n\r\n"
                     % (path, hosthdr)).encode()
        # Never a blocking connect: a host that drops SYNs would hold the whole loop for the connect timeout.
        sock.setblocking(False)
        self.state = CONNECTING
        self._deadline = ticks_add(now, self.connect_timeout_ms)
        self._connecting(now)

    def _connecting(self, now):
        """One step of the TCP connect; once up, TLS is wrapped round it (https) and the request goes out."""
        port = self._addr[1]
        try:
            up = connect_step(self._sock, self._addr)
        except OSError as exc:
            raise DownloadError("network", "connect to %s:%d failed: %s" % (self._host, port, exc))
        if not up:
            if not ticks_less(now, self._deadline):
                raise DownloadError("network", "connect to %s:%d timed out after %d s"
                                    % (self._host, port, self.connect_timeout_ms // 1000))
            return
        if self._https:
            try:
                # Connected and non-blocking: mbedTLS (and the host's ssl stand-in) runs the handshake step by
                # step inside the following send/recv_into calls, each answering EAGAIN until it is done.
                self._sock = self._ssl_factory().wrap_socket(self._sock, server_hostname=self._host)
            except (OSError, RuntimeError, ValueError) as exc:
                raise DownloadError("network", "TLS connect to %s:%d failed: %s" % (self._host, port, exc))
        self.state = SENDING
        self._deadline = ticks_add(now, self.stall_ms)
        self._send(now)

    def poll(self, now):
        """Advance by a bounded amount; returns True while the request is still running."""
        if self.state in (DONE, FAILED):
            return False
        try:
            if self.state is None:
                self._started = now
                self._open(now)
                return True
            if self.state == CONNECTING:
                self._connecting(now)
            elif self.state == SENDING:
                self._send(now)
            else:
                for _ in range(self.reads_per_poll):
                    if not self._receive(now):
                        break
            if self.state not in (DONE, FAILED) and not ticks_less(now, self._deadline):
                raise DownloadError("network", "no data from the server for %d s" % (self.stall_ms // 1000))
            if self.state not in (DONE, FAILED) and not ticks_less(now, ticks_add(self._started, self.total_ms)):
                raise DownloadError("network", "the server took more than %d s for %s"
                                    % (self.total_ms // 1000, self.url))
        except DownloadError as err:
            self._fail(err)
        except MemoryError:
            self._fail(DownloadError("memory", "out of memory"))
        return self.state not in (DONE, FAILED)

    def _send(self, now):
        try:
            n = self._sock.send(self._out)
        except OSError as exc:
            if _code(exc) == _EAGAIN:
                return
            raise DownloadError("network", self._what() + "send failed: %s" % exc)
        if n:
            self._deadline = ticks_add(now, self.stall_ms)
        self._out = self._out[n:]
        if not self._out:
            self.state = HEADERS

    def _what(self):
        """Prefix of a failure before the first answer byte: the TLS handshake runs inside those sends and receives."""
        if self._https and self.state != BODY and not self._head:
            return "TLS connect to %s:%d failed: " % (self._host, self._addr[1])
        return ""

    def _receive(self, now):
        """One recv_into; False when there is nothing more to do in this poll."""
        try:
            n = self._sock.recv_into(self._buf)
        except OSError as exc:
            code = _code(exc)
            if code == _EAGAIN or code == _ETIMEDOUT_DEV:
                return False
            if code in (_ENOTCONN_DEV, _ENOTCONN_POSIX):
                n = 0   # the device's way of saying the peer closed
            else:
                raise DownloadError("network", self._what() + "connection lost: %s" % exc)
        if n == 0:
            self._eof()
            return False
        self._deadline = ticks_add(now, self.stall_ms)
        mv = memoryview(self._buf)[:n]
        if self.state == HEADERS:
            self._head.extend(mv)
            end = self._head.find(b"\r\n\r\n")
            if end < 0:
                if len(self._head) > _MAX_HEADER:
                    raise DownloadError("http", "response header longer than %d bytes" % _MAX_HEADER)
                return True
            rest = bytes(self._head[end + 4:])
            self._parse_head(bytes(self._head[:end]))
            self._head = bytearray()
            if rest:
                self._body(rest)
        else:
            self._body(mv)
        return self.state == BODY

    def _parse_head(self, head):
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ")
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not parts[1].isdigit():
            raise DownloadError("http", "not an HTTP response")
        self.status = int(parts[1])
        if self.status != 200:
            raise DownloadError("http", "server answered HTTP %d for %s" % (self.status, self.url))
        for line in lines[1:]:
            name, _sep, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                value = value.strip()
                if not value.isdigit():
                    raise DownloadError("http", "bad Content-Length")
                self.length = int(value)
            elif name.strip().lower() == b"transfer-encoding" and value.strip().lower() != b"identity":
                raise DownloadError("http", "chunked transfer encoding is not supported")
        self.state = BODY
        if self.length == 0:
            self._finish()

    def _body(self, chunk):
        self.received += len(chunk)
        if self.length is not None and self.received > self.length:
            raise DownloadError("http", "more body than Content-Length")
        self._sink.write(chunk)
        if self.length is not None and self.received == self.length:
            self._finish()

    def _eof(self):
        if self.state == BODY and self.length is None:
            self._finish()
            return
        if self.state == BODY:
            raise DownloadError("truncated", "connection closed after %d of %d bytes" % (self.received, self.length))
        raise DownloadError("network", "connection closed before the response")

    def _finish(self):
        self._close()
        self._sink.finish()
        self.state = DONE
