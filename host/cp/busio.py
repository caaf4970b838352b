"""Stand-in for busio.UART: a receive buffer fed by the host's meter source, bounded like the real one."""

import _hostenv


class UART:
    """UART(tx=None, rx=None, *, baudrate=9600, bits=8, parity=None, stop=1, timeout=1, receiver_buffer_size=64)."""

    class Parity:
        ODD = "ODD"
        EVEN = "EVEN"

    def __init__(self, tx=None, rx=None, *, rts=None, cts=None, rs485_dir=None, rs485_invert=False,
                 baudrate=9600, bits=8, parity=None, stop=1, timeout=1, receiver_buffer_size=64):
        if tx is None and rx is None:
            raise ValueError("tx and rx cannot both be None")
        if timeout > 100:
            raise ValueError("timeout must be <= 100 seconds")
        if bits not in (5, 6, 7, 8, 9):
            raise ValueError("bits must be 5 to 9")
        self.baudrate = baudrate
        self.bits = bits
        self.parity = parity
        self.timeout = timeout
        self._size = receiver_buffer_size
        self._buf = bytearray()
        self.overruns = 0  # bytes lost because the firmware read too late (the device loses them silently)
        self.written = bytearray()
        self._deinited = False

    def _fill(self):
        source = _hostenv.meter_source
        if source is None:
            return
        data = source.read_available(_hostenv.sim_seconds(), self)
        if _hostenv.control("meter") == "off":
            return  # a test covered the IR head: the meter keeps running, nothing reaches the UART
        if data:
            self._buf.extend(data)
            over = len(self._buf) - self._size
            if over > 0:
                # The hardware FIFO keeps the oldest bytes and drops new ones on overflow.
                self._buf = self._buf[: self._size]   # (no slice deletion: also runs on CircuitPython)
                self.overruns += over

    @property
    def in_waiting(self):
        self._check()
        self._fill()
        return len(self._buf)

    def read(self, nbytes=None):
        """Bytes available now (never waits: the firmware uses timeout=0), or None when there are none."""
        self._check()
        self._fill()
        if not self._buf:
            return None
        n = len(self._buf) if nbytes is None else min(nbytes, len(self._buf))
        out = bytes(self._buf[:n])
        self._buf = self._buf[n:]
        return out

    def readinto(self, buf):
        """Fill buf with available bytes; return the count or None when there are none."""
        data = self.read(len(buf))
        if not data:
            return None
        buf[: len(data)] = data
        return len(data)

    def readline(self):
        self._check()
        self._fill()
        i = self._buf.find(b"\n")
        if i < 0:
            return None
        return self.read(i + 1)

    def write(self, buf):
        self._check()
        self.written.extend(buf)
        source = _hostenv.meter_source
        if source is not None and hasattr(source, "on_write"):
            source.on_write(bytes(buf), self)
        return len(buf)

    def reset_input_buffer(self):
        self._buf = bytearray()

    def deinit(self):
        self._deinited = True

    def _check(self):
        if self._deinited:
            raise ValueError("Object has been deinitialized and can no longer be used. Create a new object.")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.deinit()
