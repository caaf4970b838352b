"""The emulated Shelly's WebSocket RPC (ws://device/rpc), as Home Assistant's Shelly integration (aioshelly) holds
it open: adopted from the HTTP server after the 101 answer, so it never keeps one of the two HTTP slots.

Like a real Pro 3EM it pushes: a session that sent a request with a src gets a NotifyStatus for every new reading
(em:0, and emdata:0 when the totals moved), because aioshelly does not poll while connected (issue 39)."""

import json

from adafruit_ticks import ticks_diff

from core import sockbudget
from core.elapsed import fresh
from core.module import Module
from core.sockets import EAGAIN, close_quietly, errno_of
from services.emulation import shelly_rpc, ws_frames
from services.emulation.meter_view import STALE_MS, view


# A session's standing, highest first (issue 36 point 4): a newcomer takes the place of a session of a lower one only
# (else of one silent for replace_after_ms), and the socket budget may give an ANON session's socket to a known
# taker (a Modbus client, Home Assistant's session). ANON is never given a known one's socket.
TOKEN = 4     # the handshake carried a valid token (Authorization: Bearer)
VOUCHED = 3   # the address showed a valid token to the API within the hour (Home Assistant's WattWaechter integration)
SETTLED = 2   # the address held a session that was served for settled_ms within the hour (Home Assistant with
#               authentication off), or the device's own page (same-origin Origin) while authentication is off
ANON = 1      # anything else


def standing_of(known):
    """The standing of a session whose address the socket budget knows as known (sockbudget.STRANGER, SETTLED,
    VOUCHED)."""
    return VOUCHED if known == sockbudget.VOUCHED else SETTLED if known == sockbudget.SETTLED else ANON


class _Session:
    """One adopted connection: its socket, unread input, pending output, when a byte last came in."""

    def __init__(self, sock, addr, now, size, standing=ANON):
        self.sock = sock
        self.addr = addr
        self.standing = standing   # at adoption; its address may become known later (ShellyWs._standing)
        self.since = now           # adopted at: served for settled_ms, its address is SETTLED
        self.settled = False       # latched once it was (a stamp days old could look recent again)
        self.vouched = now         # when its address was last vouched for (at most once a minute)
        self.inbuf = bytearray(size)
        self.n = 0
        self.out = b""
        self.heard = now
        self.frag = None      # the parts of a fragmented message so far (FIN=0 frames), or None
        self.dst = None       # the client's src once a request named one: from then on it gets notifications
        self.head = None      # notify_head(...) for that dst, encoded once
        self.seen = None      # the reading it last got (in a notification or current when it subscribed)
        self.imp = None       # the import and export totals it last got
        self.exp = None
        self.lag = 0          # notifications in a row it could not take (its output full)
        self.pinged = False   # a ping went out since the client last sent anything
        self.top = bytearray(b"\x81\x7e\x00\x00")   # a notification's frame header (text, 16-bit length)


class ShellyWs(Module):
    """bus, settings, ident (shelly_rpc.Identity), energy floor, uptime (callable -> s). At most max_sessions (each
    one of the 8 sockets), closed when silent for idle_ms or when the emulation is switched off; a client silent
    for ping_after_ms gets a ping (aiohttp, under aioshelly, pings only after 55 s without a frame from us, so
    while we push it never does: the pong is what shows it is still there). A newcomer takes the place of a
    session silent for over replace_after_ms, else it is refused: a handshake every few seconds must not keep Home
    Assistant disconnected (issue 26). A newcomer of a higher standing (TOKEN > VOUCHED > SETTLED > ANON) takes the
    place of the lowest one below it at once; the socket budget may take an anonymous session's socket for a known
    taker (reclaimable(), reclaim()): two strangers' sessions never keep Home Assistant or a Modbus client out
    (issue 36)."""

    name = "shelly_ws"
    max_sessions = 2
    idle_ms = 120000
    ping_after_ms = 50000     # below replace_after_ms: a client that answers pings is never "silent" to a newcomer
    replace_after_ms = 60000  # a session this silent may be replaced by a newcomer (wrap-safe: core.elapsed)
    max_frame = 1024          # an RPC request is ~100 bytes; longer frames (or messages, fragments summed) end it
    budget = None             # core.sockbudget.SocketBudget (the loader sets it): asked before a session is adopted
    max_out = 8192            # a client that reads nothing while asking on is dropped, not buffered for
    out_mark = 2048           # while this much waits for the client, no further request is taken
    notify_gap_ms = 900       # at most one NotifyStatus a this (a 1-s meter: every reading; a 4/s one: ~1 a second)
    lag_limit = 10            # a subscribed session that took none of this many notifications in a row is dropped
    settled_ms = 600000       # a session served this long makes its address SETTLED (for sockbudget.KNOWN_MS)

    def __init__(self, bus, settings, ident, energy_floor=None, uptime=None, ticks=None, unix_ms=None):
        Module.__init__(self)
        self._bus = bus
        self._settings = settings
        self._ident = ident
        self._floor = energy_floor
        self._uptime = uptime
        self._ticks = ticks
        self._sessions = []
        self._now = 0
        self._unix_ms = unix_ms     # callable(ticks) -> UTC Unix ms of that moment, or None before a clock sync
        self._pushed = None         # the reading last pushed (the object: no tick wrap can make an old one look new)
        self._push_at = None
        self._pruned = None         # when the budget's known addresses were last pruned (once a minute)

    def sessions(self):
        """How many sessions are open."""
        return len(self._sessions)

    sockets_held = sessions

    def _now_ms(self):
        return self._ticks() if self._ticks is not None else self._now

    def _silent(self, now):
        """The session silent the longest, if it is silent for over replace_after_ms, else None."""
        pick, age = None, -1
        for s in self._sessions:
            if fresh(s.heard, now, self.replace_after_ms + 1):
                continue
            a = self._quiet(s, now)
            if a > age:
                pick, age = s, a
        return pick

    @staticmethod
    def _quiet(s, now):
        """Milliseconds since s last sent anything; a stamp that looks like the future is very old."""
        a = ticks_diff(now, s.heard)
        return a if a >= 0 else 1 << 30

    def _standing(self, s, now):
        """s's standing now: at adoption, or what its address has become known as since (a later token, settled)."""
        if s.standing >= VOUCHED or self.budget is None:
            return s.standing
        known = standing_of(self.budget.known(s.addr[0] if s.addr else None, now))
        return known if known > s.standing else s.standing

    def _victim(self, standing, now):
        """The session a newcomer of standing replaces: the lowest-standing one below it (the longest silent of
        those), else one silent for over replace_after_ms, else None."""
        pick, low, age = None, standing, -1
        for s in self._sessions:
            st = self._standing(s, now)
            if st < low or (st == low and pick is not None and self._quiet(s, now) > age):
                pick, low, age = s, st, self._quiet(s, now)
        return pick if pick is not None else self._silent(now)

    @staticmethod
    def rank(standing):
        """The socket budget's rank (core/sockbudget.py) of a session of standing."""
        return sockbudget.ANON if standing <= ANON else sockbudget.KNOWN

    def room(self, standing=ANON):
        """True when a newcomer of standing would be adopted: a free place the socket budget has (or can free) a
        socket for, or a session it may replace."""
        now = self._now_ms()
        if len(self._sessions) < self.max_sessions:
            return self.budget is None or self.budget.could_take(1, self.rank(standing))
        return self._victim(standing, now) is not None

    def adopt(self, sock, addr, standing=ANON):
        """Take over a connection whose 101 answer went out; with every place taken it replaces the session
        _victim() names, else it is closed (the handshake refuses such a newcomer already: room())."""
        if not self._settings.get("emulation.shelly", False):
            close_quietly(sock)
            return
        now = self._now_ms()
        if len(self._sessions) >= self.max_sessions:
            # Replacing a session frees that one's socket: no budget check.
            old = self._victim(standing, now)
            if old is None:
                self.count("refused")
                close_quietly(sock)
                return
            self._drop(old, "replaced")
        elif self.budget is not None and not self.budget.may_take(1, self.rank(standing)):
            # The socket moves from HTTP (which no longer counts it while handing it over) to this session: refused
            # when HTTP would then lack its listener and two clients and no lower-ranked socket could be freed.
            self.count("budget_refused")
            close_quietly(sock)
            return
        try:
            sock.setblocking(False)
        except OSError:
            close_quietly(sock)
            return
        self._sessions.append(_Session(sock, addr, now, self.max_frame + 14, standing))
        self.count("adopted")

    def reclaimable(self):
        """sockbudget.ANON while an anonymous session is open (the budget may give its socket to a known taker),
        else None: a known session is never given up for another feature."""
        now = self._now_ms()
        for s in self._sessions:
            if self._standing(s, now) <= ANON:
                return sockbudget.ANON
        return None

    def reclaim(self):
        """Close the anonymous session silent the longest: a known taker needs its socket."""
        now = self._now_ms()
        pick, age = None, -1
        for s in self._sessions:
            if self._standing(s, now) <= ANON and self._quiet(s, now) > age:
                pick, age = s, self._quiet(s, now)
        if pick is not None:
            self._drop(pick, "reclaimed")

    def poll(self, now_ms):
        self._now = now_ms
        if self.budget is not None and (self._pruned is None or not fresh(self._pruned, now_ms, 60000)):
            self._pruned = now_ms
            self.budget.prune(now_ms)   # the known addresses' stamps must not outlive the tick wrap
        if not self._sessions:
            return
        if not self._settings.get("emulation.shelly", False):
            for s in list(self._sessions):
                self._drop(s, "switched_off")
            return
        for s in list(self._sessions):
            if not self._step(s, now_ms):
                self._drop(s, None)
        if self._sessions:
            self._notify(now_ms)

    # ---------------------------------------------------------------- notifications (NotifyStatus)

    def _notify(self, now_ms):
        """Push a new reading to every subscribed session; a stale meter ends every session (see _stale)."""
        reading = self._bus.latest("reading")
        if reading is None or not fresh(reading.ts_ms, now_ms, STALE_MS):
            self._stale(now_ms)
            return
        # Checked before anything is built: every poll with a session open comes here, a new reading once a second.
        if reading is self._pushed or (self._push_at is not None and fresh(self._push_at, now_ms,
                                                                             self.notify_gap_ms)):
            return
        v = view(reading, now_ms, self._floor)
        if v is None or v.power is None:
            self._stale(now_ms)         # a reading without power: GetStatus shows nulls, nothing live to push
            return
        self._pushed = reading
        imp, exp = v.import_wh, v.export_wh
        plain = full = None         # the tail without and with emdata:0, each built once for every session
        i = len(self._sessions)
        while i:                    # backwards: a session dropped here does not move the ones still to come
            i -= 1
            s = self._sessions[i]
            if s.head is None or s.seen is reading:
                continue
            if len(s.out) >= self.out_mark:
                s.lag += 1              # it reads nothing: skipped (the next push overlays the whole em:0)
                if s.lag >= self.lag_limit:
                    self._drop(s, "slow_reader")
                continue
            if s.imp == imp and s.exp == exp:
                if plain is None:
                    plain = shelly_rpc.notify_parts(self._ts(reading.ts_ms), v, False)
                tail = plain
            else:
                if full is None:
                    full = shelly_rpc.notify_parts(self._ts(reading.ts_ms), v, True)
                tail = full
            s.seen, s.imp, s.exp, s.lag = reading, imp, exp, 0
            self.count("notified")
            self._push_at = now_ms          # the gap runs from a push that went out
            if not self._send_parts(s, s.head, tail):
                self._drop(s, None)

    def _send_parts(self, s, head, tail):
        """One text frame of head and the tail's parts, each sent straight from where it is: no copy of the frame
        for the session while its socket takes them (the usual case), what it does not take waits in s.out.
        False when the peer is gone."""
        size = len(head)
        for part in tail:
            size += len(part)
        top = s.top
        if 126 <= size < 65536:         # every notification: the session's own 4 bytes, filled in
            top[2], top[3] = size >> 8, size & 0xFF
        else:
            top = ws_frames.header(ws_frames.TEXT, size)
        if s.out:
            s.out += top + head + b"".join(tail)        # behind what already waits, in order
            return self._flush(s)
        for i in range(len(tail) + 2):
            part = top if i == 0 else head if i == 1 else tail[i - 2]
            try:
                n = s.sock.send(part)
            except OSError as exc:
                if errno_of(exc) != EAGAIN:
                    return False
                n = 0
            if n < len(part):
                rest = part[n:]
                if i == 0:
                    rest += head
                s.out = rest + b"".join(tail[i - 1 if i else 0:])
                return True
        return True

    def _stale(self, now_ms):
        """The meter is stale or silent: subscribed sessions get em:0 with null values and the error (what
        Shelly.GetStatus shows now), then every session is closed (1013, try again later), and the handshake
        refuses newcomers until a fresh reading (shelly_routes). Home Assistant then marks the Shelly's entities
        unavailable instead of keeping the last values as current (issue 39)."""
        tail = None
        for s in list(self._sessions):
            if s.head is not None and len(s.out) < self.out_mark:
                if tail is None:
                    tail = b"".join(shelly_rpc.notify_parts(self._ts(now_ms), None, True))
                s.out += ws_frames.frame(ws_frames.TEXT, s.head + tail)
            s.out += ws_frames.frame(ws_frames.CLOSE, b"\x03\xf5no meter data")
            self._flush(s)
            self._drop(s, "stale_closed")
        self._pushed = None

    def _ts(self, ticks):
        """A notification's ts in ms: the moment's UTC time once the clock is synced, else the time since the start
        (as a Shelly without time counts)."""
        unix_ms = self._unix_ms(ticks) if self._unix_ms is not None else None
        if unix_ms is None:
            unix_ms = (self._uptime() if self._uptime is not None else 0) * 1000
        return unix_ms

    def _subscribe(self, s, src, now_ms):
        """The session's requests name src: notifications go to it from the next reading on (the current one it
        has, or will have, from its own GetStatus)."""
        if src == s.dst:
            return
        first = s.dst is None
        s.dst, s.head = src, shelly_rpc.notify_head(self._ident.id, src).encode()
        if first:
            reading = self._bus.latest("reading")
            v = view(reading, now_ms, self._floor)
            s.seen = reading
            if v is not None:
                s.imp, s.exp = v.import_wh, v.export_wh

    def _step(self, s, now_ms):
        """Flush, answer what is buffered, read, answer; False once the session is over.

        Pipelined requests are answered one by one with a flush after each, and no further request is taken (nor
        read) while out_mark bytes wait for the client: a client that sends 20 requests at once and reads at its own
        pace gets all 20 answers, and one that reads nothing is not buffered for (its requests wait in its socket)."""
        if s.out and not self._flush(s):
            return False
        if ticks_diff(now_ms, s.heard) >= self.idle_ms or ticks_diff(now_ms, s.heard) < 0:
            self.count("idle_closed")
            return False
        if not s.pinged and ticks_diff(now_ms, s.heard) >= self.ping_after_ms:
            s.pinged = True
            self.count("pings")
            s.out += ws_frames.frame(ws_frames.PING, b"")
            if not self._flush(s):
                return False
        if s.n and not self._answer_buffered(s, now_ms):
            return False
        if len(s.out) >= self.out_mark or s.n >= len(s.inbuf):
            return True            # answers wait for the client: its next requests wait in its socket
        try:
            got = s.sock.recv_into(memoryview(s.inbuf)[s.n:])
        except OSError as exc:
            return errno_of(exc) == EAGAIN
        if not got:
            return False
        s.n += got
        s.heard = now_ms
        s.pinged = False
        if not s.settled and not fresh(s.since, now_ms, self.settled_ms):
            s.settled = True
        if s.settled and self.budget is not None and not fresh(s.vouched, now_ms, 60000):
            s.vouched = now_ms          # served for settled_ms: its address is known for the next hour
            self.budget.vouch(s.addr[0] if s.addr else None, now_ms, sockbudget.SETTLED)
        return self._answer_buffered(s, now_ms)

    def _answer_buffered(self, s, now_ms):
        """Answer the whole frames in the input buffer (fragments reassembled) while less than out_mark waits;
        False once the session is over."""
        while len(s.out) < self.out_mark:
            try:
                parsed = ws_frames.parse(s.inbuf, s.n, self.max_frame)
            except ws_frames.FrameError:
                self.count("protocol_errors")
                return False
            if parsed is None:
                break
            opcode, fin, payload, used = parsed
            s.inbuf[:s.n - used] = s.inbuf[used:s.n]
            s.n -= used
            if opcode >= ws_frames.CLOSE and not fin:
                self.count("protocol_errors")         # control frames are never fragmented (RFC 6455 5.5)
                return False
            if opcode == ws_frames.CLOSE:
                s.out += ws_frames.frame(ws_frames.CLOSE, payload[:2])
                self._flush(s)
                return False
            if opcode == ws_frames.PING:
                s.out += ws_frames.frame(ws_frames.PONG, payload)
            elif opcode in (ws_frames.TEXT, ws_frames.BINARY, ws_frames.CONTINUATION):
                payload = self._message(s, opcode, fin, payload)
                if payload is False:
                    self.count("protocol_errors")
                    return False
                if payload is not None:
                    s.out += ws_frames.frame(ws_frames.TEXT, self._answer(s, payload, now_ms))
            elif opcode != ws_frames.PONG:
                self.count("protocol_errors")         # an opcode RFC 6455 reserves
                return False
            if not self._flush(s):       # between pipelined requests: what the socket takes goes now
                return False
        if len(s.out) > self.max_out:
            self.count("slow_reader")
            return False
        return True

    def _message(self, s, opcode, fin, payload):
        """A whole message once its last fragment is in (RFC 6455 5.4), None while parts are missing, False for a
        broken sequence (a continuation with nothing begun, a new message inside one) or one over max_frame."""
        if opcode == ws_frames.CONTINUATION:
            if s.frag is None:
                return False
            if len(s.frag) + len(payload) > self.max_frame:
                return False
            s.frag += payload
            if not fin:
                return None
            whole, s.frag = bytes(s.frag), None
            return whole
        if s.frag is not None:
            return False
        if fin:
            return payload
        s.frag = bytearray(payload)
        return None

    def _answer(self, s, payload, now_ms):
        """The JSON-RPC answer frame to one request of session s (a src in it subscribes s)."""
        req_id, src = None, None
        try:
            try:
                doc = json.loads(payload)
            except Exception:
                raise shelly_rpc.RpcError(shelly_rpc.BAD_ARGUMENT, "Malformed JSON")
            try:
                req_id, src, method, params = shelly_rpc.request_fields(doc)
                if src:
                    self._subscribe(s, src, now_ms)
                body = shelly_rpc.result(method, params, view(self._bus.latest("reading"), now_ms, self._floor),
                                         self._ident, self._uptime() if self._uptime is not None else 0)
            except shelly_rpc.RpcError:
                raise
            except Exception:   # token-free: a bad request, never an exception out of poll() (a restart, a log line)
                raise shelly_rpc.RpcError(shelly_rpc.BAD_ARGUMENT, "Invalid request")
        except shelly_rpc.RpcError as err:
            self.count("rpc_errors")
            return shelly_rpc.frame(req_id, self._ident.id, src, error=err).encode()
        self.count("answers")
        return shelly_rpc.frame(req_id, self._ident.id, src, body).encode()

    def _flush(self, s):
        """Send what is pending without waiting; False when the peer is gone."""
        try:
            n = s.sock.send(s.out)
        except OSError as exc:
            return errno_of(exc) == EAGAIN
        s.out = s.out[n:] if n else s.out
        return True

    def _drop(self, s, reason):
        if reason is not None:
            self.count(reason)
        close_quietly(s.sock)
        if s in self._sessions:
            self._sessions.remove(s)

    def stop(self):
        for s in list(self._sessions):
            self._drop(s, None)

    def describe(self):
        d = Module.describe(self)
        d["sessions"] = len(self._sessions)
        return d
