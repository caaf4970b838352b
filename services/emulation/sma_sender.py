"""The SMA Energy Meter emulation: an EMETER datagram a second to the Speedwire multicast group and unicast targets."""

from adafruit_ticks import ticks_diff

from core.elapsed import fresh
from core.ipv4 import parse_ipv4
from core.module import OK, WARN, Module
from core.sockets import close_quietly, errno_of
from services.emulation import sma_wire
from services.emulation.meter_view import STALE_MS, view

GROUP = "239.12.255.254"   # every SMA Energy Meter sends here; SMA devices, pysma-plus and evcc listen here
PORT = 9522
_ANY = 0xFFFFFFFF          # Speedwire's "any device" serial: never ours


def derive_serial(device_id):
    """The serial when emulation.smaSerial is 0: the last 8 hex digits of the device id (the MAC's low 32 bits: the
    per-device 24 bits and the last byte of the maker's prefix) as a number; 0 and 0xFFFFFFFF become 1 and
    0xFFFFFFFE, so it is stable, nonzero and never Speedwire's "any device"."""
    try:
        n = int(device_id[-8:], 16) if device_id else 0
    except ValueError:
        n = 0
    return 1 if n == 0 else (_ANY - 1 if n == _ANY else n)


class SmaSender(Module):
    """pool: socketpool.SocketPool; bus: core.bus.Bus (latest "reading", "settings" changes); settings:
    core.settings.Settings (emulation.sma*); device_id: 12 hex digits; energy_floor: the REST/MQTT floor (a falling
    total is left out, never sent); log; group/port: where the datagrams go (the host runtime may move the group).

    Holds its one UDP socket (of the device's 8) only while emulation.sma is on. Pacing: a new reading leaves at once
    when the last datagram is min_gap_ms old (else as soon as it is), and the latest fresh reading is sent again
    period_ms after the last attempt, as a real meter sends once a second: with a meter that sends every second the
    datagrams follow its telegrams with no added delay, a new telegram waits at most min_gap_ms, and no receiver
    sees more than one datagram in min_gap_ms. A stale meter is not sent at all ("stale_skipped"): receivers time
    out into their own safe state."""

    name = "sma"
    period_ms = 1000
    min_gap_ms = 900
    retry_ms = 5000           # after running out of sockets

    def __init__(self, pool, bus, settings, device_id, energy_floor=None, log=None, group=GROUP, port=PORT):
        Module.__init__(self)
        self._pool = pool
        self._bus = bus
        self._settings = settings
        self._device_id = device_id
        self._floor = energy_floor
        self._log = log
        self.group = group
        self.port = port
        self._changes = bus.subscribe("settings", 4)
        self._buf = bytearray(sma_wire.MAX_SIZE)   # one buffer for every datagram: no 184-byte garbage a second
        self._sock = None
        self._failed_at = None
        self._tried_at = None      # ticks of the last attempt (sent or skipped)
        self._sent_at = None       # ticks of the last datagram that left
        self._last = None          # the reading of the last attempt
        self._expired = None       # the last reading seen stale: never sent again
        self._ticker = 0           # the datagram's 32-bit millisecond ticker
        self._ticker_at = None
        self.enabled = False
        self.serial = 0
        self.susy_id = 0
        self.targets = ()
        self._dests = ()
        self.last_error = 0
        self._configure()

    def _configure(self):
        """Read emulation.sma* (validated by core.settings: a target that is no IPv4 address is skipped here)."""
        s = self._settings
        self.enabled = s.get("emulation.sma", False) is True
        serial = s.get("emulation.smaSerial", 0)
        self.serial = serial if isinstance(serial, int) and 0 < serial < _ANY else derive_serial(self._device_id)
        susy = s.get("emulation.smaSusyId", 349)
        self.susy_id = susy if isinstance(susy, int) and 0 < susy <= 0xFFFF else 349
        text = s.get("emulation.smaTargets", "")
        targets = []
        for part in (text.split(",") if isinstance(text, str) else ()):
            part = part.strip()
            if parse_ipv4(part) is not None and part not in targets:
                targets.append(part)
        self.targets = tuple(targets)
        self._dests = tuple([(self.group, self.port)] + [(t, self.port) for t in targets])

    def start(self):
        """Open the socket when emulation.sma is on (out of sockets: counted, poll() tries again)."""
        self._configure()
        if self.enabled and (self.lender is None or self.lender.lend_socket() is None):
            self._open(None)

    budget = None      # core.sockbudget.SocketBudget (the loader sets it): asked before the socket is opened
    # services/emulation/shelly_udp.py ShellyUdp while the Shelly emulation listens (the loader sets it): its
    # socket sends the datagrams too, so both emulations on hold one socket of the 8, not two (a datagram's source
    # port means nothing to an SMA receiver, and sending needs no bind or group membership).
    lender = None

    def sockets_held(self):
        """1 while the socket is open (core/sockbudget.py)."""
        return 0 if self._sock is None else 1

    def _open(self, now_ms):
        if self.budget is not None and not self.budget.may_take():
            self.count("budget_refused")   # HTTP keeps its three: poll() tries again
            self._failed_at = now_ms
            return False
        try:
            sock = self._pool.socket(self._pool.AF_INET, self._pool.SOCK_DGRAM)
        except (OSError, RuntimeError):  # out of sockets is a RuntimeError on CircuitPython
            self.count("no_socket")
            self._failed_at = now_ms
            return False
        try:
            sock.setblocking(False)    # a full send buffer raises EAGAIN instead of stalling the loop
        except OSError:
            sock.close()
            self.count("no_socket")
            self._failed_at = now_ms
            return False
        self._sock = sock
        self._failed_at = None
        self._ticker_at = None
        return True

    def _close(self):
        self._sock = close_quietly(self._sock)

    def poll(self, now_ms):
        changed = False
        while self._changes.pop() is not None:
            changed = True
        if changed:
            self._configure()
        reading = self._bus.latest("reading")
        if reading is not None and reading is not self._expired and not fresh(reading.ts_ms, now_ms, STALE_MS):
            # Latched, also while off: a reading left on the bus by a dead pipeline would look recent again when the
            # ticks wrap 2**29 ms after its stamp.
            self._expired = reading
        if not self.enabled:
            self._close()
            return
        sock = self.lender.lend_socket() if self.lender is not None else None
        if sock is not None:
            self._close()    # borrowing: our own socket goes back to the budget
        elif self._sock is None:
            if self._failed_at is not None and 0 <= ticks_diff(now_ms, self._failed_at) < self.retry_ms:
                return
            if not self._open(now_ms):
                return
        self._tick(now_ms)
        if self._due(reading, now_ms):
            self._attempt(reading, now_ms, sock if sock is not None else self._sock)

    def _due(self, reading, now_ms):
        """True when a datagram (or a skip) is due now; a stamp "in the future" is past the tick wrap: long ago."""
        if self._tried_at is None:
            return True
        if not 0 <= ticks_diff(now_ms, self._tried_at) < self.period_ms:
            return True
        if reading is self._last:
            return False
        return self._sent_at is None or not 0 <= ticks_diff(now_ms, self._sent_at) < self.min_gap_ms

    def _attempt(self, reading, now_ms, sock):
        self._tried_at = now_ms
        self._last = reading
        current = view(reading, now_ms, self._floor) if reading is not self._expired else None
        if current is None:
            self.count("stale_skipped")
            return
        if current.power is None:
            self.count("no_power")     # a meter without power: a datagram of zeros would make batteries regulate
            return
        try:
            n = sma_wire.pack_into(self._buf, self.serial, self.susy_id, self._ticker, current)
        except ValueError as exc:
            if not self.counters.get("unencodable") and self._log is not None:
                self._log.warning("sma: reading not sent: %s", exc)
            self.count("unencodable")
            return
        data = memoryview(self._buf)[:n]
        sent = 0
        for dest in self._dests:
            try:
                sock.sendto(data, dest)
                sent += 1
            except OSError as exc:  # EAGAIN (buffer full), ENETUNREACH (WiFi down), ENOMEM (lwIP): next second
                self.count("errors")
                self.last_error = errno_of(exc)
        if sent:
            self.count("sent", sent)
            self._sent_at = now_ms
        self.state = OK if sent == len(self._dests) else WARN

    def _tick(self, now_ms):
        """Advance the 32-bit ticker by the ticks passed (every poll, so the step stays far inside ticks_diff's
        range): it wraps at 2**32 as the meter's does, not at 2**29 as the ticks do."""
        if self._ticker_at is not None:
            d = ticks_diff(now_ms, self._ticker_at)
            if d > 0:
                self._ticker = (self._ticker + d) & 0xFFFFFFFF
        self._ticker_at = now_ms

    def stop(self):
        self._close()

    def release(self):
        """Stop receiving settings changes: the sender is let go (services/emulation/loader.py)."""
        self._bus.unsubscribe("settings", self._changes)

    def describe(self):
        d = Module.describe(self)
        d["enabled"] = self.enabled
        d["socket"] = self._sock is not None
        d["shared_socket"] = self.lender is not None and self.lender.lend_socket() is not None
        d["serial"] = self.serial
        d["susy_id"] = self.susy_id
        d["group"] = self.group
        d["targets"] = ",".join(self.targets)    # a string: /system/info sections skip lists
        d["last_error"] = self.last_error
        return d
