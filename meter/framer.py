"""Split a meter byte stream into whole SML transport v1 and IEC 62056-21 (D0) telegrams, in a fixed buffer."""

from micropython import const

SML = const(1)
D0 = const(2)

_ESC = b"\x1b\x1b\x1b\x1b"
_START = b"\x1b\x1b\x1b\x1b\x01\x01\x01\x01"
_D0_MAX = const(1024)  # a D0 telegram longer than this is not one


class Framer:
    """Fixed buffer (size bytes) holding at most one telegram in progress at offset 0; modes "sml", "d0", "auto".

    Use: write into space() and commit(n) (or feed(data)), then call next() until it returns 0; after a
    non-zero return the telegram is telegram() (a memoryview into the buffer) until the next call.
    """

    def __init__(self, size=2048, mode="auto"):
        if mode not in ("sml", "d0", "auto"):
            raise ValueError("mode must be sml, d0 or auto")
        self.buf = bytearray(size)
        self._mv = memoryview(self.buf)
        self.size = size
        self.mode = mode
        self.n = 0          # bytes held
        self._fmt = 0       # format of the telegram in progress at buf[0], 0 = hunting for a start
        self._scan = 0      # where the search for the end continues
        self._stx = False   # D0 telegram with STX/ETX/BCC framing
        self._done = 0      # length of the telegram handed out by the last next()
        self.garbage = 0    # bytes thrown away outside any telegram
        self.resyncs = 0    # telegrams abandoned (new start inside, bad escape, off-grid end, overflow)
        self.overflows = 0
        self.frames = 0

    def reset(self):
        """Drop everything held (e.g. after a baud-rate switch)."""
        self.n = 0
        self._fmt = 0
        self._done = 0

    def space(self):
        """Free room at the tail as a memoryview for readinto (drops the telegram handed out before)."""
        self._release()
        return self._mv[self.n:]

    def free(self):
        """Bytes that fit now."""
        self._release()
        return self.size - self.n

    def commit(self, k):
        """k bytes were written into space()."""
        self.n += k

    def feed(self, data):
        """Copy as much of data as fits; return how many bytes were taken."""
        self._release()
        k = min(len(data), self.size - self.n)
        if k:
            self._mv[self.n:self.n + k] = data[:k] if k < len(data) else data
            self.n += k
        return k

    def telegram(self):
        """The telegram returned by the last next(), as a memoryview (valid until the next call)."""
        return self._mv[:self._done]

    def reject(self):
        """The telegram handed out did not decode: resume at a start inside it, or keep its last 7 bytes.

        A telegram cut short swallows the next one's start escape (as escaped data, or inside its 3-byte
        trailer); hunting again there recovers the next telegram instead of losing it too.
        """
        done = self._done
        if not done:
            return
        self._done = 0
        s = self.buf.find(_START, 1, self.n)
        if 0 < s < done:
            self._drop(s)
        else:
            self._drop(done - 7 if done > 7 else 1)
        self.resyncs += 1

    def discard(self, k):
        """Throw away the first k bytes held (a line the caller consumed itself)."""
        self._release()
        self._drop(k)
        self._fmt = 0

    def telegram_len(self):
        """Length of the telegram at buf[0:] returned by the last next()."""
        return self._done

    def _release(self):
        if self._done:
            self._drop(self._done)
            self._done = 0

    def _drop(self, k):
        """Forget the first k bytes (shift the rest to the front)."""
        n = self.n
        if k >= n:
            self.n = 0
        else:
            self._mv[0:n - k] = self._mv[k:n]
            self.n = n - k
        self._scan = 0

    def _abandon(self):
        """Give up the telegram in progress: count it and hunt for the next start after its first byte."""
        self.resyncs += 1
        self._fmt = 0
        self._drop(1)

    def next(self):
        """Return SML or D0 when a whole telegram is at telegram(), else 0. Never raises on any input."""
        self._release()
        while True:
            if not self._fmt:
                if not self._hunt():
                    return 0
            if self._fmt == SML:
                r = self._sml_end()
            else:
                r = self._d0_end()
            if r > 0:
                self._fmt = 0
                self._done = r
                self.frames += 1
                return SML if self.buf[0] == 0x1B else D0
            if r == 0:
                if self.n >= self.size:
                    # Full without an end: a lost end escape or a foreign stream; start over.
                    self.overflows += 1
                    self._abandon()
                    continue
                return 0
            # r < 0: abandoned, hunt again

    def _hunt(self):
        """Find the next start; move it to offset 0. False when there is none yet."""
        b = self.buf
        n = self.n
        s = -1
        fmt = 0
        if self.mode != "d0":
            s = b.find(_START, 0, n)
            if s >= 0:
                fmt = SML
        if self.mode != "sml":
            lim = n if s < 0 else s
            # '/' as 7E1 read through an 8N1 UART carries the parity bit: 0xAF.
            d = b.find(b"/", 0, lim)
            d2 = b.find(b"\xaf", 0, lim if d < 0 else d)
            if d2 >= 0:
                d = d2
            if d >= 0:
                s = d
                fmt = D0
        if s < 0:
            keep = 7 if self.mode != "d0" else 0  # a start escape may be cut across reads
            if n > keep:
                self.garbage += n - keep
                self._drop(n - keep)
            return False
        if s:
            self.garbage += s
            self._drop(s)
        self._fmt = fmt
        if fmt == SML:
            self._scan = 8
        else:
            self._scan = 1
            self._stx = False
        return True

    def _sml_end(self):
        """Length of the SML telegram at offset 0 when complete; 0 = need more bytes; -1 = abandoned."""
        b = self.buf
        n = self.n
        p = self._scan
        while True:
            p = b.find(_ESC, p, n)
            if p < 0:
                self._scan = max(8, n - 3)
                return 0
            if p + 8 > n:
                self._scan = p
                return 0
            if b[p + 4] == 1 and b[p + 5] == 1 and b[p + 6] == 1 and b[p + 7] == 1:
                # A new start before this telegram ended: it lost its end; restart at the new one.
                self.resyncs += 1
                self._drop(p)
                n = self.n
                p = 8
                continue
            if p & 3 == 0:
                # Escapes live on the 4-byte grid of the telegram (as libsml reads them).
                if b[p + 4] == 0x1A:
                    return p + 8
                if b[p + 4] == 0x1B and b[p + 5] == 0x1B and b[p + 6] == 0x1B and b[p + 7] == 0x1B:
                    p += 8  # escaped data
                    continue
                self._abandon()
                return -1
            if b[p + 4] == 0x1A:
                # An end escape off the grid: bytes were dropped or inserted; the telegram cannot be right.
                self.resyncs += 1
                self._fmt = 0
                self._drop(p + 8)
                return -1
            p += 1

    def _d0_end(self):
        """Length of the D0 telegram at offset 0 when complete; 0 = need more; -1 = abandoned."""
        b = self.buf
        n = self.n
        lim = n if n < _D0_MAX else _D0_MAX
        if self.mode != "d0":
            s = b.find(_START, 1, n)
            if s >= 0:
                lim = s if s < lim else lim
        p = self._scan
        e = b.find(b"!", p, lim)
        if e < 0:
            if lim < n:
                self._abandon()
                return -1
            self._scan = n
            return 0
        if not self._stx:
            s = b.find(b"\x02", 1, e)
            if s < 0:
                s = b.find(b"\x82", 1, e)
            self._stx = s >= 0
        need = e + 3 + (2 if self._stx else 0)  # '!' CR LF [ETX BCC]
        if need > n:
            self._scan = e
            return 0
        if b[e + 1] & 0x7F != 0x0D or b[e + 2] & 0x7F != 0x0A:
            self._abandon()
            return -1
        if self._stx and b[e + 3] & 0x7F != 0x03:
            self._abandon()
            return -1
        return need
