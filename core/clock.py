"""Wall clock: non-blocking SNTP client over a socket pool, the RTC, and the configured time zone."""

import errno
import struct
import time

from adafruit_ticks import ticks_add, ticks_diff, ticks_ms
from micropython import const

from core import module, tz
from core.sockets import close_quietly

_NTP_DELTA = const(2208988800)  # 1900-01-01 (NTP era 0) to 1970-01-01
_PACKET = const(48)
_DEFAULT_RULE = "CET-1CEST,M3.5.0,M10.5.0/3"  # Europe/Berlin, used when the table cannot be read


def make_request(buf, nonce):
    """Fill buf (48 bytes) with an SNTP v4 client request whose transmit field carries the 8-byte nonce."""
    for i in range(_PACKET):
        buf[i] = 0
    buf[0] = 0x23  # LI 0, version 4, mode 3 (client)
    buf[40:48] = nonce


def ntp_to_unix_ms(secs, frac):
    """Unix milliseconds of an NTP timestamp; seconds below 2**31 are read as era 1 (from 2036-02-07)."""
    if secs < 0x80000000:
        secs += 0x100000000
    return (secs - _NTP_DELTA) * 1000 + ((frac * 1000) >> 32)


def parse_reply(buf, n, nonce):
    """(server receive ms, server transmit ms) in Unix time from a reply to our request, or None if unusable."""
    if n < _PACKET:
        return None
    b0 = buf[0]
    if b0 & 7 != 4 or b0 >> 6 == 3:  # not a server reply, or the server says it is unsynchronised
        return None
    if not 1 <= (b0 >> 3) & 7 <= 4 or not 1 <= buf[1] <= 15:  # bad version; stratum 0 is a kiss-o'-death
        return None
    if bytes(buf[24:32]) != bytes(nonce):  # not the answer to this request (stale or spoofed)
        return None
    rs, rf, ts, tf = struct.unpack_from(">IIII", buf, 32)
    if ts == 0 and tf == 0:
        return None
    return ntp_to_unix_ms(rs, rf), ntp_to_unix_ms(ts, tf)


def split_server(text, default_port=123):
    """("host", port) of "host" or "host:port"."""
    text = text.strip()
    i = text.rfind(":")
    if i > 0 and text[i + 1:].isdigit():
        return text[:i], int(text[i + 1:])
    return text, default_port


def struct_time_args(utc):
    """The 9-tuple of time.struct_time (UTC) for epoch seconds: weekday 0 = Monday, yearday from 1."""
    y, m, d, hh, mm, ss = tz.to_civil(utc)
    days = utc // 86400
    return (y, m, d, hh, mm, ss, (days + 3) % 7, days - tz.days_from_civil(y, 1, 1) + 1, -1)


class Clock(module.Module):
    """Wall clock. Injected: pool (socketpool.SocketPool), settings (ntp_server, timezone), bus for the
    "settings" topic, rtc (rtc.RTC() or None), server (overrides the ntp_server setting), backups."""

    name = "clock"
    poll_every_ms = 100     # NTP answers wait in the socket; a second's tick needs no finer step
    BACKUP_SERVERS = ("ptbtime1.ptb.de", "time.cloudflare.com", "time.google.com")
    RESYNC_MS = 6 * 3600 * 1000   # after a good answer
    RETRY_MS = 60 * 1000          # after a round where no server answered; doubles up to RETRY_MAX_MS
    RETRY_MAX_MS = 30 * 60 * 1000
    TIMEOUT_MS = 2000             # per server
    budget = None                 # core.sockbudget.SocketBudget (the wiring sets it): asked before a round's socket

    def sockets_held(self):
        """1 while an NTP round holds its socket (core/sockbudget.py)."""
        return 0 if self._sock is None else 1
    REANCHOR_MS = 60 * 60 * 1000  # keeps ticks differences far below adafruit_ticks' 2**28 ms limit
    MIN_EPOCH = 1767225600        # 2026-01-01: an answer before this firmware existed is a broken server
    TABLE = tz.TABLE

    _IDLE = 0
    _SEND = 1
    _WAIT = 2

    def __init__(self, pool, settings, bus=None, rtc=None, server=None, backups=None):
        super().__init__()
        self.pool = pool
        self.settings = settings
        self.rtc = rtc
        self.server_override = server
        self.backups = self.BACKUP_SERVERS if backups is None else tuple(backups)
        self._ring = bus.subscribe("settings", 4) if bus is not None else None
        self._buf = bytearray(_PACKET)
        self._nonce = bytearray(8)
        self._sock = None
        self._servers = ()
        self._idx = 0
        self._phase = self._IDLE
        self._due = None          # ticks of the next sync round (None: at the next poll)
        self._sent = 0
        self._retry = self.RETRY_MS
        self._addr = None
        # Wall time = _epoch_ms at ticks _anchor; None until the first good answer.
        self._epoch_ms = None
        self._anchor = 0
        self.server = None        # who answered last
        self.last_sync = None     # UTC seconds of the last good answer
        self.timezone = None
        self.rule = tz.Rule(_DEFAULT_RULE)
        self._zone_ok = True

    # --- lifecycle

    def start(self):
        """Load the configured time zone; the first NTP round starts at the next poll."""
        self._load_zone()
        self._due = None
        self._phase = self._IDLE

    def stop(self):
        """Close the NTP socket if a round is running."""
        self._close()
        self._phase = self._IDLE

    def poll(self, now_ms):
        """One step: settings changes, then at most one DNS lookup/send or a non-blocking receive."""
        self._settings_changed(now_ms)
        if self._epoch_ms is not None and ticks_diff(now_ms, self._anchor) >= self.REANCHOR_MS:
            self._epoch_ms += ticks_diff(now_ms, self._anchor)
            self._anchor = now_ms
        if self._phase == self._IDLE:
            if self._due is None or ticks_diff(now_ms, self._due) >= 0:
                self._servers = self._server_list()
                self._idx = 0
                self._phase = self._SEND
            else:
                return
        if self._phase == self._SEND:
            self._send(now_ms)
        elif self._phase == self._WAIT:
            self._receive(now_ms)

    # --- wall time

    @property
    def synced(self):
        """True once an NTP server has answered since start."""
        return self._epoch_ms is not None

    def time_ms(self, now_ms=None):
        """UTC Unix milliseconds, or None before the first sync."""
        if self._epoch_ms is None:
            return None
        if now_ms is None:
            now_ms = ticks_ms()
        return self._epoch_ms + ticks_diff(now_ms, self._anchor)

    def time(self, now_ms=None):
        """UTC Unix seconds (int), or None before the first sync."""
        t = self.time_ms(now_ms)
        return None if t is None else t // 1000

    def offset_min(self, utc):
        """UTC offset of the configured zone at a UTC instant, in minutes."""
        return self.rule.offset_min(utc)

    def local(self, utc):
        """Local wall seconds (epoch seconds read as if UTC) of a UTC instant in the configured zone."""
        return self.rule.local(utc)

    def describe(self):
        """Sync state for /system/info."""
        d = module.Module.describe(self)
        now = self.time()
        d["synced"] = self.synced
        d["server"] = self.server
        d["last_sync"] = self.last_sync
        d["utc"] = now
        d["timezone"] = self.timezone
        d["utc_offset_min"] = None if now is None else self.rule.offset_min(now)
        return d

    # --- settings

    def _load_zone(self):
        name = self.settings.get("timezone", "Europe/Berlin")
        try:
            self.rule = tz.load(name, self.TABLE)
            self.timezone = name
            self._zone_ok = True
        except (OSError, ValueError):
            # Keep the rule we have (Europe/Berlin at boot) rather than a wrong zero offset.
            self.count("tz_errors")
            self._zone_ok = False
        self._set_state()

    def _set_state(self):
        # WARN while the zone could not be loaded or no server has answered yet after a failed round.
        self.state = module.OK if self._zone_ok and (self.synced or not self.counters.get("rounds_failed")) \
            else module.WARN

    def _settings_changed(self, now_ms):
        if self._ring is None:
            return
        while True:
            keys = self._ring.pop()
            if keys is None:
                return
            if "timezone" in keys:
                self._load_zone()
            if "ntp_server" in keys and self._phase == self._IDLE:
                self._due = None  # ask the new server at the next poll
                self._retry = self.RETRY_MS

    def _server_list(self):
        first = self.server_override or self.settings.get("ntp_server", "") or ""
        out = []
        for s in (first,) + self.backups:
            if s and s not in out:
                out.append(s)
        return out

    # --- the SNTP exchange

    def _close(self):
        self._sock = close_quietly(self._sock)

    def _next_server(self, now_ms):
        self._idx += 1
        if self._idx < len(self._servers):
            self._phase = self._SEND
            return
        # Nobody answered: free the socket and try again later, backing off.
        self._close()
        self.count("rounds_failed")
        self._phase = self._IDLE
        self._due = ticks_add(now_ms, self._retry)
        self._retry = min(self._retry * 2, self.RETRY_MAX_MS)
        self._set_state()

    def _send(self, now_ms):
        if not self._servers:
            self._next_server(now_ms)
            return
        host, port = split_server(self._servers[self._idx])
        try:
            # getaddrinfo is the one call that can block (DNS); one lookup per poll at most.
            self._addr = self.pool.getaddrinfo(host, port)[0][4]
        except (OSError, IndexError):  # gaierror is an OSError
            self.count("dns_errors")
            self._next_server(now_ms)
            return
        try:
            if self._sock is None:
                if self.budget is not None and not self.budget.may_take(borrow=True):
                    # HTTP keeps its listener and two clients (our mDNS responder lends its socket for the round
                    # when none is free): this round waits for a free socket
                    self.count("budget_refused")
                    self._next_server(now_ms)
                    return
                self._sock = self.pool.socket(self.pool.AF_INET, self.pool.SOCK_DGRAM)
                self._sock.setblocking(False)
            self._drain()
            _fill_nonce(self._nonce, now_ms)
            make_request(self._buf, self._nonce)
            self._sock.sendto(self._buf, self._addr)
        except (OSError, RuntimeError):  # out of sockets is a RuntimeError on CircuitPython
            self.count("send_errors")
            self._close()
            self._next_server(now_ms)
            return
        self._sent = now_ms
        self._phase = self._WAIT

    def _drain(self):
        # Drop late answers to an earlier request so they cannot be read as this one's.
        for _ in range(4):
            try:
                self._sock.recvfrom_into(self._buf)
            except OSError:
                return

    def _receive(self, now_ms):
        for _ in range(4):
            try:
                n, _src = self._sock.recvfrom_into(self._buf)
            except OSError as exc:
                if _errno(exc) != errno.EAGAIN:
                    self.count("recv_errors")
                    self._close()
                    self._next_server(now_ms)
                    return
                break
            got = parse_reply(self._buf, n, self._nonce)
            if got is None or got[1] < self.MIN_EPOCH * 1000:
                self.count("bad_packets")
                continue
            self._synced(now_ms, got[0], got[1])
            return
        if ticks_diff(now_ms, self._sent) >= self.TIMEOUT_MS:
            self.count("timeouts")
            self._next_server(now_ms)

    def _synced(self, now_ms, t2, t3):
        # Round trip minus the server's own hold time; the answer left the server half of it ago.
        delay = ticks_diff(now_ms, self._sent) - (t3 - t2)
        if delay < 0:
            delay = 0
        self._epoch_ms = t3 + delay // 2
        self._anchor = now_ms
        self.last_sync = self._epoch_ms // 1000
        self.server = self._servers[self._idx]
        self.count("syncs")
        self._set_state()
        self._close()
        self._phase = self._IDLE
        self._due = ticks_add(now_ms, self.RESYNC_MS)
        self._retry = self.RETRY_MS
        if self.rtc is not None:
            try:
                self.rtc.datetime = time.struct_time(struct_time_args(self.last_sync))
            except (AttributeError, OSError, ValueError):
                self.count("rtc_errors")


def _errno(exc):
    return exc.errno if hasattr(exc, "errno") and exc.errno is not None else (exc.args[0] if exc.args else None)


def _fill_nonce(buf, now_ms):
    # The nonce goes out in the transmit field and must come back as the originate field.
    try:
        import os

        buf[:] = os.urandom(8)
    except (ImportError, AttributeError, NotImplementedError, OSError):
        buf[:] = struct.pack(">II", now_ms & 0xFFFFFFFF, id(buf) & 0xFFFFFFFF)
