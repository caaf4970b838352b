"""Tariff service: keeps the price in force (settings), fetches day-ahead prices once a day and at start (non-
blocking, TLS checked), keeps them on the flash, and counts the monthly import peaks."""

from core.durable_file import read_text, write_text
from core.module import OK, WARN, Module
from core.tz import civil_from_days, local_day_start_utc
from services.history import store as hs
from services.tariff import peaks as pk
from services.tariff.book import PriceBook
from services.tariff.tariff import DYNAMIC, Tariff

_DAY = 86400


def _date(day):
    y, m, d = civil_from_days(day)
    return "%04d-%02d-%02d" % (y, m, d)


class _Waiting:
    """Stands in for the peaks while they are replayed: keeps the quarter hours the history closes meanwhile (and
    the ones in its RAM at start, not on the flash yet)."""

    def __init__(self, ram):
        self.recs = list(ram)

    def quarter(self, rec):
        self.recs.append(rec)


class TariffService(Module):
    """pool: socketpool; settings: has get(); bus: core.bus.Bus ("settings"); clock: core.clock.Clock; history:
    services.history.service.History or None (its quarter hours are priced and counted into peaks); ssl_factory:
    ssl.create_default_context or None; log: core.log.Log or None."""

    name = "tariff"
    poll_every_ms = 200
    PRICES = "tariff/prices.txt"
    PEAKS = "tariff/peaks.txt"
    FETCH_AFTER_MIN = 13 * 60 + 30   # local time: the day-ahead auction's results are out by ~13:00 CET
    RETRY_S = (300, 900, 1800, 3600)  # after a failed fetch; a success that lacks tomorrow waits 30 min
    INCOMPLETE_S = 1800
    BUF = 256                         # bytes per recv_into: a poll parses at most this (~100 S3 ms, bench_tariff)
    READS_PER_POLL = 1

    def __init__(self, pool, settings, bus, clock, history=None, ssl_factory=None, log=None):
        Module.__init__(self)
        self.pool = pool
        self.settings = settings
        self.bus = bus
        self.clock = clock
        self.history = history
        self.ssl_factory = ssl_factory
        self.log = log
        self.book = PriceBook(self._day_start)
        self.tariff = Tariff(settings, self.book)
        self.peaks = pk.Peaks()
        self._changes = bus.subscribe("settings", 8) if bus is not None else None
        self._req = None
        self._parser = None
        self._buf = None
        self._next_utc = 0          # wall time of the next fetch (UTC s); 0: at once
        self._fails = 0
        self.fetch_state = "idle"   # idle, fetching, ok, failed
        self.fetch_error = ""
        self.fetched_at = 0
        self.fetch_url = ""
        for k in ("fetches", "fetch_errors", "prices_taken"):
            self.counters[k] = 0

    def _note(self, level, msg, *args):
        if self.log is not None:
            self.log.log(level, msg, *args)

    # --- days ---

    def _day_start(self, day):
        rule = getattr(self.clock, "rule", None)
        if rule is not None:
            y, m, d = civil_from_days(day)
            return local_day_start_utc(rule, y, m, d)
        m = day * _DAY
        u = m - self.clock.offset_min(m) * 60
        return m - self.clock.offset_min(u) * 60

    def _local_time(self, day, minute):
        """UTC second of a local wall time (minute of the day) on a local day, also on a 23- or 25-hour day."""
        t = self._day_start(day) + minute * 60
        return t + (day * _DAY + minute * 60) - self.clock.local(t)

    def local_day(self, t):
        return self.clock.local(t) // _DAY

    def today(self):
        c = self.clock
        if c is None or not c.synced:
            return None
        return self.local_day(c.time())

    # --- lifecycle ---

    def start(self):
        self.tariff.load()
        try:
            import os
            os.mkdir("tariff")
        except OSError:
            pass
        got = read_text(self.PRICES, self._parse_book, 16384)
        if got is None:
            self.book.days = []
        read_text(self.PEAKS, self._parse_peaks, 8192)
        self._replay_start()
        if self.history is not None:
            self.history.tariff = self.tariff
        self._next_utc = 0

    def _parse_book(self, text):
        self.book.load_text(text)
        return True

    def _parse_peaks(self, text):
        self.peaks.load_text(text)
        return True

    REPLAY_READS_PER_POLL = 2   # flash reads (16 records each) of the peaks' replay per poll

    def _replay_start(self):
        """Count this month's quarter hours already on the flash into the peaks (the current month is never
        stored: the history holds its records), a few reads per poll: a whole ring read at once would hold the
        loop for seconds on the S3. Quarter hours that close meanwhile wait in a list and are counted after."""
        self._replay = None
        h = self.history
        if h is None:
            return
        last = h.store.hr.last if h.store_ok else None
        if last is not None:
            first = pk.month_first_day(pk.month_of(last[2]))
            self._replay = h.store.records(hs.HR, h.store.hr.next_seq - 1, first_day=first, ticks=True)
        self._waiting = _Waiting(h.hr)
        h.peaks = self._waiting
        if self._replay is None:
            self._replay_done()

    def _replay_step(self):
        reads = 0
        for r in self._replay:
            if r is None:
                reads += 1
                if reads >= self.REPLAY_READS_PER_POLL:
                    return
                continue
            self.peaks.quarter(r)
        self._replay_done()

    def _replay_done(self):
        self._replay = None
        for r in self._waiting.recs:
            self.peaks.quarter(r)
        self._waiting = None
        if self.history is not None:
            self.history.peaks = self.peaks

    _replay = None
    _waiting = None

    def stop(self):
        self._cancel()
        self._save_peaks()

    def _cancel(self):
        if self._req is not None:
            try:
                self._req.cancel()
            except Exception:
                pass
        self._release()

    def _save_peaks(self):
        if self.peaks.dirty:
            try:
                write_text(self.PEAKS, self.peaks.text())
                self.peaks.dirty = False
            except OSError as exc:
                self._note("error", "tariff: cannot store peaks: %s", exc)

    # --- poll ---

    def follow_settings(self):
        """Take a tariff settings change now (the poll does, and so does an answer asked right after the change)."""
        ch = self._changes.pop() if self._changes is not None else None
        changed = False
        while ch is not None:
            for k in ch:
                if k.startswith("tariff"):
                    changed = True
            ch = self._changes.pop()
        if changed:
            self.tariff.load()
            self._cancel()
            self._next_utc = 0
            self._fails = 0
            self.fetch_state = "idle"
            self.state = OK

    def poll(self, now_ms):
        self.follow_settings()
        if self._replay is not None:
            self._replay_step()
        if self.peaks.dirty:
            self._save_peaks()
        if self._req is not None:
            self._step(now_ms)
            return
        if self.tariff.mode != DYNAMIC:
            return
        clock = self.clock
        if clock is None or not clock.synced:
            return
        now = clock.time()
        if now < self._next_utc:
            return
        self._plan(now, now_ms)

    def _plan(self, now, now_ms):
        today = self.local_day(now)
        self.book.prune(today)
        local_min = (self.clock.local(now) % _DAY) // 60
        want = not self.book.complete(today) or (local_min >= self.FETCH_AFTER_MIN and
                                                  not self.book.complete(today + 1))
        if not want:
            # Both days are in: the next look is after tomorrow's publication time.
            self._next_utc = self._local_time(today, self.FETCH_AFTER_MIN)
            if self._next_utc <= now:
                self._next_utc = self._local_time(today + 1, self.FETCH_AFTER_MIN)
            return
        self._start_fetch(today, now_ms)

    def url_for(self, today):
        u = self.settings.get("tariff.priceUrl", "") or ""
        start = self._day_start(today)
        end = self._day_start(today + 2)
        return (u.replace("{start}", _date(today)).replace("{end}", _date(today + 1))
                .replace("{start_ms}", "%d000" % start).replace("{end_ms}", "%d000" % end))

    PARTS = ("services.tariff.prices", "services.ota.http_get")   # loaded while a fetch runs, let go after

    def _start_fetch(self, today, now_ms):
        from services.ota import http_get as hg   # the OTA's non-blocking client, also used here
        from services.tariff import prices

        self._prices = prices
        self._today = today
        url = self.url_for(today)
        self.fetch_url = url
        self._parser = prices.PriceParser()
        self._buf = bytearray(self.BUF)
        req = hg.HttpGet(self.pool, url, self._parser, self._buf, self.ssl_factory)
        req.reads_per_poll = self.READS_PER_POLL
        self._req = req
        self.fetch_state = "fetching"
        self.count("fetches")
        self._step(now_ms)

    def _step(self, now_ms):
        req = self._req
        PriceError = self._prices.PriceError
        try:
            running = req.poll(now_ms)
        except PriceError as exc:   # raised by the parser inside the request's write: stop at once
            req.cancel()
            self._failed(str(exc))
            return
        if running:
            return
        if req.error is not None:
            self._failed(req.error.message)
            return
        try:
            rows = self._parser.finish()
        except PriceError as exc:
            self._failed(str(exc))
            return
        self._take(rows)

    def _release(self):
        """Let the fetch's code go (it is loaded again for the next fetch, once or twice a day)."""
        self._req = None
        self._parser = None
        self._buf = None
        if self._prices is not None:
            self._prices = None
            from core.modules import unload

            unload(*self.PARTS)

    _prices = None

    def _take(self, rows):
        today = self._today
        touched = self.book.merge(rows, today, today + 1, self.local_day)
        self._release()
        self.count("prices_taken", len(rows))
        try:
            write_text(self.PRICES, self.book.text())
        except OSError as exc:
            self._note("error", "tariff: cannot store prices: %s", exc)
        now = self.clock.time()
        self.fetched_at = now
        self._fails = 0
        self.fetch_error = ""
        self.fetch_state = "ok"
        self.state = OK
        if not self.book.complete(today) or (not self.book.complete(today + 1) and
                                             (self.clock.local(now) % _DAY) // 60 >= self.FETCH_AFTER_MIN):
            self._next_utc = now + self.INCOMPLETE_S
        else:
            self._next_utc = 0   # _plan decides the next time
        self._note("info", "tariff: %d prices fetched (days %s)", len(rows), ",".join(_date(d) for d in touched))

    def _failed(self, why):
        self._release()
        self.fetch_state = "failed"
        self.fetch_error = why
        self.count("fetch_errors")
        self.state = WARN
        wait = self.RETRY_S[min(self._fails, len(self.RETRY_S) - 1)]
        self._fails += 1
        now = self.clock.time() if self.clock is not None and self.clock.synced else 0
        self._next_utc = now + wait
        self._note("warning", "tariff: price fetch failed (%s), next try in %d s; prices kept as they were",
                   why, wait)

    # --- totals for MQTT and /metrics (no flash read on most calls) ---

    def totals(self):
        """(day, (ic, ec, flags) of today, (ic, ec, flags) of this month) in micro-units, from the open day in RAM
        and the closed days of the month (read from the history once per closed day, then cached); None without a
        clock or history."""
        h = self.history
        today = self.today()
        if h is None or today is None:
            return None
        month0 = pk.month_first_day(pk.month_of(today))
        d = h._day
        # The closed days change when a day record is made or flushed, or while yesterday is still open (its last
        # quarter hour closes with the first reading after midnight).
        key = (month0, today, h.store.lr.next_seq, len(h.lr), d[0] if d is not None and d[0] != today else None,
               d[9] if d is not None and d[0] != today else None)
        if self._closed_key != key:
            ic = ec = fl = 0
            for r in h.days_between(month0, today):
                ic += r[10]
                ec += r[11]
                fl |= r[5]
            self._closed = (ic, ec, fl)
            self._closed_key = key
        day = (0, 0, 0)
        if d is not None and d[0] == today:
            r = h._day_rec(d)
            day = (r[10], r[11], r[5])
        c = self._closed
        return today, day, (c[0] + day[0], c[1] + day[1], c[2] | day[2])

    _closed_key = None
    _closed = (0, 0, 0)

    def money_values(self, metrics=False):
        """(currency, [(key, value text)]) for MQTT: the import price now (currency/kWh), today's and this month's
        import cost (to the cent), the month's quarter-hour peak (W); a value not known is left out, never 0.
        None while the tariff is off."""
        from core.money import cents_text, price_text

        t = self.tariff
        if not t.on or self.clock is None or not self.clock.synced:
            return None
        now = self.clock.time()
        q = now - now % 900
        out = []
        p = t.import_at(q, (self.clock.local(q) - q) // 60)
        if p is not None:
            out.append(("price", price_text(p)))
        tot = self.totals()
        if tot is not None:
            if tot[1][2] & hs.F_IC:
                out.append(("cost_today", cents_text(tot[1][0])))
            if tot[2][2] & hs.F_IC:
                out.append(("cost_month", cents_text(tot[2][0])))
            if metrics and tot[1][2] & hs.F_EC:
                out.append(("revenue_today", cents_text(tot[1][1])))
            if metrics and tot[2][2] & hs.F_EC:
                out.append(("revenue_month", cents_text(tot[2][1])))
        cur = self.peaks.current()
        if cur is not None and cur.q is not None:
            out.append(("peak_month", pk.power_text(cur.q[0])))
        return t.currency, out

    def describe(self):
        d = Module.describe(self)
        d["mode"] = self.tariff.mode
        d["fetch"] = self.fetch_state
        if self.fetch_error:
            d["fetch_error"] = self.fetch_error
        d["price_days"] = [_date(x[0]) for x in self.book.days]
        return d
