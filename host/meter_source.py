"""Byte sources behind the host UART stand-in: a simulated household meter, a capture replay, or a serial port."""

import atexit
import json
import math
import os
import random
import time

from host.decode import load_capture
from meter import sml_encode as enc

BYTES_PER_S = 960        # 9600 baud, 10 bits per byte
BACKLOG_S = 10           # a source never queues more than this much simulated time of telegrams


class _LineRate:
    """Queue of bytes released at the line rate of simulated time."""

    def __init__(self):
        self._pending = bytearray()
        self._credit = 0.0
        self._last_s = None

    def push(self, data, at_s):
        """Queue data that starts on the wire at simulated time at_s."""
        if not self._pending:
            self._credit = 0.0
            self._last_s = at_s
        self._pending += data

    def take(self, now_s):
        if self._last_s is None:
            self._last_s = now_s
        self._credit = min(self._credit + max(0.0, now_s - self._last_s) * BYTES_PER_S, len(self._pending) + 1.0)
        self._last_s = now_s
        if not self._pending:
            self._credit = 0.0
            return b""
        k = min(len(self._pending), int(self._credit))
        self._credit -= k
        out = bytes(self._pending[:k])
        del self._pending[:k]
        return out

    def clear(self):
        self._pending = bytearray()
        self._credit = 0.0

    def done_s(self):
        """Simulated time at which every queued byte is on the wire, or None when nothing is queued."""
        if not self._pending or self._last_s is None:
            return None
        return self._last_s + (len(self._pending) - self._credit) / BYTES_PER_S


class SimMeter:
    """Synthetic household meter: one SML telegram per simulated second, load curve, PV export at midday."""

    SERVER_ID = bytes.fromhex("0a01534d5400000004d2")  # manufacturer "SMT" (simulated), serial 1234
    PV_PEAK_W = 4200

    SAVE_EVERY_S = 1.0  # real seconds between saves of the counters (a SIGKILL loses at most this much counting)

    def __init__(self, seed=1, start_tod_s=None, import_wh=12345678.9, export_wh=2345678.9, counters_path=None):
        self._rnd = random.Random(seed)
        if start_tod_s is None:
            lt = time.localtime()
            start_tod_s = lt.tm_hour * 3600 + lt.tm_min * 60 + lt.tm_sec
        self._tod0 = start_tod_s
        # Counters in watt-seconds (exact integers); the telegram carries 0.1 Wh = 360 Ws.
        self.import_ws = int(import_wh * 3600)
        self.export_ws = int(export_wh * 3600)
        # A real meter counts on while the gateway restarts: the counters live beside the drive, not in the process.
        self._counters_path = counters_path
        self._saved_at = None
        self._load_counters()
        if counters_path is not None:
            atexit.register(self._save_counters, True)  # an orderly stop (SIGTERM) keeps every count
        self._next_s = None
        self._seq = 0
        self._line = _LineRate()
        self._last_len = 0
        self.last_power = 0

    def _load_counters(self):
        if self._counters_path is None:
            return
        try:
            with open(self._counters_path) as f:
                doc = json.load(f)
            self.import_ws = max(self.import_ws, int(doc["import_ws"]))
            self.export_ws = max(self.export_ws, int(doc["export_ws"]))
        except (OSError, ValueError, KeyError, TypeError):
            pass  # none yet (first start) or torn: the meter starts from its nameplate counters

    def _save_counters(self, now_anyway=False):
        now = time.monotonic()
        if self._counters_path is None:
            return
        if not now_anyway and self._saved_at is not None and now - self._saved_at < self.SAVE_EVERY_S:
            return
        self._saved_at = now
        tmp = self._counters_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"import_ws": self.import_ws, "export_ws": self.export_ws}, f)
        os.replace(tmp, self._counters_path)

    def power_at(self, t_s):
        """Net power in W at simulated second t_s (positive = import): household load minus PV."""
        h = ((self._tod0 + t_s) % 86400) / 3600.0
        load = 180 + 350 * math.exp(-((h - 7.5) / 1.2) ** 2) + 900 * math.exp(-((h - 19.0) / 1.8) ** 2)
        load += 120 * math.exp(-((h - 12.5) / 1.0) ** 2)
        pv = 0.0
        if 6.0 < h < 20.0:
            pv = self.PV_PEAK_W * math.sin(math.pi * (h - 6.0) / 14.0) ** 2
        noise = self._rnd.uniform(-40, 40)
        # a kettle or oven now and then
        if self._rnd.random() < 0.002:
            noise += 2000
        return int(round(load + noise - pv))

    def _step(self, t_s):
        p = self.power_at(t_s)
        self.last_power = p
        if p >= 0:
            self.import_ws += p
        else:
            self.export_ws += -p
        return p

    def telegram(self, p):
        """The SML telegram for the current counters and power p."""
        imp = self.import_ws // 360
        exp = self.export_ws // 360
        l1 = p // 3
        l2 = p // 3
        l3 = p - l1 - l2
        r = self._rnd
        v = [2300 + r.randint(-30, 30) for _ in range(3)]
        entry = self._entry
        entries = [
            entry("1.8.0", imp, 30, -1, False),
            entry("2.8.0", exp, 30, -1, False),
            entry("16.7.0", p, 27, 0, True, 4),
            entry("36.7.0", l1, 27, 0, True),
            entry("56.7.0", l2, 27, 0, True),
            entry("76.7.0", l3, 27, 0, True),
            entry("32.7.0", v[0], 35, -1, False),
            entry("52.7.0", v[1], 35, -1, False),
            entry("72.7.0", v[2], 35, -1, False),
            entry("31.7.0", abs(l1) * 1000 // v[0], 33, -2, False),
            entry("51.7.0", abs(l2) * 1000 // v[1], 33, -2, False),
            entry("71.7.0", abs(l3) * 1000 // v[2], 33, -2, False),
            entry("14.7.0", 500 + r.randint(-1, 1), 44, -1, False),
        ]
        self._seq += 1
        return enc.transport(enc.sml_file(self.SERVER_ID, entries, self._seq))

    _entries = {}   # encoded list entries by their arguments: at --speed the encoding was half the host's CPU

    def _entry(self, code, value, unit, scaler, signed, width=None):
        key = (code, value, unit, scaler, signed, width)
        out = self._entries.get(key)
        if out is None:
            if len(self._entries) > 4096:
                self._entries.clear()
            out = self._entries[key] = enc.entry(enc.obis_name(code), value, unit, scaler, signed=signed, width=width)
        return out

    def read_available(self, now_s, uart=None):
        """Bytes the meter has sent by simulated time now_s (at 9600 baud), one telegram per second."""
        if self._next_s is None:
            self._next_s = math.floor(now_s) + 1
        while self._next_s <= now_s:
            p = self._step(self._next_s)
            if now_s - self._next_s < BACKLOG_S:
                t = self.telegram(p)
                self._last_len = len(t)
                self._line.push(t, self._next_s)
            self._next_s += 1
        self._save_counters()
        data = self._line.take(now_s)
        if uart is not None and getattr(uart, "baudrate", 9600) != 9600:
            return b""  # a wrong baud rate reads nothing useful; the real head would see garbage
        return data

    def next_due_s(self):
        """Simulated time at which the next whole telegram will have arrived (host/idle_wait.py sleeps until then),
        or None before the first read."""
        done = self._line.done_s()
        if done is not None:
            return done
        return None if self._next_s is None else self._next_s + self._last_len / BYTES_PER_S


class ReplaySource:
    """A capture file (hex text or binary, any number of telegrams) sent in a loop, once per period."""

    def __init__(self, path, period_s=1.0):
        with open(path, "rb") as f:
            self.data = load_capture(f.read())
        if not self.data:
            raise ValueError("empty capture: %s" % path)
        self.period_s = max(period_s, len(self.data) / BYTES_PER_S)
        self._next_s = None
        self._line = _LineRate()

    def read_available(self, now_s, uart=None):
        if self._next_s is None:
            self._next_s = now_s
        while self._next_s <= now_s:
            if now_s - self._next_s < BACKLOG_S:
                self._line.push(self.data, self._next_s)
            self._next_s += self.period_s
        return self._line.take(now_s)

    def next_due_s(self):
        """Simulated time at which the next whole capture will have arrived, or None before the first read."""
        done = self._line.done_s()
        if done is not None:
            return done
        return None if self._next_s is None else self._next_s + len(self.data) / BYTES_PER_S


class SerialSource:
    """A USB IR head through pyserial; follows the firmware UART's baud rate, bits and parity."""

    def __init__(self, device):
        import serial  # pyserial, only needed for a real head

        self._serial_mod = serial
        self.ser = serial.Serial(device, 9600, bytesize=8, parity="N", stopbits=1, timeout=0)
        self.setting_errors = 0

    def _follow(self, uart):
        if uart is None:
            return
        try:
            self._apply(uart)
        except Exception:  # noqa: BLE001 - a port that refuses a setting (termios.error is no OSError)
            self.setting_errors += 1

    def _apply(self, uart):
        ser = self.ser
        baud = getattr(uart, "baudrate", 9600)
        if ser.baudrate != baud:
            ser.baudrate = baud
        bits = getattr(uart, "bits", 8)
        parity = getattr(uart, "parity", None)
        want_parity = {"EVEN": "E", "ODD": "O"}.get(str(parity).split(".")[-1], "N")
        if ser.bytesize != bits:
            ser.bytesize = bits
        if ser.parity != want_parity:
            ser.parity = want_parity

    def read_available(self, now_s, uart=None):
        self._follow(uart)
        n = self.ser.in_waiting
        return self.ser.read(n) if n else b""

    def on_write(self, data, uart=None):
        self._follow(uart)
        self.ser.write(data)

    def fileno(self):
        """The port's descriptor: the host runtime's wait wakes when bytes arrive."""
        return self.ser.fileno()


def open_source(arg, state_dir=None, start_tod_s=None):
    """The source for --meter: "sim", a capture file, or a serial device. The simulated meter keeps its counters
    next to the state folder (STATE.meter.json), so they count on across restarts as a real meter's do; its day
    starts at start_tod_s (seconds after midnight; None: this computer's local time)."""
    if arg == "sim":
        return SimMeter(start_tod_s=start_tod_s,
                        counters_path=None if state_dir is None else state_dir.rstrip("/") + ".meter.json")
    if os.path.isfile(arg):
        return ReplaySource(arg)
    if arg.startswith("/dev/") or arg.upper().startswith("COM"):
        return SerialSource(arg)
    raise ValueError("no such file or device: %s" % arg)
