"""adafruit_minimqtt hardened for the cooperative loop: non-blocking connect, bounded I/O slices, no waiting calls."""

# minimqtt builds and parses the packets: CONNECT with the last will, PUBLISH, SUBSCRIBE, UNSUBSCRIBE, PINGREQ,
# DISCONNECT, and incoming PUBLISH and PINGRESP. Everything in it that waits is replaced here:
# - its connection manager (which connects with a blocking timeout) by a hand-over of a socket connected
#   without blocking over several polls (connect_step);
# - _send_bytes (a loop until every byte is out) by an outbox that flush() drains as far as the socket takes;
# - _sock_exact_recv (a read loop of up to recv_timeout) by reads from one complete packet framed in read();
# - _wait_for_msg (called in connect/subscribe/unsubscribe/ping to wait for the answer) by raising Pending:
#   the call ends once its packet is queued, and the answer is handled when read() frames it.
# Nothing here sleeps or retries: timeouts, ping schedule and reconnect backoff belong to the service. The one
# exception is the last close of an orderly stop (linger_ms, set by the service only then): bounded, 300 ms.

import time

from adafruit_minimqtt import adafruit_minimqtt as mm
from adafruit_ticks import ticks_diff, ticks_ms
from micropython import const

from core.sockets import EAGAIN, ENOTCONN, ETIMEDOUT, connect_step, errno_of

PINNED_VERSION = "8.1.0"   # the private methods overridden below (_connect, _send_bytes, ...) are this version's
VERSION = mm.__version__

# last_error codes. Positive below 1000: the socket errno; negative: a TLS (mbedTLS) error code.
ERR_CONNACK = const(1000)        # + the broker's CONNACK return code 1..5
ERR_CLOSED = const(2006)
ERR_PROTOCOL = const(2007)

# errno values of both platforms (core/sockets.py)
_EAGAIN = EAGAIN
_ETIMEDOUT = ETIMEDOUT
_ENOTCONN = ENOTCONN
_ECONNRESET = const(104)   # the same in both

_T_CONNACK = const(0x20)
_T_PUBLISH = const(0x30)
_T_SUBACK = const(0x90)
_T_UNSUBACK = const(0xB0)
_T_PINGRESP = const(0xD0)

_CONNACK_TEXT = ("accepted", "unacceptable protocol version", "client id rejected", "server unavailable",
                 "bad user name or password", "not authorised")


class LinkError(Exception):
    """The connection failed: code (errno, TLS code or ERR_*) and a message for /mqtt/status."""

    def __init__(self, code, message):
        Exception.__init__(self, code, message)
        self.code = code
        self.message = message


class Pending(Exception):
    """minimqtt would wait for an answer here; the answer is handled when read() frames it."""


def _would_block(err):
    return err == _EAGAIN or err in _ETIMEDOUT


class _Handoff:
    """Takes the place of minimqtt's connection manager: get_socket returns the socket connected beforehand."""

    def __init__(self):
        self.sock = None

    def get_socket(self, host, port, proto, session_id=None, *, timeout=1, is_ssl=False, ssl_context=None):
        return self.sock

    def close_socket(self, sock):
        try:
            sock.close()
        except Exception:
            pass


class HardenedMQTT(mm.MQTT):
    """One broker session at a time: open() -> connect_step() until True -> start_session() -> flush()/read()
    every poll. Callbacks: on_connect(client, user_data, flags, rc), on_message(client, topic, payload bytes),
    on_pingresp(), on_suback(topic, granted), on_oversize(topic, size) for a PUBLISH over rx_max (its payload
    dropped). Failures raise LinkError; close() ends the session."""

    rx_max = 512           # largest incoming packet kept (header included); bigger ones are skipped
    linger_ms = 0          # set by an orderly stop: how long the last close waits for the broker's (_linger)
    chunk_size = 256       # bytes per recv_into
    reads_per_poll = 2     # recv_into calls per read(): one bounded slice of incoming bytes

    def __init__(self, pool, client_id, user, password, keepalive_s, will_topic, will_msg):
        mm.MQTT.__init__(self, broker="", port=1883, username=user or None,
                         password=(password or "") if user else None, client_id=client_id, keep_alive=keepalive_s,
                         socket_pool=pool, use_binary_mode=True, socket_timeout=1, recv_timeout=2,
                         connect_retries=1)
        self._handoff = _Handoff()
        self._connection_manager = self._handoff
        self.will_set(will_topic, will_msg, retain=True)
        self.on_pingresp = None
        self.on_suback = None
        self.on_oversize = None
        self._chunk = bytearray(self.chunk_size)
        self._rx = bytearray(self.rx_max)
        self._raw = None
        self._sub_pids = {}
        self.skipped = 0
        self._reset_io()

    def _reset_io(self):
        self._out = bytearray()
        self._out_pos = 0
        self._rstate = 0       # incoming packet: 0 header, 1 remaining length, 2 body
        self._rlen = 0         # remaining length
        self._rmul = 1
        self._rgot = 0         # bytes of the packet in self._rx (header and length bytes included)
        self._rbody = 0        # body bytes received
        self._rpos = 0         # read cursor of _sock_exact_recv inside self._rx
        self._rend = 0
        self._tcp_up = False

    # ---------------------------------------------------------------- connecting

    def sockets_held(self):
        """1 while a socket to the broker is open (core/sockbudget.py)."""
        return 0 if self._raw is None else 1

    def open(self, addr):
        """Start a non-blocking TCP connect to addr (ip, port): True when already connected; raises
        OSError/RuntimeError (no socket) or LinkError."""
        self.close()
        pool = self._socket_pool
        sock = pool.socket(pool.AF_INET, pool.SOCK_STREAM)
        self._raw = sock
        self._addr = addr
        sock.setblocking(False)
        return self.connect_step()

    def connect_step(self):
        """Advance the TCP connect without blocking: True once connected; LinkError when it failed."""
        if self._tcp_up:
            return True
        try:
            if not connect_step(self._raw, self._addr):
                return False
        except OSError as exc:
            err = errno_of(exc)
            if err in _ENOTCONN:  # lwIP reports a failed connect only as "not connected"
                raise LinkError(err, "connection refused or host unreachable")
            raise LinkError(err or ERR_PROTOCOL, "connect failed: %s" % exc)
        self._tcp_up = True
        return True

    def start_session(self, host, clean_session=True, ssl_context=None):
        """Wrap TLS around the connected socket (if given) and queue CONNECT; the handshake and the CONNACK
        progress in flush()/read(). Raises OSError/ValueError/MemoryError from wrap_socket."""
        sock = self._raw
        if ssl_context is not None:
            # The socket is connected and non-blocking: mbedTLS (and OpenSSL on the host) runs the handshake
            # step by step inside the send/recv_into calls of flush()/read(), each returning EAGAIN until done.
            sock = ssl_context.wrap_socket(sock, server_hostname=host)
        self._handoff.sock = sock
        self._reconnect_attempt = 0  # minimqtt's _connect sleeps for its own backoff when this is above 0
        try:
            self._connect(clean_session=clean_session, host=host)
        except Pending:
            pass

    # ---------------------------------------------------------------- minimqtt hooks

    def _send_bytes(self, buffer):
        if self._out_pos >= len(self._out):
            self._out = bytearray(buffer)
            self._out_pos = 0
        else:
            self._out += buffer

    def _wait_for_msg(self, timeout=None):
        raise Pending()

    def _sock_exact_recv(self, bufsize, timeout=None):
        end = self._rpos + bufsize
        if end > self._rend:
            raise mm.MMQTTException("packet shorter than its fields")
        out = self._rx[self._rpos:end]
        self._rpos = end
        return out

    def _close_socket(self):
        self.flush_quietly()
        self.discard_input()  # after the last bytes went out, before the close that would otherwise reset
        if self.linger_ms:
            self._linger()
        self.close()

    def _linger(self):
        """Before the final close of an orderly stop: wait (at most linger_ms) for the broker to end the connection,
        dropping what it sends meanwhile. Over TLS the broker answers DISCONNECT with a close_notify record; arriving
        between our last read and our close, it turned the close into a reset (2 of 6 stops here)."""
        sock = self._handoff.sock
        if sock is None:
            return
        start = ticks_ms()
        while ticks_diff(ticks_ms(), start) < self.linger_ms:
            try:
                if not sock.recv_into(self._chunk, len(self._chunk)):
                    return              # the broker closed: our close is an orderly one now
            except OSError as exc:
                if not _would_block(errno_of(exc)):
                    return
                time.sleep(0.005)

    # ---------------------------------------------------------------- session calls (never wait)

    def send_ping(self):
        """Queue a PINGREQ; the PINGRESP calls on_pingresp when it arrives."""
        try:
            self.ping()
        except Pending:
            pass

    def subscribe_later(self, topic):
        """Queue SUBSCRIBE (QoS 0); the SUBACK calls on_suback(topic, granted)."""
        try:
            self.subscribe(topic, 0)
        except Pending:
            pass
        self._subscribed_topics.append(topic)
        self._sub_pids[self._pid] = topic

    def unsubscribe_later(self, topic):
        """Queue UNSUBSCRIBE; the UNSUBACK is not waited for."""
        try:
            self.unsubscribe(topic)
        except Pending:
            pass
        if topic in self._subscribed_topics:
            self._subscribed_topics.remove(topic)

    def close(self):
        """Close the socket without sending anything; safe to call twice."""
        sock = self._handoff.sock or self._raw
        self._handoff.sock = None
        self._sock = None
        self._raw = None
        self._is_connected = False
        self._subscribed_topics = []
        self._sub_pids = {}
        self._reset_io()
        if sock is not None:
            self._handoff.close_socket(sock)

    # ---------------------------------------------------------------- bytes

    def pending(self):
        """Bytes queued but not yet taken by the socket."""
        return len(self._out) - self._out_pos

    def flush(self):
        """Send what the socket takes without blocking; the number of bytes it took. Raises LinkError."""
        sock = self._handoff.sock
        if sock is None or self._out_pos >= len(self._out):
            return 0
        took = 0
        mv = memoryview(self._out)
        while self._out_pos < len(self._out):
            try:
                n = sock.send(mv[self._out_pos:])
            except OSError as exc:
                err = errno_of(exc)
                if _would_block(err):
                    break
                if err in _ENOTCONN or err == _ECONNRESET:
                    raise LinkError(ERR_CLOSED, "broker closed the connection")
                raise LinkError(err or ERR_PROTOCOL, "send failed: %s" % exc)
            if not n:
                break
            self._out_pos += n
            took += n
        return took

    def discard_input(self, limit=16):
        """Read and drop what has arrived (at most limit chunks). Closing a TCP socket with unread bytes resets
        the connection (Linux and lwIP alike), and the broker then throws away what it has not read yet: the
        goodbye just sent, DISCONNECT included, so it publishes the last will instead."""
        sock = self._handoff.sock
        if sock is None:
            return
        for _ in range(limit):
            try:
                if not sock.recv_into(self._chunk, len(self._chunk)):
                    return
            except OSError:  # EAGAIN: nothing more has arrived; anything else: leaving anyway
                return

    def flush_quietly(self):
        """One flush that swallows errors (leaving: what does not go out now is lost)."""
        try:
            self.flush()
        except Exception:
            pass

    def read(self):
        """Read what has arrived (at most reads_per_poll chunks) and handle every complete packet."""
        sock = self._handoff.sock
        if sock is None:
            return
        for _ in range(self.reads_per_poll):
            try:
                n = sock.recv_into(self._chunk, len(self._chunk))
            except OSError as exc:
                err = errno_of(exc)
                if _would_block(err):
                    return
                if err in _ENOTCONN or err == _ECONNRESET:
                    raise LinkError(ERR_CLOSED, "broker closed the connection")
                raise LinkError(err or ERR_PROTOCOL, "receive failed: %s" % exc)
            if n == 0:
                raise LinkError(ERR_CLOSED, "broker closed the connection")
            self._frame(n)
            if n < len(self._chunk):
                return

    def _frame(self, n):
        """Cut the n bytes of self._chunk into packets; each complete one is handled."""
        chunk = self._chunk
        rx = self._rx
        cap = len(rx)
        i = 0
        while i < n:
            b = chunk[i]
            st = self._rstate
            if st == 0:
                rx[0] = b
                self._rgot = 1
                self._rlen = 0
                self._rmul = 1
                self._rstate = 1
                i += 1
            elif st == 1:
                i += 1
                if self._rgot < cap:
                    rx[self._rgot] = b
                self._rgot += 1
                self._rlen += (b & 0x7F) * self._rmul
                self._rmul <<= 7
                if b & 0x80:
                    if self._rgot >= 5:
                        raise LinkError(ERR_PROTOCOL, "bad remaining length from broker")
                    continue
                self._rbody = 0
                self._rstate = 2
                if self._rlen == 0:
                    self._packet()
            else:
                take = min(self._rlen - self._rbody, n - i)
                at = self._rgot + self._rbody
                if at < cap:    # an oversized packet keeps its head: the topic of a PUBLISH (on_oversize)
                    keep = min(take, cap - at)
                    rx[at:at + keep] = chunk[i:i + keep]
                self._rbody += take
                i += take
                if self._rbody >= self._rlen:
                    self._packet()

    def _oversize(self):
        """A PUBLISH too big to keep: its topic, when the kept head holds it, goes to on_oversize(topic, size)
        (the payload is lost; what a retained message is there for may still be known from its topic)."""
        rx = self._rx
        body = self._rgot
        if rx[0] & 0xF0 != _T_PUBLISH or self.on_oversize is None or body + 2 > len(rx):
            return
        end = body + 2 + ((rx[body] << 8) | rx[body + 1])
        if end > len(rx):
            return
        try:
            topic = str(rx[body + 2:end], "utf-8")
        except UnicodeError:
            return
        self.on_oversize(topic, self._rlen + body)

    def _packet(self):
        """One complete incoming packet in self._rx[:self._rgot + self._rlen]."""
        self._rstate = 0
        total = self._rgot + self._rlen
        if total > len(self._rx):
            self.skipped += 1
            self._oversize()
            return
        rx = self._rx
        kind = rx[0] & 0xF0
        self._rpos = 0
        self._rend = total
        body = self._rgot
        if kind == _T_PUBLISH or kind == _T_PINGRESP:
            try:
                mm.MQTT._wait_for_msg(self)  # minimqtt parses it and calls on_message for a PUBLISH
            except (mm.MMQTTException, ValueError, UnicodeError, IndexError, AssertionError) as exc:
                raise LinkError(ERR_PROTOCOL, "malformed packet from broker: %s" % exc)
            if kind == _T_PINGRESP and self.on_pingresp is not None:
                self.on_pingresp()
        elif kind == _T_CONNACK:
            if self._is_connected or self._rlen != 2:
                raise LinkError(ERR_PROTOCOL, "unexpected CONNACK")
            rc = rx[body + 1]
            if rc != 0:
                text = _CONNACK_TEXT[rc] if rc < len(_CONNACK_TEXT) else "refused"
                raise LinkError(ERR_CONNACK + rc, "broker refused the connection: %s" % text)
            self._is_connected = True
            if self.on_connect is not None:
                self.on_connect(self, self.user_data, rx[body] & 1, rc)
        elif kind == _T_SUBACK:
            if self._rlen >= 3:
                pid = (rx[body] << 8) | rx[body + 1]
                topic = self._sub_pids.pop(pid, None)
                if topic is not None and self.on_suback is not None:
                    self.on_suback(topic, rx[body + 2])
        elif kind != _T_UNSUBACK:
            raise LinkError(ERR_PROTOCOL, "unexpected packet type 0x%02x from broker" % kind)
