"""Stand-in for socketpool over the stdlib socket module, with the device's errno behaviour and 8-socket limit."""

import errno
import socket as _socket

MAX_SOCKETS = 8  # the ESP32-S3 build of CircuitPython has 8 in the whole system
_open = set()
# For the host runtime's wait between loop cycles (host/idle_wait.py): how many calls moved data, accepted or
# connected so far (a cycle that did any is no idle one), how many of them brought something in (a request may
# start work spread over the next polls), and per socket its descriptor (kept after the ssl stand-in takes the
# socket over), how often the firmware tried to read and write it, and whether it waits to write.
_activity = 0
_inbound = 0

ETIMEDOUT_DEVICE = 116  # lwIP's ETIMEDOUT; CPython would raise TimeoutError instead
ENOTCONN_DEVICE = 128   # lwIP's ENOTCONN: a non-blocking recv from a closed peer, or a failed non-blocking connect
EALREADY_DEVICE = 120   # newlib's numbers, which the ESP32's lwIP sockets raise
EISCONN_DEVICE = 127


class Socket:
    """socketpool.Socket: recv_into only (no recv), OSError(EAGAIN) when non-blocking, OSError(116) on timeout."""

    def __init__(self, sock):
        self._sock = sock
        self._timeout = None
        self._connecting = None    # non-blocking connect: None, "pending", "up" or "failed"
        self._fd = sock.fileno()
        self._reads = 0            # read attempts (recv_into, recvfrom_into, accept), done or not
        self._writes = 0           # send attempts, done or not
        self._want_write = False   # the last send found the buffer full
        _open.add(self)

    @property
    def type(self):
        return int(self._sock.type)

    def _call(self, fn, *args):
        global _activity
        try:
            out = fn(*args)
            _activity += 1
            return out
        except BlockingIOError:
            raise OSError(errno.EAGAIN, "EAGAIN") from None
        except _socket.timeout:
            if self._timeout == 0:
                raise OSError(errno.EAGAIN, "EAGAIN") from None
            raise OSError(ETIMEDOUT_DEVICE, "ETIMEDOUT") from None
        except (ConnectionResetError, BrokenPipeError):
            raise OSError(errno.ECONNRESET, "ECONNRESET") from None

    def accept(self):
        global _inbound
        self._reads += 1
        conn, addr = self._call(self._sock.accept)
        _inbound += 1
        # Accepted sockets start blocking with no timeout on the device.
        conn.settimeout(None)
        if len(_open) >= MAX_SOCKETS:
            conn.close()
            raise OSError(errno.ENFILE, "Out of sockets")
        return Socket(conn), addr[:2]

    def bind(self, address):
        self._sock.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
        self._call(self._sock.bind, address)

    def listen(self, backlog):
        self._call(self._sock.listen, backlog)

    def connect(self, address):
        if self._timeout != 0:
            self._call(self._sock.connect, address)
            return
        self._connect_nonblocking(address)

    def _connect_nonblocking(self, address):
        # As CircuitPython's espressif Socket.connect with timeout 0: the first call raises ETIMEDOUT at once
        # and lwIP keeps connecting; later calls raise EALREADY while it goes on, EISCONN once connected and
        # ENOTCONN when it failed (lwIP keeps no cause: refused and unreachable look the same).
        state = self._connecting
        if state == "up":
            raise OSError(EISCONN_DEVICE, "EISCONN")
        if state == "failed":
            raise OSError(ENOTCONN_DEVICE, "ENOTCONN")
        rc = self._sock.connect_ex(address)
        if state is None:
            if rc == 0:
                self._connecting = "up"
                _note_activity()
                return
            if rc in (errno.EINPROGRESS, errno.EAGAIN):
                self._connecting = "pending"
                raise OSError(ETIMEDOUT_DEVICE, "ETIMEDOUT")
            raise OSError(rc, errno.errorcode.get(rc, "connect failed"))
        if rc in (errno.EALREADY, errno.EINPROGRESS):
            raise OSError(EALREADY_DEVICE, "EALREADY")
        if rc in (0, errno.EISCONN):
            self._connecting = "up"
            _note_activity()
            raise OSError(EISCONN_DEVICE, "EISCONN")
        self._connecting = "failed"
        raise OSError(ENOTCONN_DEVICE, "ENOTCONN")

    def _connected(self):
        """Host hook for the ssl stand-in: a completed non-blocking connect (its handshake cannot block)."""
        return self._connecting == "up"

    def close(self):
        _open.discard(self)
        self._sock.close()

    def recv_into(self, buffer, bufsize=0):
        global _inbound
        self._reads += 1
        n = bufsize or len(buffer)
        got = self._call(self._sock.recv_into, buffer, n)
        _inbound += 1
        if got == 0 and n and self._timeout == 0:
            raise OSError(ENOTCONN_DEVICE, "ENOTCONN")
        return got

    def recvfrom_into(self, buffer):
        global _inbound
        self._reads += 1
        out = self._call(self._sock.recvfrom_into, buffer)
        _inbound += 1
        return out

    def _send(self, fn, *args):
        self._writes += 1
        try:
            out = self._call(fn, *args)
        except OSError as exc:
            self._want_write = exc.errno == errno.EAGAIN
            raise
        self._want_write = False
        return out

    def send(self, bytes):  # noqa: A002  (the stub's parameter name)
        return self._send(self._sock.send, bytes)

    def sendall(self, bytes):  # noqa: A002
        return self._send(self._sock.sendall, bytes)

    def sendto(self, bytes, address):  # noqa: A002
        return self._send(self._sock.sendto, bytes, address)

    def setblocking(self, flag):
        self._timeout = None if flag else 0
        self._sock.setblocking(flag)

    def settimeout(self, value):
        self._timeout = value
        self._sock.settimeout(value)

    def setsockopt(self, level, optname, value):
        # IPPROTO_IP options by lwIP's numbers, as CircuitPython passes them through (IP_ADD_MEMBERSHIP 3 with an
        # 8-byte ip_mreq, IP_MULTICAST_TTL 5 ...), mapped to this system's; other levels go through unchanged
        if level == SocketPool.IPPROTO_IP:
            if optname not in _LWIP_IP_OPTS:
                raise OSError(errno.ENOPROTOOPT, "ENOPROTOOPT")
            optname = _LWIP_IP_OPTS[optname]
        self._sock.setsockopt(level, optname, value)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __hash__(self):
        return id(self)


class SocketPool:
    """SocketPool(radio): the factory for sockets on a radio."""

    class gaierror(OSError):
        """Errors raised by getaddrinfo."""

    AF_INET = _socket.AF_INET
    AF_INET6 = _socket.AF_INET6
    SOCK_STREAM = _socket.SOCK_STREAM
    SOCK_DGRAM = _socket.SOCK_DGRAM
    SOCK_RAW = _socket.SOCK_RAW
    EAI_NONAME = -2
    SOL_SOCKET = _socket.SOL_SOCKET
    SO_REUSEADDR = _socket.SO_REUSEADDR
    TCP_NODELAY = _socket.TCP_NODELAY
    IPPROTO_IP = 0
    IPPROTO_ICMP = 1
    IPPROTO_TCP = 6
    IPPROTO_UDP = 17
    IPPROTO_IPV6 = 41
    IPPROTO_RAW = 255
    IP_MULTICAST_TTL = 5    # lwIP's number, as on the device (shared-bindings/socketpool/enum.h)

    def __init__(self, radio):
        self.radio = radio

    def socket(self, family=_socket.AF_INET, type=_socket.SOCK_STREAM, proto=0):
        if len(_open) >= MAX_SOCKETS:
            raise RuntimeError("Out of sockets")
        return Socket(_socket.socket(family, type, proto))

    def getaddrinfo(self, host, port, family=0, type=0, proto=0, flags=0):
        try:
            infos = _socket.getaddrinfo(host, port, _socket.AF_INET, type, proto, flags)
        except _socket.gaierror as exc:
            raise SocketPool.gaierror(SocketPool.EAI_NONAME, "Name or service not known") from exc
        return [(f, t, p, "", addr[:2]) for f, t, p, _c, addr in infos]


# lwIP's IPPROTO_IP option numbers (lwip/sockets.h) -> this system's
_LWIP_IP_OPTS = {
    1: _socket.IP_TOS,
    2: _socket.IP_TTL,
    3: _socket.IP_ADD_MEMBERSHIP,
    4: _socket.IP_DROP_MEMBERSHIP,
    5: _socket.IP_MULTICAST_TTL,
    6: _socket.IP_MULTICAST_IF,
    7: _socket.IP_MULTICAST_LOOP,
}


def _note_activity(inbound=False):
    global _activity, _inbound
    _activity += 1
    if inbound:
        _inbound += 1


def open_count():
    """Host hook: sockets currently open (tests count the budget)."""
    return len(_open)


def drop_all():
    """Host hook: close every open socket without a word, as a device that crashes or loses power."""
    for sock in list(_open):
        sock.close()
