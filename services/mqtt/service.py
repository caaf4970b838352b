"""MQTT telemetry and Home Assistant discovery over adafruit_minimqtt, hardened so no poll waits on the network."""

# The protocol (packets, last will, keep-alive ping) is adafruit_minimqtt's, through services/mqtt/client.py,
# which takes out everything in it that blocks. This module is the service: when to connect, deadlines (TCP
# connect, CONNACK, PINGRESP, a send that makes no progress), reconnect backoff, and what is published in which
# order so that Home Assistant never shows an old value as current.

import os

from adafruit_ticks import ticks_add, ticks_diff, ticks_less
from micropython import const

from core.module import OK, WARN, Module
from core.version import VERSION
from meter import obis
from meter.decimal import parse
from services.metering.energy_floor import EnergyFloor
from services.mqtt import client as mc
from services.mqtt import ha_discovery as ha

# Connection states, as GET /api/v1/mqtt/status reports them.
OFF = "OFF"
INIT = "INIT"
CONNECTING = "CONNECTING"
CONNECTED = "CONNECTED"
WAIT_RETRY = "WAIT_RETRY"
FAILED = "FAILED"

# last_error codes. Positive below 1000: the socket errno; negative: a TLS (mbedTLS) error code.
ERR_CONNACK = mc.ERR_CONNACK     # + the broker's CONNACK return code 1..5
ERR_NO_HOST = const(2001)
ERR_DNS = const(2002)
ERR_CONNACK_TIMEOUT = const(2004)
ERR_PING_TIMEOUT = const(2005)
ERR_CLOSED = mc.ERR_CLOSED
ERR_PROTOCOL = mc.ERR_PROTOCOL
ERR_SEND_STALLED = const(2008)
ERR_NO_SOCKET = const(2009)
ERR_CONFIG = const(2010)
ERR_MEMORY = const(2011)
ERR_CONNECT_TIMEOUT = const(116)  # lwIP's ETIMEDOUT: no TCP connection within connect_timeout_ms


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
    ssl_context: callable -> a fresh ssl.SSLContext (create_default_context); ca_store: services.mqtt.ca_store.CaStore,
    or ca_path: the file of one made when first asked for (`ca`: a TLS connection or the CA routes; its module is not
    imported at the start); web_url: callable -> the device's web address or None; rand: os.urandom (jitter);
    energy_floor: the services.metering.energy_floor.EnergyFloor shared with the REST API (a private one when None)."""

    name = "mqtt"
    poll_every_ms = 50      # the broker's bytes wait in the socket; a publish 50 ms later is not felt
    connect_timeout_ms = 5000  # TCP connect (non-blocking, checked every poll): SYNs unanswered this long -> retry
    connack_timeout_ms = 10000  # CONNECT sent (after the TLS handshake, if any) -> CONNACK
    keepalive_s = 60
    ping_every_ms = 30000      # a PINGREQ this often detects a black-holed broker (qos 0 sends never would)
    ping_timeout_ms = 10000
    send_stall_ms = 15000      # outgoing bytes that make no progress this long: the peer is gone
    backoff_first_ms = 1000
    backoff_max_ms = 300000
    stable_ms = 60000          # connected this long: the next failure starts the backoff from the beginning
    msgs_per_poll = 6          # packets built per poll (each costs a few string joins)
    queue_max = 64             # a telemetry round is skipped while more messages than this wait
    migrate_hold_ms = 3000     # after emptying old discovery configs, before the new ones (HA removes entities async)

    def __init__(self, pool, bus, settings, device_id, ssl_context=None, ca_store=None, web_url=None, log=None,
                 rand=os.urandom, energy_floor=None, clock=None, ca_path=None):
        Module.__init__(self)
        # core.clock.Clock: the state JSON says when its reading was taken (the clock is wired after MQTT at the
        # start, code.py, and hands itself over then)
        self.clock = clock
        self._pool = pool
        self._bus = bus
        self._settings = settings
        self.device_id = device_id
        self._ssl_factory = ssl_context
        self._ca = ca_store
        self._ca_path = ca_path
        self._web_url = web_url
        self._log = log
        self._rand = rand
        self._settings_ring = bus.subscribe("settings", 4)
        # money() -> (currency, [(key, value text)]) or None: the tariff's price, cost and peak (issue 29), set by
        # the wiring when the tariff feature runs; published at each connection and then every money_every_ms.
        self.money = None
        self._money_sent = {}
        self.floor = energy_floor if energy_floor is not None else EnergyFloor()
        self.codes_seen = []        # codes the meter has sent: announced on every connection, kept across them
        self._old_checked = False   # a session since the start looked for old discovery configs (issue 30)
        self._cfg = None
        self._mq = None             # client.HardenedMQTT of the current configuration
        self._ssl_ctx = None
        self._ssl_pem = None       # CircuitPython's SSLContext keeps only a reference to cadata
        self._addr_cache = None    # the broker address of the last connection that got a CONNACK
        self._addr_used = None
        self.conn_state = OFF
        self.last_error = 0
        self.last_error_message = ""
        self.attempts = 0
        self._retry_at = 0
        self._ca_dirty = False
        self._now = 0
        self._reset_session()

    @property
    def ca(self):
        """The custom CA's store (services.mqtt.ca_store.CaStore), or None without one."""
        if self._ca is None and self._ca_path is not None:
            from services.mqtt.ca_store import CaStore

            self._ca = CaStore(self._ca_path)
        return self._ca

    # ---------------------------------------------------------------- lifecycle

    def _reset_session(self):
        self._out_since = None      # when the outbox last made progress while non-empty
        # ("pub", topic, payload, retain) | ("disc", code) | ("sub", topic) | ("unsub", topic) | ("ping",)
        self._queue = []
        self._removed_old = 0        # old discovery configs emptied this session (issue 30 migration)
        self._old_looked = False     # this session subscribed to the old discovery configs
        self._tcp_phase = False     # CONNECTING: TCP connect still going on (else waiting for the CONNACK)
        self._deadline = 0
        self._ping_at = 0
        self._ping_sent = None
        self._seeding = False       # reading our own retained energy totals back before anything goes online
        self._connected_at = 0
        self._announced = []
        self._meter_online = None   # what the meter availability topic says on this connection
        # A new connection sends the current reading again before `meter online`: the broker may have missed
        # the last one (dropped with the old connection, or forgotten in a broker restart).
        self._sent_reading = None
        self._next_tele = 0
        self._money_at = None
        self._money_announced = []
        self._lang = "de"
        self._device_name = ""
        self._url = None

    def start(self):
        if mc.VERSION != mc.PINNED_VERSION:
            self.count("minimqtt_version_mismatch")
            self._note("warning", "adafruit_minimqtt %s, tested with %s", mc.VERSION, mc.PINNED_VERSION)
        self._configure(self._now)

    def stop(self):
        # The firmware is stopping (restart, update, SIGTERM): worth up to 300 ms for a close without a reset, so
        # the broker keeps our goodbye instead of publishing the will. A settings change does not wait.
        mq = self._mq
        if mq is not None:
            mq.linger_ms = 300
        self._disconnect(graceful=True)
        if mq is not None:
            mq.linger_ms = 0

    def sockets_held(self):
        """1 while a socket to the broker is open (core/sockbudget.py)."""
        mq = self._mq
        return 0 if mq is None else mq.sockets_held()

    def ca_changed(self):
        """The custom CA was stored or deleted: a TLS connection reconnects with it."""
        self._ca_dirty = True

    def _note(self, level, msg, *args):
        if self._log is not None:
            self._log.log(level, msg, *args)

    # ---------------------------------------------------------------- connection test (POST /mqtt/test)

    _testing = False
    _test_done = None    # the outcome, handed over at the end of the poll that found it
    _test_password = "none"
    test_result = None   # None (never), {"state": "testing"}, {"state": "ok"} or {"state": "failed", ...}

    def start_test(self, host, port, use_tls, user, password):
        """Try a broker without storing anything (the settings page's "Verbindung testen"): the one MQTT connection
        is handed to the test (the same socket, the same non-blocking steps), then given back to the stored
        settings. password None: the stored one, but only to the broker it was stored for (mqtt.host exactly, and
        with TLS when it was stored with TLS; any port: the same machine), else none: a stored secret never goes to
        another host or in clear where it went encrypted (the result's "password" says which: given, stored, none,
        or withheld when a stored one was not sent). Returns the problem (str) or None when the test started."""
        cfg = _Config(self._settings, self.device_id)
        stored = cfg.password
        mode = "given"
        if password is None:
            password = ""
            mode = "none"
            if stored:
                if host == cfg.host and (use_tls or not cfg.use_tls):
                    password = stored
                    mode = "stored"
                else:
                    mode = "withheld"
        cfg.enable = True
        cfg.host = host
        cfg.port = port
        cfg.use_tls = use_tls
        cfg.user = user
        cfg.password = password
        why = cfg.problem()
        if why is not None:
            return why
        self._disconnect(graceful=True)
        try:
            self._mq = self._make_client(cfg)
        except ValueError as exc:
            self._configure(self._now)
            return str(exc)
        self._cfg = cfg
        self._ssl_ctx = None
        self._ssl_pem = None
        self._addr_cache = None
        self._testing = True
        self._test_password = mode
        self.test_result = {"state": "testing", "host": host, "port": port, "password": mode}
        self.conn_state = INIT
        self.count("tests")
        return None

    def _end_test(self, now, result):
        """The test's outcome is in: leave the test broker (DISCONNECT: its last will is not published) and go back
        to the stored settings."""
        mq = self._mq
        if mq is not None:
            if self.conn_state == CONNECTED:
                try:
                    mq.disconnect()   # nothing was published on the test connection, and no will is sent now
                except Exception:
                    pass
            mq.close()
        self._mq = None
        self._reset_session()
        self.conn_state = INIT
        self.test_result = result
        self._testing = False
        self._configure(now)

    def _configure(self, now):
        """Read the settings and start over: disabled -> OFF, unusable -> FAILED, else INIT (connect now)."""
        if self._testing:   # the settings changed under a test: it ends unfinished
            self._testing = False
            self.test_result = {"state": "failed", "error": 0, "message": "settings changed during the test"}
        self._disconnect(graceful=True)
        cfg = _Config(self._settings, self.device_id)
        self._cfg = cfg
        self._mq = None
        self._ssl_ctx = None
        self._ssl_pem = None
        self._addr_cache = None
        self.attempts = 0
        self.last_error = 0
        self.last_error_message = ""
        if not cfg.enable:
            self.conn_state = OFF
            self.state = OK
            return
        why = cfg.problem()
        if why is None:
            try:
                self._mq = self._make_client(cfg)
            except ValueError as exc:  # minimqtt's own checks (e.g. a password over 65535 bytes)
                why = str(exc)
        if why is not None:
            self._set_error(ERR_NO_HOST if not cfg.host else ERR_CONFIG, why)
            self.conn_state = FAILED
            self.state = WARN
            self._note("warning", "mqtt: not connecting: %s", why)
            return
        self.conn_state = INIT  # connects on the next poll

    def _make_client(self, cfg):
        mq = mc.HardenedMQTT(self._pool, cfg.client_id, cfg.user, cfg.password, self.keepalive_s,
                             ha.status_topic(cfg.prefix), ha.OFFLINE)
        mq.on_connect = self._on_connect
        mq.on_message = self._on_message
        mq.on_pingresp = self._on_pingresp
        mq.on_suback = self._on_suback
        mq.on_oversize = self._on_oversize
        return mq

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
        try:
            if st == INIT or (st == WAIT_RETRY and not ticks_less(now_ms, self._retry_at)):
                self._open(now_ms)
            elif st == CONNECTING:
                self._connecting_poll(now_ms)
            elif st == CONNECTED:
                self._connected_poll(now_ms)
        except mc.LinkError as exc:
            self._fail(now_ms, exc.code, exc.message)
        except MemoryError:
            self._fail(now_ms, ERR_MEMORY, "out of memory")
        if self._test_done is not None:
            result = self._test_done
            self._test_done = None
            self._end_test(now_ms, result)

    def busy(self):
        """Connected with messages still queued (the discovery after a connect, a reading). Not while connecting: a
        broker that never answers would hold the start back until the connect timeout."""
        return self.conn_state == CONNECTED and bool(self._queue)

    def reading_out(self):
        """True once a reading went out on this connection (every queued message handed to the socket), or when
        none can go now (off, a configuration that cannot connect, waiting for a retry): code.py's start wires the
        features the first reading does not need after it."""
        st = self.conn_state
        if self._cfg is None:
            return False          # not started yet
        if st == CONNECTED:
            return self._sent_reading is not None and not self._queue and not self._mq.pending()
        return st == OFF or st == FAILED or st == WAIT_RETRY

    def _connecting_poll(self, now):
        if self._tcp_phase:
            if self._mq.connect_step():
                self._tcp_phase = False
                self._start_session(now)
            elif ticks_diff(now, self._deadline) >= 0:
                cfg = self._cfg
                self._fail(now, ERR_CONNECT_TIMEOUT, "no TCP connection to %s:%d within %d ms"
                           % (cfg.host, cfg.port, self.connect_timeout_ms))
            return
        self._io(now)
        if self.conn_state == CONNECTED:
            self._pump(now)
        elif self.conn_state == CONNECTING and ticks_diff(now, self._deadline) > 0:
            what = "TLS handshake and CONNACK" if self._cfg.use_tls else "CONNACK"
            self._fail(now, ERR_CONNACK_TIMEOUT, "no %s within %d ms" % (what, self.connack_timeout_ms))

    def _connected_poll(self, now):
        self._io(now)
        if self.conn_state != CONNECTED:
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
        if not self._seeding:
            self._publish_meter(now)
            if self.money is not None:
                self._publish_money(now)
        self._pump(now)

    def _publish_meter(self, now):
        """Meter availability and telemetry. A reading is published once per connection (a silent meter's last
        reading is not sent again while it goes stale), and fresh values go out before `meter online`, so Home
        Assistant never shows the values retained from before as current."""
        reading = self._bus.latest("reading")
        online = reading is not None
        fresh = online and reading is not self._sent_reading
        if online != self._meter_online:
            if online:
                if fresh and not self._telemetry(now, reading):
                    return  # no room for the fresh values: the meter stays as it is until they fit
                self._meter_online = True
                self._queue.append(("pub", ha.meter_topic(self._cfg.prefix), ha.ONLINE, True))
            else:
                self._meter_online = False
                # At once, not at the next interval: a stale meter must not look alive.
                self._queue.append(("pub", ha.meter_topic(self._cfg.prefix), ha.OFFLINE, True))
        elif fresh and not ticks_less(now, self._next_tele):
            self._telemetry(now, reading)

    def _telemetry(self, now, reading):
        """Queue discovery for codes seen first, each value, then the JSON state (all retained); False when the
        queue is too long to take them."""
        if len(self._queue) > self.queue_max:
            self.count("telemetry_skipped")  # the broker is slower than the interval: keep memory bounded
            return False
        # The interval counts from this publish less an eighth: a meter's telegrams come every interval with some
        # jitter, and a reading a few ms early must not wait a whole interval (the wait then drifts through all of
        # it: p95 1 s on the S3 at sendInterval 1 with one telegram a second).
        interval_ms = self._cfg.interval * 1000
        self._next_tele = ticks_add(now, interval_ms - interval_ms // 8)
        self._sent_reading = reading
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
            if not self.floor.passes(code, mv):
                self.counters["energy_suppressed"] = self.floor.suppressed
                continue
            sent.append(code)
            self._queue.append(("pub", ha.value_topic(prefix, code), ha.value_text(code, mv[0], mv[1]), True))
        ts = None
        clock = self.clock
        if clock is not None and clock.synced:
            # The reading's UTC time, as /history/latest gives it: clients other than Home Assistant (which
            # goes unavailable through the meter topic) see how old a retained state is.
            ts = clock.time() - ticks_diff(now, reading.ts_ms) // 1000
        self._queue.append(("pub", ha.state_topic(prefix), ha.state_json(values, sent, ts), True))
        self.count("telemetry")
        return True

    money_every_ms = 60000

    def _publish_money(self, now):
        """The tariff's values (retained), once a minute or when asked again after a change; discovery for each
        key the first time this session."""
        if self._money_at is not None and ticks_less(now, self._money_at):
            return
        if len(self._queue) > self.queue_max:
            return
        self._money_at = ticks_add(now, self.money_every_ms)
        got = self.money()
        if got is None:
            return
        currency, values = got
        prefix = self._cfg.prefix
        for k, text in values:
            if k not in self._money_announced:
                self._money_announced.append(k)
                self._queue.append(("mdisc", k, currency))
            self._queue.append(("pub", ha.money_topic(prefix, k), text, True))
        self.count("money")

    def _send_money_discovery(self, k, currency):
        cfg = self._cfg
        for row in ha.MONEY:
            if row[0] == k:
                self._mq.publish(ha.money_config_topic(cfg.discovery, self.device_id, k),
                                 ha.money_config_payload(row, self.device_id, cfg.prefix, self._lang,
                                                         self._device_name, VERSION, self._url, currency), True)
                self.count("discovery")

    def _pump(self, now):
        """Move queued messages into the client's outbox while it is empty, a few per poll."""
        mq = self._mq
        n = 0
        while self._queue and not mq.pending() and n < self.msgs_per_poll:
            item = self._queue[0]
            kind = item[0]
            if kind == "hold":
                if ticks_less(now, item[1]):
                    break
                self._queue.pop(0)
                continue
            self._queue.pop(0)
            try:
                if kind == "pub":
                    mq.publish(item[1], item[2], item[3])
                elif kind == "disc":
                    self._send_discovery(item[1])
                elif kind == "mdisc":
                    self._send_money_discovery(item[1], item[2])
                elif kind == "ping":
                    mq.send_ping()
                elif kind == "sub":
                    mq.subscribe_later(item[1])
                elif kind == "unsub":
                    mq.unsubscribe_later(item[1])
            except (ValueError, mc.mm.MMQTTException) as exc:
                self.count("publish_errors")  # minimqtt refused to build it; the session goes on
                self._note("warning", "mqtt: %s not sent: %s", kind, exc)
            n += 1
            self._flush(now)

    def _send_discovery(self, code):
        cfg = self._cfg
        payload = ha.config_payload(code, self.device_id, cfg.prefix, self._lang, self._device_name, VERSION,
                                    self._url)
        if payload is not None:
            self._mq.publish(ha.config_topic(cfg.discovery, self.device_id, code), payload, True)
            self.count("discovery")

    # ---------------------------------------------------------------- connection

    def _open(self, now):
        """Resolve (DNS: the one step that blocks on the device unless mqtt.host is an IP address) and start a
        non-blocking TCP connect; failures schedule a retry."""
        cfg = self._cfg
        self._reset_session()
        self.conn_state = CONNECTING
        addr = self._addr_cache
        if addr is None:
            try:
                addr = self._pool.getaddrinfo(cfg.host, cfg.port, 0, self._pool.SOCK_STREAM)[0][-1]
            except OSError as exc:
                self._fail(now, ERR_DNS, "cannot resolve %s: %s" % (cfg.host, exc))
                return
        try:
            up = self._mq.open(addr)
        except RuntimeError as exc:  # CircuitPython: "Out of sockets"
            self._fail(now, ERR_NO_SOCKET, "no socket: %s" % exc)
            return
        except OSError as exc:
            code = mc.errno_of(exc)
            self._fail(now, code or ERR_NO_SOCKET, "connect to %s:%d failed: %s" % (cfg.host, cfg.port, exc))
            return
        self._addr_used = addr
        self._tcp_phase = True
        self._deadline = ticks_add(now, self.connect_timeout_ms)
        self.count("connects")
        if up:  # lwIP returned at once (or the host's loopback did)
            self._tcp_phase = False
            self._start_session(now)

    def _start_session(self, now):
        """TCP is up: TLS (its handshake runs inside the next polls' sends and reads) and CONNECT."""
        cfg = self._cfg
        ctx = None
        try:
            if cfg.use_tls:
                ctx = self._tls_context()
            self._lang = "en" if self._settings.get("language.active", "de") == "en" else "de"
            self._device_name = str(self._settings.get("device_name", "") or "Meter Plus")
            self._url = self._web_url() if self._web_url is not None else None
            self._mq.start_session(cfg.host, True, ctx)
        except MemoryError:
            self._fail(now, ERR_MEMORY, "out of memory while connecting")
            return
        except (OSError, RuntimeError, ValueError) as exc:
            code = mc.errno_of(exc) or ERR_PROTOCOL
            self._fail(now, code, "connect to %s:%d failed: %s" % (cfg.host, cfg.port, exc))
            return
        self._deadline = ticks_add(now, self.connack_timeout_ms)
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

    def _on_connect(self, client, user_data, flags, rc):
        now = self._now
        cfg = self._cfg
        if self._testing:
            self.conn_state = CONNECTED   # so the goodbye is a DISCONNECT; ended after this poll's read
            self._test_done = {"state": "ok", "host": cfg.host, "port": cfg.port, "password": self._test_password}
            return
        self.conn_state = CONNECTED
        self.state = OK
        self._connected_at = now
        self._ping_at = now
        self._addr_cache = self._addr_used
        self.last_error = 0
        self.last_error_message = ""
        self._note("info", "mqtt: connected to %s:%d as %s", cfg.host, cfg.port, cfg.client_id)
        # Order matters for Home Assistant, which shows a sensor when both <prefix>/status and <prefix>/meter
        # say online: status is `offline` now (our last will, or the orderly goodbye), so the values and the
        # meter topic retained from before are hidden. A stale meter is marked offline first; then the broker's
        # retained totals are read back (subscribe <prefix>/+, the PINGRESP behind them says they are all in);
        # only then go fresh values, `meter online` and, last, `status online` (_seeded).
        if self._bus.latest("reading") is None:
            self._meter_online = False
            self._queue.append(("pub", ha.meter_topic(cfg.prefix), ha.OFFLINE, True))
        self._queue.append(("sub", ha.birth_topic(cfg.discovery)))
        self._queue.append(("sub", cfg.prefix + "/+"))
        # discovery configs of the old unique_ids still retained at the broker: emptied while seeding (issue 30);
        # looked for on the first connection after a start only (once emptied, the broker holds none any more)
        self._old_looked = not self._old_checked
        if self._old_looked:
            self._queue.append(("sub", ha.old_config_filter(cfg.discovery, self.device_id)))
        self._removed_old = 0
        self._queue.append(("ping",))
        self._ping_sent = now
        self._seeding = True

    def _on_pingresp(self):
        self._ping_sent = None
        if self._seeding:
            self._seeded()

    def _seeded(self):
        """The retained totals are in: stop reading them, announce, publish the meter, then `status online`."""
        cfg = self._cfg
        self._seeding = False
        self._queue.append(("unsub", cfg.prefix + "/+"))
        if self._old_looked:
            self._queue.append(("unsub", ha.old_config_filter(cfg.discovery, self.device_id)))
            self._old_checked = True
        if self._removed_old:
            # Home Assistant removes the old entities first (their entity_ids fall free), then the new ones,
            # same device and name, get those entity_ids back and with them the history
            self._queue.append(("hold", ticks_add(self._now, self.migrate_hold_ms)))
        for code in self.codes_seen:
            self._announced.append(code)
            self._queue.append(("disc", code))
        self._publish_meter(self._now)
        self._queue.append(("pub", ha.status_topic(cfg.prefix), ha.ONLINE, True))

    def _on_suback(self, topic, granted):
        if granted == 0x80:
            self._note("warning", "mqtt: broker refused the subscription to %s", topic)

    def _on_oversize(self, topic, size):
        # A discovery config is 550-700 bytes, over the client's rx_max: only its topic is kept, and that is all
        # the migration needs (a retained config is there: it is emptied).
        if self._seeding and ha.is_old_config(topic, self._cfg.discovery, self.device_id):
            self._remove_old(topic)

    def _remove_old(self, topic):
        self._queue.append(("pub", topic, "", True))     # an empty retained config: HA removes the entity
        self._removed_old += 1
        self.count("old_ids_removed")

    def _on_message(self, client, topic, payload):
        if self._seeding and payload and ha.is_old_config(topic, self._cfg.discovery, self.device_id):
            self._remove_old(topic)
            return
        if self._seeding:
            head = self._cfg.prefix + "/"
            if topic.startswith(head):
                code = ha.code_of_key(topic[len(head):])
                if code is not None and obis.kind(code) == "energy":
                    try:
                        mv = parse(str(payload, "utf-8"))
                    except (ValueError, UnicodeError):
                        return
                    self.floor.seed(code, mv[0], mv[1] + 3)  # kWh on the wire, Wh inside
                    self.count("totals_seeded")
                return
        if topic == ha.birth_topic(self._cfg.discovery) and payload == b"online":
            # Home Assistant restarted and lost its entities: announce every known sensor again.
            for code in self._announced:
                self._queue.append(("disc", code))
            self._money_announced = []    # and the money entities with their next values, at once
            self._money_at = None
            self.count("ha_births")

    def _fail(self, now, code, msg):
        """Drop the connection and schedule a retry with exponential backoff and jitter."""
        if self._testing:
            if self._mq is not None:
                self._mq.close()
            self.conn_state = INIT
            if self._test_password == "withheld":
                msg = "%s (sent without a password: the stored one goes only to %s%s; give it to test this broker " \
                      "with it)" % (msg, self._settings.get("mqtt.host", ""),
                                    " with TLS" if self._settings.get("mqtt.use_tls", False) is True else "")
            self._test_done = {"state": "failed", "error": code, "message": msg, "host": self._cfg.host,
                               "port": self._cfg.port, "password": self._test_password}
            return
        if self._mq is not None:
            self._mq.close()
        if self.conn_state != CONNECTED:
            self._addr_cache = None  # an attempt failed: the next one resolves the name again
        self._set_error(code, msg)
        self.attempts += 1
        self.count("failures")
        delay = self.backoff_max_ms
        if code not in (ERR_CONNACK + 4, ERR_CONNACK + 5) and self.attempts < 20:
            delay = min(self.backoff_first_ms << (self.attempts - 1), self.backoff_max_ms)
        # Equal jitter: half the delay fixed, half random, so many devices do not retry in step.
        r = self._rand(2)
        half = delay // 2
        delay = half + (((r[0] << 8) | r[1]) * half) // 65535
        self._retry_at = ticks_add(now, delay)
        self.conn_state = WAIT_RETRY
        self.state = WARN
        self._note("warning", "mqtt: %s (attempt %d, retry in %d ms)", msg, self.attempts, delay)

    def _disconnect(self, graceful):
        """Leave cleanly: offline (retained) and DISCONNECT if they go out at once, else the will says it."""
        mq = self._mq
        if mq is not None:
            if graceful and self.conn_state == CONNECTED:
                try:
                    mq.flush()
                    if not mq.pending():
                        mq.publish(ha.status_topic(self._cfg.prefix), ha.OFFLINE, True)
                        mq.disconnect()  # queues DISCONNECT, flushes once, closes
                except Exception:
                    pass
            mq.close()
        self._reset_session()
        if self.conn_state != OFF:
            self.conn_state = INIT

    # ---------------------------------------------------------------- bytes

    def _flush(self, now):
        """Send what the socket takes; a stall longer than send_stall_ms raises LinkError."""
        mq = self._mq
        took = mq.flush()
        if not mq.pending():
            self._out_since = None
        elif took or self._out_since is None:
            self._out_since = now
        elif ticks_diff(now, self._out_since) > self.send_stall_ms:
            raise mc.LinkError(ERR_SEND_STALLED, "broker took no data for %d ms" % self.send_stall_ms)

    def _io(self, now):
        """Flush, then read one bounded slice of what has arrived (packets are handled by the callbacks)."""
        self._flush(now)
        self._mq.read()
        skipped = self._mq.skipped
        if skipped:
            self.counters["rx_skipped"] = skipped

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
            "retry_in_s": self.retry_in_s(),
        }

    def retry_in_s(self):
        """Whole seconds until the next connection attempt while waiting to retry (wrap-safe), else None."""
        if self.conn_state != WAIT_RETRY:
            return None
        return max(0, (ticks_diff(self._retry_at, self._now) + 999) // 1000)

    def describe(self):
        d = Module.describe(self)
        d["conn"] = self.conn_state
        d["attempts"] = self.attempts
        # For the page's words: why the last attempt failed (last_error's code) and when the next one is.
        d["error"] = self.last_error
        d["retry_s"] = self.retry_in_s()
        d["energy_suppressed"] = self.floor.suppressed
        d["minimqtt"] = mc.VERSION
        return d
