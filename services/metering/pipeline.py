"""Meter pipeline: decode telegrams, check plausibility, median filter and ctRatio once, publish readings and health."""

from adafruit_ticks import ticks_diff, ticks_ms

from core.elapsed import fresh
from core.module import OK, WARN, Module
from meter import obis
from meter.decimal import Exact, sub
from meter.framer import SML
from meter.median import Median
from meter.reading import Reading
from meter.sml import E_CRC, SmlResult, decode_frame
from meter.decimal import parse_ct
from services.metering.register import EnergyRegister, scale

_MEDIAN_SIZES = (0, 1, 3, 5, 7, 9)  # 0 is the wire encoding of "Off"; 1 means the same
_KIND = {}
for _r in obis.ROWS:
    _KIND[_r[0]] = _r[2]
del _r


def parse_median(value):
    """Window size from the medianFilterSize setting (0/"Off" -> 1), or None when invalid."""
    if value == "Off" or value == "off":
        return 1
    if isinstance(value, bool) or not isinstance(value, int) or value not in _MEDIAN_SIZES:
        return None
    return value if value else 1


class MeterPipeline(Module):
    """bus: core.bus.Bus; settings: has get(key); ir_head: drivers.ir_head.IrHead (its sink becomes ours) or None;
    led: drivers.status_led.StatusLed or None (ERROR while stale). dzg: libsml's DZG 16.7.0 workaround.
    register: services.metering.register.EnergyRegister (the energy totals across ctRatio changes) or None (RAM)."""

    name = "meter"
    STALE_MS = 10000          # no good telegram for this long: readings are unknown
    MAX_POWER_W = 100000      # an energy counter may not grow faster than this
    REBASE_AFTER = 10         # consecutive implausible telegrams after which the counter is taken as reset
    MIN_INTERVAL_MS = 1000    # meters send at most one telegram a second; a burst read in one poll shares now_ms
    HEALTH_EVERY_MS = 5000
    FORGET_GAP_MS = 86400000  # silent this long: the time of the last telegram is forgotten (far below 2**28 ms)
    REGISTER_RETRY_MS = 60000  # a refused register write (drive owned by USB) is tried again this often

    def __init__(self, bus, settings, ir_head=None, led=None, dzg=False, register=None):
        Module.__init__(self)
        self.bus = bus
        self.settings = settings
        self.ir_head = ir_head
        self.led = led
        self.dzg = dzg
        self._settings_ring = bus.subscribe("settings", 8)
        self._res = SmlResult()
        self._decode_d0 = None     # meter.d0's decoder, imported at the first D0 telegram (an SML meter never needs it)
        self._filters = {}
        self._last_energy = {}     # code -> (mantissa, exp) of the last accepted raw value
        self._last_out = {}        # code -> (mantissa, exp) of the last published energy, filtered, before ctRatio
        self.register = register if register is not None else EnergyRegister()
        self._register_retry_ms = None
        self._server_id = None
        self._crc_mode = None      # CRC kind latched from the first good telegram until the meter goes stale
        self._d0_shape = None      # field layout of the last accepted D0 telegram (without BCC)
        self._d0_pending = None    # a new layout seen once, waiting for confirmation
        self._last_ok_ms = None
        self._start_ms = None
        self._implausible_run = 0
        self._health_ms = None
        self.stale = True
        self.median_size = 5
        self.ct_tenths = None
        self.last_error = None
        self.format = None
        self.crc = None
        for k in ("telegrams_ok", "crc_errors", "decode_errors", "implausible", "rebased"):
            self.counters[k] = 0
        self._load_settings()
        if ir_head is not None:
            ir_head.sink = self.on_telegram

    # --- settings ---

    def _load_settings(self):
        size = parse_median(self.settings.get("medianFilterSize", 5))
        if size is None:
            self.count("bad_settings")
            size = 5
        if size != self.median_size:
            self._filters = {}
        self.median_size = size
        ct = parse_ct(self.settings.get("ctRatio", 1))
        if ct is None:
            self.count("bad_settings")
            ct = 10
        if self.ct_tenths is not None and ct != self.ct_tenths:
            # The energy up to the last published reading keeps the ratio it was counted with.
            self.register.change(self.ct_tenths, ct, self._last_out)
            self.count("ct_changes")
        self.ct_tenths = ct

    # --- supervisor contract ---

    def start(self):
        """Read the energy register (written first with the ratio in force when missing)."""
        self.register.open(self.ct_tenths)

    def poll(self, now_ms):
        """Settings changes, staleness, periodic health."""
        if self._start_ms is None:
            self._start_ms = now_ms
        changed = False
        while True:
            keys = self._settings_ring.pop()
            if keys is None:
                break
            if "medianFilterSize" in keys or "ctRatio" in keys:
                changed = True
        if changed:
            self._load_settings()
        if self.register.dirty:
            at = self._register_retry_ms
            if at is None or not fresh(at, now_ms, self.REGISTER_RETRY_MS):
                self._register_retry_ms = None if self.register.save() else now_ms
        if self._last_ok_ms is not None and not fresh(self._last_ok_ms, now_ms, self.FORGET_GAP_MS):
            # Silent for a day: forget when the last telegram came. Past 2**28 ms the tick wrap would make its
            # stamp look recent or in the future, and the next telegram's growth would be judged against ~1 s.
            self._last_ok_ms = None
        ref = self._last_ok_ms if self._last_ok_ms is not None else self._start_ms
        if ticks_diff(now_ms, ref) >= self.STALE_MS:
            if not self.stale or self.state != WARN:
                self._go_stale(now_ms)
        if self._health_ms is None or ticks_diff(now_ms, self._health_ms) >= self.HEALTH_EVERY_MS:
            self._publish_health(now_ms)

    def stop(self):
        """Take the last reading off the bus: the supervisor stops a faulting pipeline and may give it up, and a
        reading left behind would look recent again to every reader's age check once the ticks wrap (6.2 days)."""
        self.bus.publish("reading", None)

    def _go_stale(self, now_ms):
        self.stale = True
        self.state = WARN
        self._filters = {}  # a gap breaks the window: no old sample may leak into new readings
        self._crc_mode = None
        self.bus.publish("reading", None)
        if self.led is not None:
            self.led.set("ERROR", True)
        self._publish_health(now_ms)

    def _publish_health(self, now_ms):
        self._health_ms = now_ms
        self.bus.publish("meter_health", self.health())

    def health(self):
        """Counters and state of the meter link as a plain dict."""
        c = self.counters
        ir = self.ir_head
        return {
            "telegrams_ok": c["telegrams_ok"],
            "crc_errors": c["crc_errors"],
            "decode_errors": c["decode_errors"],
            "implausible": c["implausible"],
            "resyncs": ir.framer.resyncs if ir is not None else 0,
            "bytes": ir.bytes_total if ir is not None else 0,
            "last_telegram_ms": self._last_ok_ms,
            "stale": self.stale,
            "format": self.format,
            "crc": self.crc,
            "last_error": self.last_error,
        }

    def describe(self):
        d = Module.describe(self)
        d["stale"] = self.stale
        d["median"] = self.median_size
        d["ct_ratio"] = Exact(self.ct_tenths, -1)   # a JSON number from integers (no 30-bit float on the wire)
        d["protocol"] = self.format or ""  # the web dashboard's meter health
        # Seconds since the last good telegram (-1: none since the start or for a day): the status strip's age.
        last = self._last_ok_ms
        d["age_s"] = ticks_diff(ticks_ms(), last) // 1000 if last is not None else -1
        return d

    # --- telegrams ---

    def on_telegram(self, buf, n, fmt, now_ms):
        """Sink of the IR head: buf[0:n] is one whole telegram (SML or D0); decode and publish or count.

        Returns False when the telegram did not decode (the framer then resynchronises inside it)."""
        res = self._res
        if fmt == SML:
            ok = decode_frame(buf, n, res, self.dzg, self._crc_mode)
        else:
            decode_d0 = self._decode_d0
            if decode_d0 is None:
                from meter.d0 import decode_d0

                self._decode_d0 = decode_d0
            ok = decode_d0(buf, n, res)
        if not ok:
            self.count("crc_errors" if res.error == E_CRC else "decode_errors")
            self.last_error = res.error
            self._publish_health(now_ms)
            return False
        if fmt != SML and res.crc is None:
            # D0 without BCC has no checksum: a telegram whose field layout changed waits for the next one
            # with the same layout (a dropped or doubled character only ever damages one telegram).
            if res.shape != self._d0_shape and res.shape != self._d0_pending:
                self._d0_pending = res.shape
                self.count("d0_unconfirmed")
                return True
        reading = self.accept(res.values(), res.server_id(), "sml" if fmt == SML else "d0", now_ms, res.crc)
        if reading is not None and fmt != SML:
            self._d0_shape = res.shape
        if reading is not None and fmt == SML:
            # Accepting both CRC kinds doubles the chance that a damaged frame passes: once the meter has
            # shown which one it uses, only that one counts (until it goes stale).
            self._crc_mode = res.crc
        return True

    def accept(self, values, server_id, source, now_ms, crc=None):
        """Check, filter, scale and publish one decoded telegram; return the Reading or None when rejected."""
        if "16.7.0" not in values:
            # Meters without 16.7.0 report power as 1.7.0 (- 2.7.0) or as the absolute 15.7.0.
            if "1.7.0" in values:
                m, e = values["1.7.0"]
                if "2.7.0" in values:
                    m, e = sub(m, e, values["2.7.0"][0], values["2.7.0"][1])
                values["16.7.0"] = (m, e)
            elif "15.7.0" in values:
                values["16.7.0"] = values["15.7.0"]
        if server_id != self._server_id:
            if self._server_id is not None:
                self.count("meter_changed")  # another meter: its counters are a new baseline
            self._last_energy = {}
            self._filters = {}
            if self._server_id is not None:
                self._new_meter()
            self._server_id = server_id
        if not self._plausible(values, now_ms):
            return None
        self._last_ok_ms = now_ms
        self.format = source
        self.crc = crc
        self.count("telegrams_ok")
        out = {}
        size = self.median_size
        ct = self.ct_tenths
        filters = self._filters
        register = self.register
        last_out = self._last_out
        for code in values:
            m, e = values[code]
            if size > 1:
                f = filters.get(code)
                if f is None:
                    f = filters[code] = Median(size)
                m, e = f.add(m, e)
            kind = _KIND.get(code)
            if kind == "energy":
                last_out[code] = (m, e)
                m, e = register.total(code, m, e, ct)
            elif ct != 10 and kind != "voltage" and kind != "frequency":
                m, e = scale(m, e, ct)
            out[code] = (m, e)
        reading = Reading(now_ms, out, server_id, source)
        if self.stale:
            self.stale = False
            self.state = OK
            if self.led is not None:
                self.led.set("ERROR", False)
        self.bus.publish("reading", reading)
        self._publish_health(now_ms)
        return reading

    def _new_meter(self):
        """Another meter or a reset counter: its totals are raw x ctRatio again, from its first reading."""
        self._last_out = {}
        self.register.reset(self.ct_tenths)

    def _plausible(self, values, now_ms):
        """Energy counters may not run backwards or faster than MAX_POWER_W; update the baseline when accepted."""
        last = self._last_energy
        dt = None
        if self._last_ok_ms is not None:
            # Telegrams that waited in the UART buffer arrive together with one timestamp: each still
            # stands for at least one meter interval.
            dt = max(ticks_diff(now_ms, self._last_ok_ms), self.MIN_INTERVAL_MS)
        bad = None
        for code in values:
            if _KIND.get(code) != "energy":
                continue
            prev = last.get(code)
            if prev is None:
                continue
            m, e = values[code]
            dm, de = sub(m, e, prev[0], prev[1])
            if dm < 0:
                bad = "energy backwards " + code
                break
            if dt is None:
                continue  # the gap since the last telegram is unknown (over a day): any growth is possible
            # allowed Wh = MAX_POWER_W * dt_ms / 3.6e6, plus one step of the counter's last digit
            if de >= 0:
                over = dm * 10 ** de * 3600000 > self.MAX_POWER_W * dt + 3600000 * 10 ** de
            else:
                over = dm * 3600000 > self.MAX_POWER_W * dt * 10 ** -de + 3600000
            if over:
                bad = "energy jump " + code
                break
        if bad is not None:
            self._implausible_run += 1
            if self._implausible_run < self.REBASE_AFTER:
                self.count("implausible")
                self.last_error = bad
                self._publish_health(now_ms)
                return False
            self.count("rebased")  # the meter really changed (exchange, reset): start from its values
            self._new_meter()
        self._implausible_run = 0
        for code in values:
            if _KIND.get(code) == "energy":
                last[code] = values[code]
        return True
