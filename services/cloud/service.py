"""The optional cloud connection: TLS to cloud.host:cloud.port, a hello with the pairing hash, then one JSON line
per reading interval (docs/cloud.md). Off unless cloudIotEnabled is true and the device is paired."""

import errno

from adafruit_ticks import ticks_add, ticks_less
from micropython import const

from core.module import OK, WARN, Module
from core.sockets import close_quietly, connect_step
from meter.decimal import to_str

OFF = "OFF"
WAIT_RETRY = "WAIT_RETRY"
CONNECTING = "CONNECTING"   # the TCP connect, one non-blocking step per poll
HELLO = "HELLO"             # TLS handshake (inside send/recv) and hello, until the welcome
CONNECTED = "CONNECTED"

_EAGAIN = errno.EAGAIN
_ETIMEDOUT_DEV = const(116)
_ENOTCONN_DEV = const(128)
_MAX_LINE = const(512)
PROTOCOL = 1


def _code(exc):
    return exc.args[0] if exc.args and isinstance(exc.args[0], int) else 0


def _num(value):
    """An exact decimal (m, e) as a JSON number text, or null."""
    return "null" if value is None else to_str(value[0], value[1])


def reading_line(reading, ts):
    """The wire line of a reading: energies in Wh, power in W, exact decimals (docs/cloud.md)."""
    return ('{"t":"reading","ts":%s,"import_Wh":%s,"export_Wh":%s,"power_W":%s}\n'
            % ("null" if ts is None else str(ts), _num(reading.get("1.8.0")), _num(reading.get("2.8.0")),
               _num(reading.get("16.7.0")))).encode()


class CloudService(Module):
    """pool (socketpool), bus (readings), settings, pairing (services.cloud.pairing.Pairing), device_id, version,
    ssl_factory (ssl.create_default_context), clock (for timestamps, may be None), log."""

    name = "cloud"
    poll_every_ms = 250     # a push every few seconds at most; its connection tolerates 250 ms
    connect_timeout_ms = 10000  # TCP connect, stepped without blocking; the handshake counts to the welcome's
    welcome_timeout_ms = 10000
    backoff_first_ms = 30000
    backoff_max_ms = 600000
    send_stall_ms = 30000
    interval_ms = 60000         # until the cloud's welcome says otherwise (10..3600 s)

    def __init__(self, pool, bus, settings, pairing, device_id, version, ssl_factory=None, clock=None, log=None):
        Module.__init__(self)
        self._pool = pool
        self._bus = bus
        self._settings = settings
        self._pairing = pairing
        self._device_id = device_id
        self._version = version
        self._ssl_factory = ssl_factory
        self._clock = clock
        self._log = log
        self._sock = None
        self._out = b""
        self._in = bytearray()
        self._buf = bytearray(256)
        self.conn_state = OFF
        self.last_error = ""
        self._cfg = None
        self._retry_at = None
        self._backoff = self.backoff_first_ms
        self._deadline = 0
        self._next_push = 0
        self._stall_at = None
        self._addr = None
        self._host = ""
        self.sent = 0

    @property
    def connected(self):
        return self.conn_state == CONNECTED

    def _note(self, level, msg, *args):
        if self._log is not None:
            getattr(self._log, level)(msg, *args)

    def _config(self):
        enabled = bool(self._settings.get("cloudIotEnabled", False))
        return (enabled, self._settings.get("cloud.host", "") or "", self._settings.get("cloud.port", 8883),
                self._pairing.token_sha256, self._pairing.changes)

    def stop(self):
        self._close()
        self.conn_state = OFF

    def sockets_held(self):
        """1 while the link to the cloud holds its socket (core/sockbudget.py)."""
        return 0 if self._sock is None else 1

    def _close(self):
        self._sock = close_quietly(self._sock)
        self._out = b""
        self._in = bytearray()

    def _fail(self, now, message, long=False):
        self._close()
        self.last_error = message
        self.state = WARN
        self.count("failures")
        self.conn_state = WAIT_RETRY
        delay = self.backoff_max_ms if long else self._backoff
        self._retry_at = ticks_add(now, delay)
        self._backoff = min(self._backoff * 2, self.backoff_max_ms)
        self._note("warning", "cloud: %s; retry in %d s", message, delay // 1000)

    def poll(self, now_ms):
        cfg = self._config()
        if cfg != self._cfg:
            self._close()
            self._cfg = cfg
            self._retry_at = None
            self._backoff = self.backoff_first_ms
            enabled, host, _port, token_hash, _changes = cfg
            if not enabled or not host or token_hash is None:
                self.conn_state = OFF
                self.state = OK
                self.last_error = "" if not enabled else ("not paired" if token_hash is None else "no cloud.host")
                return
            self.conn_state = WAIT_RETRY
        if self.conn_state == OFF:
            return
        if self.conn_state == WAIT_RETRY:
            if self._retry_at is None or not ticks_less(now_ms, self._retry_at):
                self._open(now_ms)
            return
        if self.conn_state == CONNECTING:
            self._connecting(now_ms)
            return
        self._flush(now_ms)
        if self._sock is None:
            return
        self._receive(now_ms)
        if self.conn_state == HELLO and self._sock is not None and not ticks_less(now_ms, self._deadline):
            self._fail(now_ms, "no welcome from the cloud within %d s" % (self.welcome_timeout_ms // 1000))
        elif self.conn_state == CONNECTED and not ticks_less(now_ms, self._next_push):
            self._next_push = ticks_add(now_ms, self.interval_ms)
            reading = self._bus.latest("reading")
            if reading is not None and not self._out:
                ts = self._clock.time() if self._clock is not None and self._clock.synced else None
                self._out = reading_line(reading, ts)
                self.sent += 1
                self._flush(now_ms)

    def _open(self, now):
        _enabled, host, port, token_hash, _c = self._cfg
        if host.endswith(".invalid"):
            self._fail(now, "%s is a placeholder (set cloud.host)" % host, long=True)
            return
        try:
            addr = self._pool.getaddrinfo(host, port, 0, self._pool.SOCK_STREAM)[0][-1]
        except (OSError, IndexError) as exc:
            self._fail(now, "cannot resolve %s: %s" % (host, exc))
            return
        try:
            sock = self._pool.socket(self._pool.AF_INET, self._pool.SOCK_STREAM)
        except (OSError, RuntimeError) as exc:
            self._fail(now, "no socket: %s" % exc)
            return
        self._sock = sock
        self._addr = addr
        self._host = host
        if self._ssl_factory is None:
            self._fail(now, "this build has no ssl module: the cloud needs TLS")
            return
        # Never a blocking connect: a host that drops SYNs would hold the whole loop for the connect timeout.
        sock.setblocking(False)
        self.conn_state = CONNECTING
        self._deadline = ticks_add(now, self.connect_timeout_ms)
        self._connecting(now)

    def _connecting(self, now):
        """One step of the TCP connect; once up, TLS is wrapped round it and the hello queued."""
        port = self._cfg[2]
        try:
            up = connect_step(self._sock, self._addr)
        except OSError as exc:
            self._fail(now, "TCP connect to %s:%d failed: %s" % (self._host, port, exc))
            return
        if not up:
            if not ticks_less(now, self._deadline):
                self._fail(now, "TCP connect to %s:%d timed out after %d s"
                           % (self._host, port, self.connect_timeout_ms // 1000))
            return
        try:
            # Connected and non-blocking: mbedTLS (and the host's ssl stand-in) runs the handshake step by step
            # inside the following send/recv_into calls, each returning EAGAIN until it is done.
            self._sock = self._ssl_factory().wrap_socket(self._sock, server_hostname=self._host)
        except (OSError, RuntimeError, ValueError) as exc:
            self._fail(now, "TLS connect to %s:%d failed: %s" % (self._host, port, exc))
            return
        self._out = ('{"t":"hello","v":%d,"device":"%s","fw":"%s","pair":"%s"}\n'
                     % (PROTOCOL, self._device_id, self._version, self._cfg[3])).encode()
        self.conn_state = HELLO
        self._deadline = ticks_add(now, self.welcome_timeout_ms)
        self.count("connects")
        self._flush(now)

    def _flush(self, now):
        if not self._out or self._sock is None:
            self._stall_at = None
            return
        try:
            n = self._sock.send(self._out)
        except OSError as exc:
            if _code(exc) == _EAGAIN:
                n = 0
            else:
                self._fail(now, self._what() + "send failed: %s" % exc)
                return
        self._out = self._out[n:]
        if not self._out:
            self._stall_at = None
        elif n:
            self._stall_at = ticks_add(now, self.send_stall_ms)
        elif self._stall_at is None:
            self._stall_at = ticks_add(now, self.send_stall_ms)
        elif not ticks_less(now, self._stall_at):
            self._fail(now, "send stalled for %d s" % (self.send_stall_ms // 1000))

    def _what(self):
        """Prefix of a failure before the welcome: the TLS handshake runs inside those sends and receives."""
        return "TLS connect to %s:%d failed: " % (self._host, self._cfg[2]) if self.conn_state == HELLO else ""

    def _receive(self, now):
        try:
            n = self._sock.recv_into(self._buf)
        except OSError as exc:
            code = _code(exc)
            if code in (_EAGAIN, _ETIMEDOUT_DEV):
                return
            if code in (_ENOTCONN_DEV, errno.ENOTCONN):
                n = 0
            else:
                self._fail(now, self._what() + "connection lost: %s" % exc)
                return
        if n == 0:
            self._fail(now, "the cloud closed the connection")
            return
        self._in.extend(memoryview(self._buf)[:n])
        while True:
            end = self._in.find(b"\n")
            if end < 0:
                if len(self._in) > _MAX_LINE:
                    self._fail(now, "line from the cloud too long")
                return
            line = bytes(self._in[:end])
            self._in = self._in[end + 1:]
            self._on_line(now, line)
            if self._sock is None:
                return

    def _on_line(self, now, line):
        import json

        try:
            msg = json.loads(line)
        except ValueError:
            self._fail(now, "the cloud sent no JSON")
            return
        kind = msg.get("t") if isinstance(msg, dict) else None
        if kind == "welcome" and self.conn_state == HELLO:
            interval = msg.get("interval", self.interval_ms // 1000)
            if isinstance(interval, int) and 10 <= interval <= 3600:
                self.interval_ms = interval * 1000
            self.conn_state = CONNECTED
            self.state = OK
            self.last_error = ""
            self._backoff = self.backoff_first_ms
            self._next_push = now
            self._note("info", "cloud: connected to %s", self._cfg[1])
        elif kind == "error":
            text = str(msg.get("message", "refused"))[:80]
            self._fail(now, "the cloud refused: " + text, long=msg.get("code") == "unauthorized")

    def describe(self):
        d = Module.describe(self)
        d["connection"] = self.conn_state
        d["last_error"] = self.last_error
        d["sent"] = self.sent
        return d
