"""History service: quarter-hour and daily records from readings, held in RAM and flushed to the flash in batches."""

from array import array

from adafruit_ticks import ticks_add, ticks_diff
from micropython import const

from core.module import OK, WARN, Module
from core.tz import civil_from_days, local_day_start_utc
from meter.decimal import rescale
from services.history import store as hs

_Q = const(900)       # a quarter hour in s; zone offsets are whole quarter hours, so UTC quarters are local ones
_DAY = const(86400)
_STEP = const(10)     # the recent power ring (the dashboard's 15-minute chart): one slot per 10 s ...
_SLOTS = const(90)    # ... for the last 15 minutes (720 bytes)


def _dwh(v):
    """0.1 Wh of an exact decimal (mantissa, exp10) in Wh, rounded half away from zero."""
    return rescale(v[0], v[1], -1)[0]


class History(Module):
    """bus: core.bus.Bus ("reading", "settings"); clock: core.clock.Clock (synced, time(), local(), offset_min())
    or None; settings: has get(); store: services.history.store.HistoryStore; log: core.log.Log or None."""

    name = "history"
    poll_every_ms = 250     # a reading a second; records close on the quarter hour
    MAX_BATCH = 96            # records in RAM that force an early flush (a day of quarter hours)
    MAX_RAM = 400             # records kept in RAM while the flash refuses writes; older ones are dropped
    DEFAULT_FLUSH_MIN = 60
    MAX_FLUSH_MIN = 1440

    def __init__(self, bus, clock, settings, store, log=None):
        Module.__init__(self)
        self.bus = bus
        self.clock = clock
        self.settings = settings
        self.store = store
        self.log = log
        self._readings = bus.subscribe("reading", 32)
        self._changes = bus.subscribe("settings", 8)
        # Unflushed records, same shape as the store's: (0, t, day, power, off, flags, a, b, c, d).
        self.hr = []
        self.lr = []
        self._q = None      # open quarter: [t, day, off, imp, exp, power_sum, power_n, flags]
        self._prev = None   # [imp, exp]: totals the next quarter's energy is counted from (0.1 Wh)
        self._seen = None   # [imp, exp]: newest totals seen since start
        self._day = None    # open day: [day, t, off, imp_start, exp_start, imp_sum, exp_sum, flags, end_utc, n]
        self._last_t = -1   # newest recorded quarter: nothing at or before it is recorded again
        self.store_ok = False
        # services.tariff.tariff.Tariff or None (set by the tariff feature): prices each quarter hour as it closes.
        self.tariff = None
        self.peaks = None     # services.tariff.peaks.Peaks or None: told of every quarter hour as it closes
        self.flush_ms = self.DEFAULT_FLUSH_MIN * 60000
        self._flush_at = None
        self._now = 0
        self._rw = array("l", [0] * _SLOTS)    # watts of the newest reading in each 10 s slot
        self._rs = array("l", [-1] * _SLOTS)   # that slot's number (utc // 10); another number: an empty slot
        for k in ("readings", "quarters", "days", "flushes", "flush_errors", "unsynced", "no_import", "rebased",
                  "clock_behind", "dropped"):
            self.counters[k] = 0

    def _note(self, level, msg, *args):
        if self.log is not None:
            self.log.log(level, msg, *args)

    # --- lifecycle ---

    def start(self):
        self._load_flush_setting()
        if not self.hr and not self.lr:
            self._open_store()
            self._restore()
        self._flush_at = None

    def _open_store(self):
        """Open (check, repair) the file and start making what it lacks: a new, short or older-layout file is
        written a slice per poll (_make_file), never whole in one step: 470 sector erases stall the chip 24 S3 s at
        the flash's typical figures and 210 s at its maximum, past the 30 s watchdog. A drive that refuses
        (read-only while USB owns it) is retried at every flush while the records wait in RAM, instead of failing
        the service."""
        try:
            self.store.begin()
            self.store_ok = True
        except OSError as exc:
            self.store_ok = False
            self.state = WARN
            self.count("open_errors")
            self._note("error", "history: cannot open %s, recording to RAM: %s", self.store.path, exc)
        return self.store_ok

    def _make_file(self):
        """One slice of the file begun at start (at most store.FILL bytes); once it is complete, the records that
        waited in RAM go to the flash at the next poll (not in this one: its slice already stalled the chip)."""
        try:
            done = self.store.step()
        except Exception as exc:       # a refusing drive, or anything else: the work ended, never a stuck service
            self.store_ok = False      # the next flush begins again: a short file is extended from where it ends
            self.state = WARN
            self.count("open_errors")
            self._note("error", "history: cannot write %s, recording to RAM: %s", self.store.path, exc)
            return
        if done:
            self._flush_at = self._now
            self._note("info", "history: %s complete (%s, %d slices)", self.store.path, self.store.status,
                       self.store.slices)

    def stop(self):
        try:
            self.flush()
        except Exception as exc:  # stop() never raises
            self._note("error", "history: flush at stop failed: %s", exc)

    def _load_flush_setting(self):
        v = self.settings.get("history.flushMinutes", self.DEFAULT_FLUSH_MIN) if self.settings else None
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= self.MAX_FLUSH_MIN:
            self._note("warning", "history: flushMinutes %r invalid (1..%d), using %d", v, self.MAX_FLUSH_MIN,
                       self.DEFAULT_FLUSH_MIN)
            v = self.DEFAULT_FLUSH_MIN
        self.flush_ms = v * 60000

    def _restore(self):
        """Continue from the flash: totals of the newest quarter, the open day, day records lost with a batch."""
        self._q = None
        self._day = None
        self._seen = None
        last = self.store.hr.last if self.store_ok else None
        if last is None:
            self._prev = None
            self._last_t = -1
            return
        self._prev = [last[6], last[7]]
        self._last_t = last[1]
        if self.clock is None:
            return  # no clock, no days: nothing is recorded without one anyway
        lr_last = self.store.lr.last
        closed = lr_last[2] if lr_last is not None else -(1 << 30)
        day = None
        for r in self.store.records(hs.HR):
            if r[2] <= closed:
                continue
            if day is None or r[2] != day[0]:
                if day is not None:
                    self._close_day(day)  # a day whose record was lost with an unflushed batch: rebuilt
                day = self._new_day(r)
            self._add_to_day(day, r)
        self._day = day

    # --- days ---

    def _day_start(self, day):
        """First UTC instant of a local day number: core.tz's answer for the clock's zone rule."""
        rule = getattr(self.clock, "rule", None)
        if rule is not None:
            y, m, d = civil_from_days(day)
            return local_day_start_utc(rule, y, m, d)
        m = day * _DAY  # a clock without a rule: its offsets, two passes settle a DST day
        u = m - self.clock.offset_min(m) * 60
        return m - self.clock.offset_min(u) * 60

    def _new_day(self, rec):
        t = self._day_start(rec[2])
        off = (self.clock.local(t) - t) // 60
        return [rec[2], t, off, rec[6] - rec[8], rec[7] - rec[9], 0, 0, rec[5] & hs.F_NO_EXPORT,
                self._day_start(rec[2] + 1), 0, 0, 0]

    def _add_to_day(self, d, rec):
        d[5] += rec[8]
        d[6] += rec[9]
        f = rec[5]
        d[7] |= f & (hs.F_GAP | hs.F_REBASE | hs.F_NO_EXPORT)
        d[9] += 1
        # Costs: the day sums what its quarter hours booked; a quarter with energy but no price marks the day part-
        # priced (its sum then covers the priced quarter hours only).
        ic = rec[10] if len(rec) > 10 else 0
        ec = rec[11] if len(rec) > 11 else 0
        if f & hs.F_IC:
            d[10] += ic
            d[7] |= hs.F_IC
        elif rec[8]:
            d[7] |= hs.F_IC_PART
        if f & hs.F_EC:
            d[11] += ec
            d[7] |= hs.F_EC
        elif rec[9] and not f & hs.F_NO_EXPORT:
            d[7] |= hs.F_EC_PART

    def _day_rec(self, d):
        # LowRes power field: the number of quarter-hour records the day has.
        flags = d[7]
        ic = d[10]
        ec = d[11]
        if not -0x80000000 <= ic <= 0x7FFFFFFF:
            ic = 0
            flags = (flags & ~hs.F_IC) | hs.F_IC_PART   # beyond the record's field: not booked, said so
        if not -0x80000000 <= ec <= 0x7FFFFFFF:
            ec = 0
            flags = (flags & ~hs.F_EC) | hs.F_EC_PART
        return (0, d[1], d[0], d[9], d[2], flags, d[3], d[4], d[5], d[6], ic, ec)

    def _close_day(self, d):
        self.lr.append(self._day_rec(d))
        self.count("days")

    # --- quarters ---

    def _close_quarter(self):
        q = self._q
        self._q = None
        prev = self._prev
        flags = q[7]
        pw = 0
        if q[6]:
            flags |= hs.F_POWER
            pw = q[5] // q[6]
        rec = (0, q[0], q[1], pw, q[2], flags, q[3], q[4], q[3] - prev[0], q[4] - prev[1], 0, 0)
        tariff = self.tariff
        if tariff is not None:
            # Booked once, with the prices in force now: a later price or settings change never rewrites it.
            ic, ec, cf = tariff.book_quarter(rec)
            if cf:
                rec = rec[:5] + (flags | cf,) + rec[6:10] + (ic, ec)
        if self.peaks is not None:
            self.peaks.quarter(rec)
        self._prev = [q[3], q[4]]
        self._last_t = q[0]
        d = self._day
        if d is not None and d[0] != q[1]:
            self._close_day(d)
            d = None
        if d is None:
            d = self._day = self._new_day(rec)
        self._add_to_day(d, rec)
        self.hr.append(rec)
        self.count("quarters")
        if len(self.hr) + len(self.lr) >= self.MAX_BATCH:
            self.flush()

    def _roll(self, utc):
        """Close the quarter and the day that utc has left."""
        if self._q is not None and utc >= self._q[0] + _Q:
            self._close_quarter()
        d = self._day
        if d is not None and self._q is None and utc >= d[8]:
            self._close_day(d)
            self._day = None

    def _take(self, reading, utc):
        v = reading.values
        imp = v.get("1.8.0")
        if imp is None:
            self.count("no_import")
            return
        imp = _dwh(imp)
        e = v.get("2.8.0")
        exp = 0 if e is None else _dwh(e)
        t = utc - utc % _Q
        q = self._q
        if t <= self._last_t or (q is not None and t < q[0]):
            self.count("clock_behind")  # the clock stepped back: never record a quarter twice or out of order
            return
        flags = 0
        ref = self._seen
        if ref is not None and (imp < ref[0] or exp < ref[1]):
            # The meter counter went back (reset, another meter): keep what is counted, go on from the new base.
            # A ctRatio change never gets here: the pipeline's register keeps the totals continuous.
            self._prev[0] += imp - ref[0]
            self._prev[1] += exp - ref[1]
            flags = hs.F_REBASE
            self.count("rebased")
        elif ref is None and self._prev is not None and (imp < self._prev[0] or exp < self._prev[1]):
            self._prev = [imp, exp]  # counter went back while we were off: the energy in between is unknown
            flags = hs.F_REBASE
            self.count("rebased")
        if self._prev is None:
            self._prev = [imp, exp]  # the very first reading: counting starts here
        if q is None:
            local = self.clock.local(t)
            if self._last_t >= 0 and t != self._last_t + _Q:
                flags |= hs.F_GAP
            if e is None:
                flags |= hs.F_NO_EXPORT
            q = self._q = [t, local // _DAY, (local - t) // 60, imp, exp, 0, 0, flags]
        else:
            q[3] = imp
            q[4] = exp
            q[7] |= flags
        p = v.get("16.7.0")
        if p is not None:
            q[5] += rescale(p[0], p[1], 0)[0]
            q[6] += 1
        self._seen = [imp, exp]
        self.count("readings")

    def poll(self, now_ms):
        self._now = now_ms
        ch = self._changes.pop()
        while ch is not None:
            if "history.flushMinutes" in ch or "history" in ch:
                self._load_flush_setting()
                self._flush_at = None
            if "timezone" in ch and self._day is not None and self.clock is not None:
                # The clock (polled before us) has the new zone: the open day ends at its new midnight.
                self._day[8] = self._day_start(self._day[0] + 1)
            ch = self._changes.pop()
        clock = self.clock
        utc = clock.time() if clock is not None and clock.synced else None
        if utc is not None:
            self._roll(utc)
        r = self._readings.pop()
        while r is not None:
            if utc is None:
                self.count("unsynced")  # no history with an invented date
            else:
                self._take(r, utc)
                self._keep_recent(r, utc)
            r = self._readings.pop()
        if self.store_ok and not self.store.ready:
            self._make_file()
        elif self._flush_at is None:
            self._flush_at = ticks_add(now_ms, self.flush_ms)
        elif ticks_diff(now_ms, self._flush_at) >= 0:
            self.flush()

    def flush(self):
        """Write the buffered records to the flash now (the lifecycle calls this on every orderly stop)."""
        self._flush_at = ticks_add(self._now, self.flush_ms)
        if not self.hr and not self.lr:
            return True
        if not self.store_ok:
            self._open_store()
        if self.store_ok and not self.store.ready:
            # The file is still being made, a slice per poll: the records wait in RAM (bounded as for a refusing
            # drive) and go once it is complete. An orderly stop now loses them, as a power cut would.
            self._bound_ram()
            self._note("warning", "history: %s not complete yet (%d of %d bytes), %d records wait in RAM",
                       self.store.path, self.store.done_bytes, self.store.size, len(self.hr) + len(self.lr))
            return False
        hr = self.hr
        lr = self.lr
        self.hr = []  # new lists: an answer being streamed keeps iterating the old ones
        self.lr = []
        try:
            if not self.store_ok:
                raise OSError("history file not open")
            self.store.write(hr, lr)
        except OSError as exc:
            w = self.store.written if self.store_ok else [0, 0]
            self.hr = hr[w[0]:] + self.hr
            self.lr = lr[w[1]:] + self.lr
            self._bound_ram()
            self.count("flush_errors")
            self.store_ok = False  # the next flush opens the file again (checks it, or creates a removed one)
            self.state = WARN
            self._note("error", "history: flush failed, %d records kept in RAM: %s", len(self.hr) + len(self.lr), exc)
            return False
        self.count("flushes")
        if self.state == WARN:
            self.state = OK
        return True

    def _bound_ram(self):
        for batch in (self.hr, self.lr):
            if len(batch) > self.MAX_RAM:
                self.count("dropped", len(batch) - self.MAX_RAM)
                del batch[:len(batch) - self.MAX_RAM]

    # --- readers for the API ---

    def high_res(self, day):
        """Body function (for a ChunkedResponse) of the highRes answer of a local day number."""
        snap = self.store.hr.next_seq - 1
        ram = self.hr
        store = self.store
        ok = self.store_ok

        def body():
            # From the day before: its last quarter hour says whether the day starts with a gap.
            recs = store.records(hs.HR, snap, day - 1, day + 1, True) if ok else ()
            return hs.high_res_json((recs, ram), day)
        return body

    def low_res(self, first_day, days):
        """Body function of the lowRes answer; the open day is included as it stands so far."""
        snap = self.store.lr.next_seq - 1
        ram = self.lr
        tail = [self._day_rec(self._day)] if self._day is not None else []
        store = self.store
        ok = self.store_ok

        def body():
            recs = store.records(hs.LR, snap, first_day, first_day + days, True) if ok else ()
            return hs.low_res_json((recs, ram, tail), first_day, days)
        return body

    def quarter_records(self, day, ticks=False):
        """The closed quarter-hour records of a local day (flash, then RAM), oldest first, a generator; with ticks,
        None after every read of the flash (a streamed answer gives the loop back between reads)."""
        last_t = -1
        srcs = (self.store.records(hs.HR, self.store.hr.next_seq - 1, day, day + 1, ticks) if self.store_ok else (),
                list(self.hr))
        for src in srcs:
            for r in src:
                if r is None:
                    yield None
                elif r[2] == day and r[1] > last_t:
                    last_t = r[1]
                    yield r

    def quarters_of(self, day):
        """The closed quarter-hour records of a local day as a list (<= 100)."""
        return list(self.quarter_records(day))

    def days_between(self, first_day, end_day, ticks=False):
        """Day records (flash, RAM, the open day as it stands) of local days in [first_day, end_day), a generator;
        with ticks, None after every read of the flash."""
        last = -(1 << 30)
        srcs = (self.store.records(hs.LR, self.store.lr.next_seq - 1, first_day, end_day, ticks)
                if self.store_ok else (), list(self.lr), [self._day_rec(self._day)] if self._day is not None else [])
        for src in srcs:
            for r in src:
                if r is None:
                    yield None
                elif first_day <= r[2] < end_day and r[2] > last:
                    last = r[2]
                    yield r

    def first_day(self):
        """The local day of the oldest day record (flash, RAM, the open day), or None when there is none; reads at
        most two slots of the flash (store.oldest)."""
        if self.store_ok:
            try:
                r = self.store.oldest(hs.LR)
            except OSError:
                r = None
            if r is not None:
                return r[2]
        for r in self.lr:
            return r[2]
        return self._day[0] if self._day is not None else None

    def _keep_recent(self, reading, utc):
        p = reading.values.get("16.7.0")
        if p is not None:
            slot = utc // _STEP
            i = slot % _SLOTS
            self._rw[i] = rescale(p[0], p[1], 0)[0]
            self._rs[i] = slot

    def recent_json(self, utc):
        """GET /history/recent: the last 15 minutes of power up to utc, one point per 10 s slot that had a reading,
        oldest first: {"step_s":10,"points":[[utc,W],...]} (a slot without a reading is left out: a gap)."""
        parts = []
        if utc is not None:
            last = utc // _STEP
            for slot in range(last - _SLOTS + 1, last + 1):
                i = slot % _SLOTS
                if self._rs[i] == slot:
                    parts.append("[%d,%d]" % (slot * _STEP, self._rw[i]))
        return '{"step_s":%d,"points":[%s]}' % (_STEP, ",".join(parts))

    def describe(self):
        d = Module.describe(self)
        st = self.store
        d["file"] = st.status
        d["highres_records"] = st.hr.valid
        d["lowres_records"] = st.lr.valid
        d["unflushed"] = len(self.hr) + len(self.lr)
        return d
