"""Optical IR head: non-blocking UART reads, raw ring for rawdump, framing into whole SML/D0 telegrams."""

from adafruit_ticks import ticks_diff
from micropython import const

from core.module import FAILED, OK, WARN, Module
from meter.framer import SML, Framer

# IEC 62056-21 mode C: the baud-rate character of the identification line -> baud rate.
_BAUD = (300, 600, 1200, 2400, 4800, 9600, 19200)
_REQUEST = b"/?!\r\n"
_IDLE, _WAIT_IDENT, _WAIT_DATA = const(0), const(1), const(2)


class IrHead(Module):
    """uart: busio.UART-like (in_waiting, readinto, write, baudrate); sink(buf, n, fmt, now_ms) gets each telegram.

    mode: "sml" (9600 8N1), "d0" (9600 7E1 push), "auto" (both; 7E1 read as 8N1 is recognised too) or
    "pull" (300 baud 7E1 mode C: request, acknowledge, switch baud rate, read, back to 300).
    sink gets the framer's bytearray with the telegram at buf[0:n] (fmt meter.framer.SML or D0), valid only
    during the call; the decoder may collapse escapes in place there. A sink returning False (did not
    decode) makes the framer look for a start escape inside that telegram.
    """

    name = "ir_head"
    poll_every_ms = 50      # the UART buffer holds seconds of telegram (>= 2 KB at 960 B/s)
    FRAME_SIZE = 2048       # longest telegram accepted (captures reach 652 bytes)
    RAW_SIZE = 4096         # last bytes kept for /api/v1/logs/rawdump
    MAX_READ = 2048         # bytes per poll at most: 2 s of 9600 baud, keeps poll() bounded
    PULL_INTERVAL_MS = 10000
    PULL_TIMEOUT_MS = 5000

    def __init__(self, uart, mode="auto", sink=None):
        Module.__init__(self)
        if mode not in ("sml", "d0", "auto", "pull"):
            raise ValueError("mode must be sml, d0, auto or pull")
        self.uart = uart
        self.mode = mode
        self.sink = sink
        self.framer = Framer(self.FRAME_SIZE, "d0" if mode == "pull" else mode)
        self._raw = bytearray(self.RAW_SIZE)
        self._raw_mv = memoryview(self._raw)
        self._raw_pos = 0       # next write position
        self._raw_full = False
        self.bytes_total = 0
        self.last_error = None
        self.last_byte_ms = None
        self._pull = _IDLE
        self._pull_ms = None
        self._base_baud = 300

    def start(self):
        """Drop whatever sat in the UART before we were ready (half a telegram is only garbage)."""
        reset = getattr(self.uart, "reset_input_buffer", None)
        if reset is not None:
            reset()
        if self.mode == "pull":
            self._base_baud = getattr(self.uart, "baudrate", 300)

    def poll(self, now_ms):
        """Read what is waiting (bounded), keep it in the raw ring, hand out whole telegrams."""
        try:
            self._poll(now_ms)
        except Exception as exc:  # a broken UART must not take the loop down; the supervisor sees the state
            self.count("uart_errors")
            self.state = WARN
            self.last_error = repr(exc)

    def _poll(self, now_ms):
        if self.mode == "pull":
            self._pull_step(now_ms)
        fr = self.framer
        budget = self.MAX_READ
        while budget > 0:
            waiting = self.uart.in_waiting
            if not waiting:
                break
            room = fr.free()
            if room == 0:
                self._deliver(now_ms)  # the framer frees room by abandoning what cannot complete
                room = fr.free()
            k = min(waiting, room, budget)
            got = self.uart.readinto(fr.space()[:k])
            if not got:
                break
            self._keep_raw(fr.buf, fr.n, got)
            fr.commit(got)
            budget -= got
            self.bytes_total += got
            self.last_byte_ms = now_ms
            if self._pull == _WAIT_IDENT:
                self._ident_check(now_ms)
            self._deliver(now_ms)
        if self.state != FAILED and budget > 0:
            self.state = OK

    def _deliver(self, now_ms):
        fr = self.framer
        while True:
            fmt = fr.next()
            if not fmt:
                return
            self.count("telegrams_sml" if fmt == SML else "telegrams_d0")
            if self._pull:
                self._pull = _IDLE
                self._set_baud(self._base_baud)
            sink = self.sink
            if sink is not None:
                try:
                    ok = sink(fr.buf, fr.telegram_len(), fmt, now_ms)
                except Exception as exc:  # a consumer bug must not stop framing
                    self.count("sink_errors")
                    self.last_error = repr(exc)
                    ok = True
                if ok is False:
                    fr.reject()  # a damaged telegram may hide the next one's start

    def _keep_raw(self, src, at, k):
        """Copy src[at:at+k] into the raw ring (two pieces when it wraps)."""
        size = self.RAW_SIZE
        if k >= size:
            at += k - size
            k = size
        pos = self._raw_pos
        first = min(k, size - pos)
        mv = memoryview(src)
        self._raw_mv[pos:pos + first] = mv[at:at + first]
        if first < k:
            self._raw_mv[0:k - first] = mv[at + first:at + k]
        pos += k
        if pos >= size:
            pos -= size
            self._raw_full = True
        self._raw_pos = pos

    def rawdump(self):
        """The raw ring's bytes, oldest first (allocates one bytes object of at most RAW_SIZE)."""
        if not self._raw_full:
            return bytes(self._raw_mv[:self._raw_pos])
        return bytes(self._raw_mv[self._raw_pos:]) + bytes(self._raw_mv[:self._raw_pos])

    # --- mode C pull (optional): request at 300 baud, acknowledge with the offered rate, read, return ---

    def _pull_step(self, now_ms):
        if self._pull == _IDLE:
            if self._pull_ms is None or ticks_diff(now_ms, self._pull_ms) >= self.PULL_INTERVAL_MS:
                self.framer.reset()
                self.uart.write(_REQUEST)
                self._pull = _WAIT_IDENT
                self._pull_ms = now_ms
                self.count("pull_requests")
        elif ticks_diff(now_ms, self._pull_ms) >= self.PULL_TIMEOUT_MS:
            self.count("pull_timeouts")
            self._pull = _IDLE
            self._set_baud(self._base_baud)

    def _ident_check(self, now_ms):
        """After the identification line '/XXXZ...CR LF': acknowledge, switch to the offered rate."""
        fr = self.framer
        b = fr.buf
        while fr.n >= 6 and b[0] & 0x7F == 0x2F:
            nl = -1
            for i in range(fr.n):
                if b[i] & 0x7F == 0x0A:
                    nl = i
                    break
            if nl < 0:
                return
            if b[1] & 0x7F == 0x3F:
                fr.discard(nl + 1)  # the head's echo of our own request '/?!'
                continue
            z = (b[4] & 0x7F) - 0x30
            if not 0 <= z < len(_BAUD):
                z = 0
            # ACK, protocol control 0 (normal), baud char, mode selection 0 (data readout).
            self.uart.write(bytes((0x06, 0x30, 0x30 + z, 0x30, 0x0D, 0x0A)))
            self._pull = _WAIT_DATA
            self._set_baud(_BAUD[z])
            return

    def _set_baud(self, rate):
        try:
            if getattr(self.uart, "baudrate", rate) != rate:
                self.uart.baudrate = rate
        except (AttributeError, ValueError):
            self.count("baud_errors")

    def describe(self):
        d = Module.describe(self)
        fr = self.framer
        d["mode"] = self.mode
        d["bytes"] = self.bytes_total
        d["garbage"] = fr.garbage
        d["resyncs"] = fr.resyncs
        d["overflows"] = fr.overflows
        return d
