"""socketpool for the device bench: CircuitPython's unix port has no sockets, so connections live in memory.

The firmware's side behaves as host/cp/socketpool.py does (the device's errno values, 8 sockets in all, recv_into
only); the other side of every connection is a bench peer in runner.py (HTTP clients, an MQTT broker, a Modbus
client). Nothing here blocks: the bench is single-threaded, so a read that would wait raises at once instead.
"""

import errno

MAX_SOCKETS = 8
ETIMEDOUT_DEVICE = 116
ENOTCONN_DEVICE = 128
EISCONN_DEVICE = 127
_open = []
_listeners = {}    # port -> listening Socket (TCP)
peers = {}         # port -> factory(end) for bench peers the firmware connects to (MQTT broker, ...)
refusals = 0       # sockets the firmware asked for when all 8 were taken (socket() and accept())
_udp = {}          # port -> bound UDP Socket of the firmware
udp_listeners = {}  # (host, port) -> callback(data) for bench peers the firmware sends datagrams to
_udp_out = []      # (address, data, source port) sent by the firmware, handed to udp_listeners by pump_udp()
_ephemeral = 49152
wire_alloc = None  # while a number (runner.time_notifications): heap bytes the in-memory wire's copies took
wire_us = 0        # and the CPU microseconds of those copies and of measuring them


def _grow(buf, data):
    """buf.extend(data), its heap growth added to wire_alloc while that counts: on the device these bytes go into
    lwIP's buffers, not the Python heap, so a measurement of the firmware's allocation leaves them out (and its
    time: the heap walks of gc.mem_alloc() are the bench's)."""
    global wire_alloc, wire_us
    if wire_alloc is None:
        buf.extend(data)
        return
    import gc

    import benchclock

    t = benchclock.cpu_us()
    a = gc.mem_alloc()
    buf.extend(data)
    wire_alloc += gc.mem_alloc() - a
    wire_us += benchclock.cpu_us() - t


class End:
    """One end of an in-memory connection: bytes waiting to be read, and whether the other side closed."""

    def __init__(self):
        self.inbound = bytearray()
        self.closed = False
        self.peer = None

    def write(self, data):
        """Deliver data to the other end."""
        if self.closed or self.peer.closed:
            raise OSError(errno.ECONNRESET)
        _grow(self.peer.inbound, data)
        return len(data)

    def close(self):
        self.closed = True


def pair():
    """Two connected ends."""
    a, b = End(), End()
    a.peer, b.peer = b, a
    return a, b


def deliver_udp(port, data, source):
    """A bench peer's datagram to the firmware's UDP port; False when nothing is bound there."""
    sock = _udp.get(port)
    if sock is None:
        return False
    sock._datagrams.append((bytes(data), source))
    return True


def pump_udp():
    """Hand the datagrams the firmware sent to the bench peers listening at their destinations."""
    while _udp_out:
        address, data, source_port = _udp_out.pop(0)
        listener = udp_listeners.get((address[0], address[1]))
        if listener is not None:
            answer = listener(data)
            if answer:                  # a peer that answers (NTP): back to the sender's port
                deliver_udp(source_port, answer, (address[0], address[1]))


def connect_to_listener(port):
    """A bench client's end of a new connection to the firmware's listener on port, or None when none listens."""
    listener = _listeners.get(port)
    if listener is None:
        return None
    client, server = pair()
    listener._backlog.append(server)
    return client


class Socket:
    """socketpool.Socket over an End (TCP) or a datagram queue (UDP)."""

    def __init__(self, family, type, proto):
        self.family = family
        self.type = type
        self._timeout = None
        self._end = None
        self._port = None
        self._backlog = None
        self._connecting = None
        self._datagrams = []
        _open.append(self)

    def _would_block(self):
        if self._timeout == 0:
            raise OSError(errno.EAGAIN)
        raise OSError(ETIMEDOUT_DEVICE)

    def setsockopt(self, level, optname, value):
        pass

    def setblocking(self, flag):
        self._timeout = None if flag else 0

    def settimeout(self, value):
        self._timeout = value

    def bind(self, address):
        self._port = address[1]
        if self.type == SocketPool.SOCK_DGRAM and self._port:
            if self._port in _udp:
                raise OSError(errno.EADDRINUSE)
            _udp[self._port] = self

    def listen(self, backlog):
        if self._port in _listeners:
            raise OSError(errno.EADDRINUSE)
        self._backlog = []
        _listeners[self._port] = self

    def accept(self):
        if not self._backlog:
            self._would_block()
        end = self._backlog.pop(0)
        if len(_open) >= MAX_SOCKETS:
            global refusals
            refusals += 1
            end.close()
            raise OSError(23, "Out of sockets")   # ENFILE (the port's errno module has no name for it)
        conn = Socket(self.family, self.type, 0)
        conn._end = end
        return conn, ("10.0.0.9", 50000 + len(_open))

    def connect(self, address):
        if self._end is not None:
            raise OSError(EISCONN_DEVICE)
        factory = peers.get(address[1])
        if factory is None:
            if self._timeout == 0 and self._connecting is None:
                self._connecting = "failed"
                raise OSError(ETIMEDOUT_DEVICE)   # lwIP goes on connecting; the next call says how it went
            raise OSError(ENOTCONN_DEVICE if self._timeout == 0 else errno.ECONNREFUSED)
        mine, theirs = pair()
        factory(theirs)
        self._end = mine
        if self._timeout == 0:
            raise OSError(ETIMEDOUT_DEVICE)

    def recv_into(self, buffer, bufsize=0):
        end = self._end
        if end is None:
            raise OSError(ENOTCONN_DEVICE)
        n = bufsize or len(buffer)
        if not end.inbound:
            if end.peer.closed:
                if self._timeout == 0:
                    raise OSError(ENOTCONN_DEVICE)
                return 0
            self._would_block()
        k = min(n, len(end.inbound))
        buffer[:k] = end.inbound[:k]
        end.inbound = end.inbound[k:]   # MicroPython bytearrays have no slice deletion
        return k

    def send(self, data):
        if self._end is None:
            raise OSError(ENOTCONN_DEVICE)
        return self._end.write(data)

    def sendall(self, data):
        self.send(data)

    def sendto(self, data, address):
        # Kept for a bench peer listening there (the battery, the SMA listener, NTP); the rest goes nowhere.
        if self._port is None:          # an unbound socket gets an ephemeral port, so a peer can answer it
            global _ephemeral
            _ephemeral += 1
            self.bind(("0.0.0.0", _ephemeral))
        if (address[0], address[1]) in udp_listeners:
            _udp_out.append((address, bytes(data), self._port))
        return len(data)

    def recvfrom_into(self, buffer):
        if not self._datagrams:
            self._would_block()
        data, addr = self._datagrams.pop(0)
        buffer[: len(data)] = data
        return len(data), addr

    def close(self):
        if self in _open:
            _open.remove(self)
        if self._end is not None:
            self._end.close()
        if self._backlog is not None and _listeners.get(self._port) is self:
            del _listeners[self._port]
        if _udp.get(self._port) is self:
            del _udp[self._port]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class SocketPool:
    """SocketPool(radio): the factory for sockets on a radio."""

    class gaierror(OSError):
        """Errors raised by getaddrinfo."""

    AF_INET = 2
    AF_INET6 = 10
    SOCK_STREAM = 1
    SOCK_DGRAM = 2
    SOCK_RAW = 3
    EAI_NONAME = -2
    SOL_SOCKET = 0xFFF
    SO_REUSEADDR = 4
    TCP_NODELAY = 1
    IPPROTO_IP = 0
    IPPROTO_ICMP = 1
    IPPROTO_TCP = 6
    IPPROTO_UDP = 17
    IPPROTO_IPV6 = 41
    IPPROTO_RAW = 255
    IP_MULTICAST_TTL = 5

    def __init__(self, radio):
        self.radio = radio

    def socket(self, family=2, type=1, proto=0):
        if len(_open) >= MAX_SOCKETS:
            global refusals
            refusals += 1
            raise RuntimeError("Out of sockets")
        return Socket(family, type, proto)

    def getaddrinfo(self, host, port, family=0, type=0, proto=0, flags=0):
        return [(self.AF_INET, type or self.SOCK_STREAM, proto, "", ("10.0.0.2", port))]


def open_count():
    """Sockets open now."""
    return len(_open)


def drop_all():
    """Close every socket."""
    for sock in list(_open):
        sock.close()
