"""The hand-written MQTT client used before adafruit_minimqtt: kept only for bench_mqtt_stall, not device code."""

# Why not adafruit_minimqtt: its connect() waits for CONNACK (and retries with sleeps) inside one
# call, loop() blocks at least socket_timeout, ping() waits up to keep_alive for PINGRESP and
# subscribe() for SUBACK. A black-holed broker therefore stalls the cooperative loop for seconds
# to minutes. Here only the TCP connect (+ TLS handshake) blocks, bounded by connect_timeout_s;
# every other step is a non-blocking send/recv_into resumed on the next poll.

import errno
import os

from adafruit_ticks import ticks_add, ticks_diff, ticks_less
from micropython import const

from core.module import OK, WARN, Module
from core.version import VERSION
from meter import obis
from meter.decimal import cmp, parse
from services.mqtt import ha_discovery as ha

# Connection states, as GET /api/v1/mqtt/status reports them.
OFF = "OFF"
INIT = "INIT"
CONNECTING = "CONNECTING"
CONNECTED = "CONNECTED"
WAIT_RETRY = "WAIT_RETRY"
FAILED = "FAILED"

# last_error codes. Positive below 1000: the socket errno; negative: a TLS (mbedTLS) error code.
ERR_CONNACK = const(1000)        # + the broker's CONNACK return code 1..5
ERR_NO_HOST = const(2001)
ERR_DNS = const(2002)
ERR_CONNACK_TIMEOUT = const(2004)
ERR_PING_TIMEOUT = const(2005)
ERR_CLOSED = const(2006)
ERR_PROTOCOL = const(2007)
ERR_SEND_STALLED = const(2008)
ERR_NO_SOCKET = const(2009)
ERR_CONFIG = const(2010)
ERR_MEMORY = const(2011)

_CONNACK_TEXT = ("accepted", "unacceptable protocol version", "client id rejected", "server unavailable",
                 "bad user name or password", "not authorised")

# The errno module's numbers plus lwIP's, which CircuitPython's sockets raise on the ESP32.
_EAGAIN = errno.EAGAIN
_ETIMEDOUT_DEV = const(116)   # lwIP's ETIMEDOUT on the device
_ETIMEDOUT_POSIX = errno.ETIMEDOUT
_ENOTCONN_DEV = const(128)    # lwIP's ENOTCONN: non-blocking recv from a closed peer
_ENOTCONN_POSIX = errno.ENOTCONN

_T_CONNACK = const(0x20)
_T_PUBLISH = const(0x30)
_T_SUBACK = const(0x90)
_T_PINGRESP = const(0xD0)
_PINGREQ = b"\xc0\x00"
_DISCONNECT = b"\xe0\x00"


def _enc_len(n):
    # MQTT remaining length: 7 bits per byte, high bit = more.
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return out


def _field(s):
    # A length-prefixed UTF-8 string field.
    b = s.encode("utf-8") if isinstance(s, str) else bytes(s)
    return bytes((len(b) >> 8, len(b) & 0xFF)) + b


def connect_packet(client_id, will_topic, will_msg, user, password, keepalive_s):
    """CONNECT with clean session and a retained QoS 0 last will; the password only together with a user."""
    flags = 0x02 | 0x04 | 0x20
    body = bytearray(_field(client_id) + _field(will_topic) + _field(will_msg))
    if user:
        flags |= 0x80
        body += _field(user)
        if password:
            flags |= 0x40
            body += _field(password)
    var = b"\x00\x04MQTT\x04" + bytes((flags, keepalive_s >> 8, keepalive_s & 0xFF))
    return b"\x10" + bytes(_enc_len(len(var) + len(body))) + var + bytes(body)


def publish_packet(topic, payload, retain):
    """PUBLISH at QoS 0."""
    t = _field(topic)
    p = payload.encode("utf-8") if isinstance(payload, str) else bytes(payload)
    return bytes((0x31 if retain else 0x30,)) + bytes(_enc_len(len(t) + len(p))) + t + p


def subscribe_packet(pid, topic):
    """SUBSCRIBE one topic filter at QoS 0."""
    body = bytes((pid >> 8, pid & 0xFF)) + _field(topic) + b"\x00"
    return b"\x82" + bytes(_enc_len(len(body))) + body


def unsubscribe_packet(pid, topic):
    """UNSUBSCRIBE one topic filter."""
    body = bytes((pid >> 8, pid & 0xFF)) + _field(topic)
    return b"\xa2" + bytes(_enc_len(len(body))) + body


class EnergyGuard:
    """Never publish an energy total that is zero, negative or lower than the last one published (HA reads a
    drop as a meter reset and the Energy dashboard shows a spike). Kept in RAM across reconnects."""

    def __init__(self):
        self.last = {}
        self.suppressed = 0

    def allow(self, code, m, e):
        """True (and remembered) when the value may be sent."""
        if m <= 0:
            self.suppressed += 1
            return False
        prev = self.last.get(code)
        if prev is not None and cmp(m, e, prev[0], prev[1]) < 0:
            self.suppressed += 1
            return False
        self.last[code] = (m, e)
        return True

    def seed(self, code, m, e):
        """Raise the floor to a value published before (the broker's retained value from an earlier boot)."""
        prev = self.last.get(code)
        if prev is None or cmp(m, e, prev[0], prev[1]) > 0:
            self.last[code] = (m, e)


class _Config:
    """The mqtt.* settings and the two that name things, read once per (re)configuration."""

    def __init__(self, settings, device_id):
        g = settings.get
        self.enable = g("mqtt.enable", False) is True
        self.host = str(g("mqtt.host", "") or "")
        self.port = g("mqtt.port", 1883)
        self.use_tls = g("mqtt.use_tls", False) is True
        self.user = str(g("mqtt.user", "") or "")
        self.password = str(g("mqtt.password", "") or "")
        self.client_id = str(g("mqtt.client_id", "") or "") or ha.default_client_id(device_id)
        self.prefix = str(g("mqtt.topic_prefix", "") or "") or ha.default_prefix(device_id)
        self.interval = g("mqtt.sendInterval", 10)
        self.discovery = str(g("mqtt.discovery_prefix", "") or "") or "homeassistant"

    def key(self):
        """What a change of requires a reconnect."""
        return (self.enable, self.host, self.port, self.use_tls, self.user, self.password, self.client_id,
                self.prefix, self.interval, self.discovery)

    def problem(self):
        """Why this configuration cannot connect, or None."""
        if not self.host:
            return "mqtt.host is empty"
        if not isinstance(self.port, int) or isinstance(self.port, bool) or not 0 < self.port < 65536:
            return "mqtt.port out of range"
        if not isinstance(self.interval, int) or isinstance(self.interval, bool) or self.interval < 1:
            return "mqtt.sendInterval must be a whole number of seconds >= 1"
        for t in (self.prefix, self.discovery):
            if "+" in t or "#" in t or t.endswith("/"):
                return "topic prefix %r must not contain + or # or end with /" % t
        return None


class MqttService(Module):
    """pool: socketpool.SocketPool; bus: core.bus.Bus; settings: core.settings.Settings; device_id: 12 hex;
    ssl_context: callable -> a fresh ssl.SSLContext (create_default_context); ca_store: services.mqtt.ca_store.CaStore;
    web_url: callable -> the device's web address or None; rand: os.urandom (jitter)."""

    name = "mqtt"
    connect_timeout_s = 2.0    # TCP connect + TLS handshake: the only blocking step, once per attempt
    connack_timeout_ms = 10000
    keepalive_s = 60
    ping_every_ms = 30000      # a PINGREQ this often detects a black-holed broker (qos 0 sends never would)
    ping_timeout_ms = 10000
    send_stall_ms = 15000      # outgoing bytes that make no progress this long: the peer is gone
    backoff_first_ms = 1000
    backoff_max_ms = 300000
    stable_ms = 60000          # connected this long: the next failure starts the backoff from the beginning
    msgs_per_poll = 6          # packets built per poll (each costs a few string joins)
    rx_max = 512               # largest incoming packet kept; bigger ones are skipped

    def __init__(self, pool, bus, settings, device_id, ssl_context=None, ca_store=None, web_url=None, log=None,
                 rand=os.urandom):
        Module.__init__(self)
        self._pool = pool
        self._bus = bus
        self._settings = settings
        self.device_id = device_id
        self._ssl_factory = ssl_context
        self.ca = ca_store
        self._web_url = web_url
        self._log = log
        self._rand = rand
        self._settings_ring = bus.subscribe("settings", 4)
        self.guard = EnergyGuard()
        self.codes_seen = []        # codes the meter has sent: announced on every connection, kept across them
        self._chunk = bytearray(256)
        self._rx = bytearray(self.rx_max)
        self._cfg = None
        self._ssl_ctx = None
        self._ssl_pem = None       # CircuitPython's SSLContext keeps only a reference to cadata
        self._sock = None
        self.conn_state = OFF
        self.last_error = 0
        self.last_error_message = ""
        self.attempts = 0
        self._retry_at = 0
        self._ca_dirty = False
        self._now = 0
        self._reset_session()

    # ---------------------------------------------------------------- lifecycle

    def _reset_session(self):
        self._out = bytearray()
        self._out_pos = 0
        self._out_since = None      # when the outbox last made progress while non-empty
        # ("pub", topic, payload, retain) | ("disc", code) | ("sub", topic, pid) | ("unsub", topic) | ("ping",)
        self._queue = []
        self._ph = 0                # incoming packet: header byte, remaining length, bytes got
        self._pstate = 0
        self._plen = 0
        self._pmul = 1
        self._pgot = 0
        self._deadline = 0
        self._ping_at = 0
        self._ping_sent = None
        self._seeding = False       # reading our own retained energy totals back before sending new ones
        self._connected_at = 0
        self._announced = []
        self._meter_online = None   # what the meter availability topic says on this connection
        self._next_tele = 0
        self._lang = "de"
        self._device_name = ""
        self._url = None

    def start(self):
        if self.ca is not None:
            self.ca.recover()
        self._configure(self._now)

    def stop(self):
        self._disconnect(graceful=True)

    def ca_changed(self):
        """The custom CA was stored or deleted: a TLS connection reconnects with it."""
        self._ca_dirty = True

    def _note(self, level, msg, *args):
        if self._log is not None:
            self._log.log(level, msg, *args)

    def _configure(self, now):
        """Read the settings and start over: disabled -> OFF, unusable -> FAILED, else INIT (connect now)."""
        self._disconnect(graceful=True)
        cfg = _Config(self._settings, self.device_id)
        self._cfg = cfg
        self._ssl_ctx = None
        self._ssl_pem = None
        self.attempts = 0
        self.last_error = 0
        self.last_error_message = ""
        if not cfg.enable:
            self.conn_state = OFF
            self.state = OK
            return
        why = cfg.problem()
        if why is not None:
            self._set_error(ERR_NO_HOST if not cfg.host else ERR_CONFIG, why)
            self.conn_state = FAILED
            self.state = WARN
            self._note("warning", "mqtt: not connecting: %s", why)
            return
        self.conn_state = INIT  # connects on the next poll

    def _set_error(self, code, msg):
        self.last_error = code
        self.last_error_message = msg

    # ---------------------------------------------------------------- poll

    def poll(self, now_ms):
        self._now = now_ms
        changed = False
        while self._settings_ring.pop() is not None:
            changed = True
        if changed and _Config(self._settings, self.device_id).key() != self._cfg.key():
            self._note("info", "mqtt: settings changed, reconnecting")
            self._configure(now_ms)
        if self._ca_dirty:
            self._ca_dirty = False
            if self._cfg.enable and self._cfg.use_tls:
                self._configure(now_ms)
        st = self.conn_state
        if st == INIT or (st == WAIT_RETRY and not ticks_less(now_ms, self._retry_at)):
            self._open(now_ms)
            return
        if st == CONNECTING:
            if self._io(now_ms) and self.conn_state == CONNECTING and ticks_diff(now_ms, self._deadline) > 0:
                self._fail(now_ms, ERR_CONNACK_TIMEOUT, "no CONNACK within %d ms" % self.connack_timeout_ms)
            return
        if st == CONNECTED:
            self._connected_poll(now_ms)

    def _connected_poll(self, now):
        if not self._io(now):
            return
        if self.attempts and ticks_diff(now, self._connected_at) >= self.stable_ms:
            self.attempts = 0
        if self._ping_sent is not None:
            if ticks_diff(now, self._ping_sent) > self.ping_timeout_ms:
                self._fail(now, ERR_PING_TIMEOUT, "no PINGRESP within %d ms" % self.ping_timeout_ms)
                return
        elif ticks_diff(now, self._ping_at) >= self.ping_every_ms:
            self._ping_at = now
            self._ping_sent = now
            self._queue.insert(0, ("ping",))
        reading = self._bus.latest("reading")
        online = reading is not None
        if online != self._meter_online:
            # Availability changes at once, not at the next interval: a stale meter must not look alive.
            self._meter_online = online
            self._queue.append(("pub", ha.meter_topic(self._cfg.prefix), ha.ONLINE if online else ha.OFFLINE,
                                True))
            if online:
                self._next_tele = now
        if online and not ticks_less(now, self._next_tele):
            self._next_tele = ticks_add(now, self._cfg.interval * 1000)
            self._telemetry(reading)
        self._pump(now)

    def _telemetry(self, reading):
        """Queue discovery for codes seen first, each value, then the JSON state (all retained)."""
        if self._seeding:
            self._next_tele = self._now  # right after the retained totals are in
            return
        if len(self._queue) > 64:
            self.count("telemetry_skipped")  # the broker is slower than the interval: keep memory bounded
            return
        values = reading.values
        prefix = self._cfg.prefix
        sent = []
        for code in obis.CODES:  # table order: deterministic, and only codes with known units
            mv = values.get(code)
            if mv is None:
                continue
            if code not in self.codes_seen:
                self.codes_seen.append(code)
            if code not in self._announced:
                self._announced.append(code)
                self._queue.append(("disc", code))
            if obis.kind(code) == "energy" and not self.guard.allow(code, mv[0], mv[1]):
                self.counters["energy_suppressed"] = self.guard.suppressed
                continue
            sent.append(code)
            self._queue.append(("pub", ha.value_topic(prefix, code), ha.value_text(code, mv[0], mv[1]), True))
        self._queue.append(("pub", ha.state_topic(prefix), ha.state_json(values, sent), True))
        self.count("telemetry")

    def _pump(self, now):
        """Move queued messages into the outbox while it is empty, a few per poll."""
        n = 0
        while self._queue and self._out_pos >= len(self._out) and n < self.msgs_per_poll:
            item = self._queue.pop(0)
            kind = item[0]
            if kind == "pub":
                self._send(publish_packet(item[1], item[2], item[3]))
            elif kind == "disc":
                self._send_discovery(item[1])
            elif kind == "ping":
                self._send(_PINGREQ)
            elif kind == "sub":
                self._send(subscribe_packet(item[2], item[1]))
            elif kind == "unsub":
                self._send(unsubscribe_packet(3, item[1]))
            n += 1
            if not self._flush(now):
                return

    def _send_discovery(self, code):
        cfg = self._cfg
        payload = ha.config_payload(code, self.device_id, cfg.prefix, self._lang, self._device_name, VERSION,
                                    self._url)
        if payload is not None:
            self._send(publish_packet(ha.config_topic(cfg.discovery, self.device_id, code), payload, True))
            self.count("discovery")

    # ---------------------------------------------------------------- connection

    def _open(self, now):
        """Resolve, connect (the one bounded blocking step), queue CONNECT; failures schedule a retry."""
        cfg = self._cfg
        self._reset_session()
        self.conn_state = CONNECTING
        try:
            info = self._pool.getaddrinfo(cfg.host, cfg.port, 0, self._pool.SOCK_STREAM)[0]
        except OSError as exc:
            self._fail(now, ERR_DNS, "cannot resolve %s: %s" % (cfg.host, exc))
            return
        try:
            sock = self._pool.socket(self._pool.AF_INET, self._pool.SOCK_STREAM)
        except (OSError, RuntimeError) as exc:
            self._fail(now, ERR_NO_SOCKET, "no socket: %s" % exc)
            return
        self._sock = sock
        try:
            if cfg.use_tls:
                sock = self._tls_context().wrap_socket(sock, server_hostname=cfg.host)
                self._sock = sock
            sock.settimeout(self.connect_timeout_s)
            sock.connect(info[-1])
            sock.settimeout(0)
        except MemoryError:
            self._fail(now, ERR_MEMORY, "out of memory while connecting")
            return
        except (OSError, RuntimeError, ValueError) as exc:
            code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else ERR_PROTOCOL
            self._fail(now, code, "connect to %s:%d failed: %s" % (cfg.host, cfg.port, exc))
            return
        self._lang = "en" if self._settings.get("language.active", "de") == "en" else "de"
        self._device_name = str(self._settings.get("device_name", "") or "Meter Plus")
        self._url = self._web_url() if self._web_url is not None else None
        self._deadline = ticks_add(now, self.connack_timeout_ms)
        self._send(connect_packet(cfg.client_id, ha.status_topic(cfg.prefix), ha.OFFLINE, cfg.user, cfg.password,
                                  self.keepalive_s))
        self.count("connects")
        self._flush(now)

    def _tls_context(self):
        if self._ssl_ctx is None:
            if self._ssl_factory is None:
                raise ValueError("TLS requested but this build has no ssl module")
            ctx = self._ssl_factory()
            pem = self.ca.pem() if self.ca is not None else None
            if pem is not None:
                ctx.load_verify_locations(cadata=pem)  # replaces the built-in bundle on CircuitPython
            self._ssl_ctx = ctx
            self._ssl_pem = pem
        return self._ssl_ctx

    def _on_connack(self, now, rc):
        if rc != 0:
            text = _CONNACK_TEXT[rc] if rc < len(_CONNACK_TEXT) else "refused"
            self._fail(now, ERR_CONNACK + rc, "broker refused the connection: %s" % text,
                       give_up_long=rc in (4, 5))
            return
        cfg = self._cfg
        self.conn_state = CONNECTED
        self.state = OK
        self._connected_at = now
        self._ping_at = now
        self.last_error = 0
        self.last_error_message = ""
        self._note("info", "mqtt: connected to %s:%d as %s", cfg.host, cfg.port, cfg.client_id)
        self._queue.append(("pub", ha.status_topic(cfg.prefix), ha.ONLINE, True))
        self._queue.append(("sub", ha.birth_topic(cfg.discovery), 1))
        # The broker still holds the totals published before a restart: read them back (retained, sent
        # after SUBACK) and raise the energy guard's floor; the PINGRESP behind them says they are all in.
        self._queue.append(("sub", cfg.prefix + "/+", 2))
        self._queue.append(("ping",))
        self._ping_sent = now
        self._seeding = True
        for code in self.codes_seen:
            self._announced.append(code)
            self._queue.append(("disc", code))
        self._meter_online = None  # publish the meter availability on this connection
        self._next_tele = now

    def _on_publish(self, topic, payload):
        if self._seeding:
            head = self._cfg.prefix + "/"
            if topic.startswith(head):
                code = ha.code_of_key(topic[len(head):])
                if code is not None and obis.kind(code) == "energy":
                    try:
                        mv = parse(str(payload, "utf-8"))
                    except (ValueError, UnicodeError):
                        return
                    self.guard.seed(code, mv[0], mv[1] + 3)  # kWh on the wire, Wh inside
                    self.count("totals_seeded")
                return
        if topic == ha.birth_topic(self._cfg.discovery) and payload == b"online":
            # Home Assistant restarted and lost its entities: announce every known sensor again.
            for code in self._announced:
                self._queue.append(("disc", code))
            self.count("ha_births")

    def _fail(self, now, code, msg, give_up_long=False):
        """Drop the connection and schedule a retry with exponential backoff and jitter."""
        self._close()
        self._set_error(code, msg)
        self.attempts += 1
        self.count("failures")
        delay = self.backoff_max_ms
        if not give_up_long and self.attempts < 20:
            delay = min(self.backoff_first_ms << (self.attempts - 1), self.backoff_max_ms)
        # Equal jitter: half the delay fixed, half random, so many devices do not retry in step.
        r = self._rand(2)
        half = delay // 2
        delay = half + (((r[0] << 8) | r[1]) * half) // 65535
        self._retry_at = ticks_add(now, delay)
        self.conn_state = WAIT_RETRY
        self.state = WARN
        self._note("warning", "mqtt: %s (attempt %d, retry in %d ms)", msg, self.attempts, delay)

    def _close(self):
        sock = self._sock
        self._sock = None
        if sock is not None:
            try:
                sock.close()
            except Exception:
                pass

    def _disconnect(self, graceful):
        """Leave cleanly: offline (retained) and DISCONNECT if they go out at once, else the will says it."""
        if self._sock is not None and self.conn_state == CONNECTED and graceful:
            try:
                self._flush(self._now)
                if self._sock is not None and self._out_pos >= len(self._out):
                    self._send(publish_packet(ha.status_topic(self._cfg.prefix), ha.OFFLINE, True) + _DISCONNECT)
                    self._flush(self._now)
            except Exception:
                pass
        self._close()
        self._reset_session()
        if self.conn_state != OFF:
            self.conn_state = INIT

    # ---------------------------------------------------------------- bytes

    def _send(self, data):
        if self._out_pos >= len(self._out):
            self._out = bytearray(data)
            self._out_pos = 0
        else:
            self._out += data

    def _flush(self, now):
        """Send what the socket takes without blocking; False when the connection failed."""
        out = self._out
        if self._out_pos >= len(out):
            self._out_since = None
            return True
        if self._out_since is None:
            self._out_since = now
        mv = memoryview(out)
        while self._out_pos < len(out):
            try:
                n = self._sock.send(mv[self._out_pos:])
            except OSError as exc:
                err = exc.args[0] if exc.args else 0
                if err == _EAGAIN or err == _ETIMEDOUT_DEV or err == _ETIMEDOUT_POSIX:
                    break
                self._fail(now, err if isinstance(err, int) else ERR_PROTOCOL, "send failed: %s" % exc)
                return False
            if not n:
                break
            self._out_pos += n
            self._out_since = now
        if self._out_pos >= len(out):
            self._out_since = None
        elif ticks_diff(now, self._out_since) > self.send_stall_ms:
            self._fail(now, ERR_SEND_STALLED, "broker took no data for %d ms" % self.send_stall_ms)
            return False
        return True

    def _io(self, now):
        """Flush, then read what has arrived (at most two chunks); False when the connection failed."""
        if not self._flush(now):
            return False
        for _ in range(2):
            try:
                n = self._sock.recv_into(self._chunk)
            except OSError as exc:
                err = exc.args[0] if exc.args else 0
                if err == _EAGAIN or err == _ETIMEDOUT_DEV or err == _ETIMEDOUT_POSIX:
                    return True
                if err == _ENOTCONN_DEV or err == _ENOTCONN_POSIX:
                    self._fail(now, ERR_CLOSED, "broker closed the connection")
                    return False
                self._fail(now, err if isinstance(err, int) else ERR_PROTOCOL, "receive failed: %s" % exc)
                return False
            if n == 0:
                self._fail(now, ERR_CLOSED, "broker closed the connection")
                return False
            if not self._feed(now, n):
                return False
            if n < len(self._chunk):
                return True
        return True

    def _feed(self, now, n):
        """Parse n received bytes of self._chunk; handles complete packets; False when the connection failed."""
        chunk = self._chunk
        i = 0
        while i < n:
            st = self._pstate
            if st == 0:
                self._ph = chunk[i]
                self._plen = 0
                self._pmul = 1
                self._pstate = 1
                i += 1
            elif st == 1:
                b = chunk[i]
                i += 1
                self._plen += (b & 0x7F) * self._pmul
                self._pmul <<= 7
                if b & 0x80:
                    if self._pmul > 1 << 21:
                        self._fail(now, ERR_PROTOCOL, "bad remaining length from broker")
                        return False
                    continue
                self._pgot = 0
                self._pstate = 2
                if self._plen == 0 and not self._packet(now):
                    return False
            else:
                take = min(self._plen - self._pgot, n - i)
                if self._plen <= len(self._rx):
                    self._rx[self._pgot:self._pgot + take] = chunk[i:i + take]
                self._pgot += take
                i += take
                if self._pgot >= self._plen and not self._packet(now):
                    return False
        return True

    def _packet(self, now):
        """One complete incoming packet in self._rx[:self._plen]."""
        self._pstate = 0
        kind = self._ph & 0xF0
        n = self._plen
        rx = self._rx
        self.count("rx_packets")
        if n > len(rx):
            self.count("rx_skipped")
            return True
        if kind == _T_CONNACK:
            if self.conn_state != CONNECTING or n != 2:
                self._fail(now, ERR_PROTOCOL, "unexpected CONNACK")
                return False
            self._on_connack(now, rx[1])
            return self.conn_state == CONNECTED
        if kind == _T_PINGRESP:
            self._ping_sent = None
            if self._seeding:
                self._seeding = False
                self._queue.append(("unsub", self._cfg.prefix + "/+"))
        elif kind == _T_SUBACK:
            if n >= 3 and rx[2] == 0x80:
                self._note("warning", "mqtt: broker refused the subscription to the HA status topic")
        elif kind == _T_PUBLISH and n >= 2:
            tlen = (rx[0] << 8) | rx[1]
            off = 2 + tlen + (2 if self._ph & 0x06 else 0)
            if off <= n:
                self._on_publish(str(bytes(rx[2:2 + tlen]), "utf-8"), bytes(rx[off:n]))
        return True

    # ---------------------------------------------------------------- reporting

    def status(self):
        """GET /api/v1/mqtt/status (the password is never part of it)."""
        cfg = self._cfg or _Config(self._settings, self.device_id)
        return {
            "enabled": cfg.enable,
            "state": self.conn_state,
            "host": cfg.host,
            "port": cfg.port,
            "client_id": cfg.client_id,
            "use_tls": cfg.use_tls,
            "last_error": self.last_error,
            "last_error_message": self.last_error_message,
            "reconnect_attempts": self.attempts,
        }

    def describe(self):
        d = Module.describe(self)
        d["conn"] = self.conn_state
        d["attempts"] = self.attempts
        return d
