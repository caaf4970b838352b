"""Cooperative supervisor: polls every module, times it, contains its faults and restarts it with backoff."""

from adafruit_ticks import ticks_add, ticks_diff, ticks_less
from micropython import const

from core.module import FAILED, OK, WARN

_TICKS_MASK = const((1 << 29) - 1)   # adafruit_ticks' period: ticks wrap at 2**29 ms
_TICKS_HALF = const(1 << 28)

_PENDING = 0   # not started yet (or waiting for its backoff to pass)
_RUNNING = 1
_DEAD = 2      # gave up: restart cap reached or start() failed too often


class _Slot:
    """Book-keeping for one module."""

    def __init__(self, module):
        self.module = module
        self.phase = _PENDING
        self.retry_at = None
        self.faults = 0          # consecutive faults; reset after a quiet stretch of running
        self.total_faults = 0
        self.restarts = 0
        self.last_error = None
        self.worst_ms = 0
        self.slow_polls = 0
        self.warned_ms = 0       # the slowest poll written to the log
        self.ok_since = None
        self.essential = False   # never given up (the HTTP API: the way a user repairs the device)
        self.last = False        # kept at the end of the poll order
        self.paced = hasattr(module, "poll_every_ms")   # read at each poll: a module may change it as it works
        self.due_at = None       # ticks before which a module with its own interval is not polled again


class Supervisor:
    """Runs modules round-robin; ticks_ms, watchdog, gc_collect and mem_alloc are injected so tests can step time.

    Garbage: with mem_alloc (gc.mem_alloc), the supervisor collects at the end of a cycle, between two modules'
    work, once gc_alloc_budget bytes were allocated since the last collection (looked at every gc_check_every
    cycles: gc.mem_alloc walks the allocation table). A collection walks every live object (70-220 ms on an
    ESP32-S3 with PSRAM), so it must not run every cycle; an idle firmware that allocates nothing never collects.
    gc_alloc_budget = 0 leaves collecting to CircuitPython (when an allocation finds no room). Without mem_alloc
    (tests), it collects every gc_every cycles."""

    warn_poll_ms = 50        # a poll slower than this is counted and warned about
    backoff_first_ms = 1000  # first restart delay after a fault; doubles each time
    backoff_max_ms = 300000
    max_restarts = 20        # consecutive faults before a module is given up (FAILED)
    healthy_after_ms = 60000  # running this long without fault forgives earlier faults
    essential_backoff_max_ms = 60000  # an essential module past the restart cap retries at least this often
    gc_every = 1             # without mem_alloc: collect after every n-th cycle, at one fixed point
    gc_alloc_budget = 131072  # with mem_alloc: collect once this many bytes were allocated since the last one
    gc_check_every = 8       # cycles between looks at the heap
    cycle_budget_ms = 50     # a cycle that has worked this long ends after the current poll; the modules not yet
    #                          polled go first in the next one (the loop's sleep, WiFi and USB get their turn)

    def __init__(self, ticks_ms, watchdog=None, gc_collect=None, log=None, mem_alloc=None):
        self._ticks_ms = ticks_ms
        self._watchdog = watchdog
        self._gc_collect = gc_collect
        self._mem_alloc = mem_alloc
        self._alloc_after_gc = None
        self.collections = 0
        self.cut_cycles = 0      # cycles ended by cycle_budget_ms before every module had its turn
        self._resume = 0         # where the next cycle starts in the poll order
        self._log = log
        self._slots = []
        self.cycles = 0
        self.worst_cycle_ms = 0
        self.running = False

    def add(self, module, essential=False, last=False):
        """Register a module; it is started on the first cycle. An essential one is never given up: past the
        restart cap it keeps retrying, backing off to essential_backoff_max_ms. A last one stays at the end of the
        poll order while others are added (the HTTP API: its answers see what this cycle's modules produced)."""
        slot = _Slot(module)
        slot.essential = essential
        slot.last = last
        at = len(self._slots)
        while at > 0 and self._slots[at - 1].last and not last:
            at -= 1
        self._slots.insert(at, slot)
        return module

    def busy(self):
        """True when a running module has work in flight (Module.busy)."""
        for slot in self._slots:
            if slot.phase == _RUNNING and slot.module.busy():
                return True
        return False

    def mid_round(self):
        """True when the last cycle was cut by its budget: some modules still wait for their turn in this round."""
        return self._resume != 0

    def modules(self):
        """The registered modules in poll order."""
        return [s.module for s in self._slots]

    def forget(self, modules):
        """Unregister modules (a feature whose wiring failed half-way: nothing half-wired is polled)."""
        self._slots = [s for s in self._slots if s.module not in modules]

    def _note(self, level, msg, *args):
        if self._log is not None:
            self._log.log(level, msg, *args)

    def _fault(self, slot, now, where, exc):
        """Count a fault, stop the module and schedule its restart (or give it up)."""
        mod = slot.module
        slot.faults += 1
        slot.total_faults += 1
        slot.last_error = "%s: %s %s" % (where, type(exc).__name__, exc)
        slot.ok_since = None
        try:
            mod.stop()
        except Exception:  # stop() must not raise, but a broken module must not take us down
            pass
        if slot.faults > self.max_restarts and not slot.essential:
            slot.phase = _DEAD
            mod.state = FAILED
            self._note("error", "%s failed for good after %d faults: %s", mod.name, slot.faults, slot.last_error)
            return
        cap = self.essential_backoff_max_ms if slot.essential else self.backoff_max_ms
        delay = self.backoff_first_ms << (slot.faults - 1) if slot.faults < 20 else cap
        if delay > cap:
            delay = cap
        if slot.essential and slot.faults == self.max_restarts + 1:
            self._note("error", "%s keeps failing (%d faults): it is essential, retrying every %d s",
                       mod.name, slot.faults, cap // 1000)
        slot.phase = _PENDING
        slot.due_at = None
        slot.retry_at = ticks_add(now, delay)
        mod.state = FAILED if where == "start" else WARN
        self._note("warning", "%s %s fault (%d), retry in %d ms: %s", mod.name, where, slot.faults, delay,
                   slot.last_error)

    def step(self):
        """One cycle: read the clock once, start or poll each module (from where a cut cycle stopped, until the
        cycle's budget is spent), feed the watchdog, collect garbage."""
        now = self._ticks_ms()
        ticks = self._ticks_ms
        budget = self.cycle_budget_ms
        slots = self._slots
        n = len(slots)
        i = self._resume if self._resume < n else 0
        self._resume = 0
        while i < n:
            slot = slots[i]
            i += 1
            # The tick arithmetic of adafruit_ticks inline: this runs for every module in every cycle, and two
            # function calls per module were a third of an idle cycle on the S3.
            due = slot.due_at
            if due is not None and (now - due) & _TICKS_MASK >= _TICKS_HALF:
                continue   # polls on its own interval and is not due
            mod = slot.module
            if slot.phase != _RUNNING:
                if slot.phase == _DEAD or (slot.retry_at is not None and ticks_less(now, slot.retry_at)):
                    continue
                try:
                    mod.start()
                except Exception as exc:
                    self._fault(slot, now, "start", exc)
                    continue
                if slot.retry_at is not None:
                    slot.restarts += 1
                slot.phase = _RUNNING
                slot.ok_since = now
                if mod.state != WARN:
                    mod.state = OK
            if slot.paced:
                every = mod.poll_every_ms
                slot.due_at = (now + every) & _TICKS_MASK if every else None
            t0 = ticks()
            t1 = t0
            try:
                mod.poll(now)
            except Exception as exc:
                self._fault(slot, now, "poll", exc)
                continue
            finally:
                t1 = ticks()
                spent = (t1 - t0) & _TICKS_MASK
                if spent > self.warn_poll_ms:
                    slot.slow_polls += 1
                    if spent > slot.warned_ms + (slot.warned_ms >> 2):
                        # Counted every time, written only for a new worst by a quarter: a flood that slows the
                        # HTTP poll now and then must not fill the persistent log (issue 26).
                        slot.warned_ms = spent
                        self._note("warning", "%s poll took %d ms", mod.name, spent)
                if spent > slot.worst_ms:
                    slot.worst_ms = spent
            if slot.faults and slot.ok_since is not None and ticks_diff(now, slot.ok_since) >= self.healthy_after_ms:
                slot.faults = 0
                if mod.state == WARN:
                    mod.state = OK
            if i < n and (t1 - now) & _TICKS_MASK >= budget:
                self._resume = i   # the rest of this round goes first in the next cycle
                self.cut_cycles += 1
                break
        if self._watchdog is not None:
            self._watchdog.feed()
        self.cycles += 1
        if self._gc_collect is not None:
            self._collect_garbage((ticks() - now) & _TICKS_MASK >= budget)
        spent = (ticks() - now) & _TICKS_MASK
        if spent > self.worst_cycle_ms:
            self.worst_cycle_ms = spent
        return now

    def _collect_garbage(self, busy=False):
        """Collect now when the heap's budget of new allocations is spent (or every gc_every cycles without
        mem_alloc); the cycle's end is the quiet moment: no module is half-way through its work. After a busy
        cycle (its budget spent) the collection waits for a lighter one, unless twice the budget was allocated."""
        if self._mem_alloc is None:
            if self.cycles % self.gc_every == 0:
                self._gc_collect()
                self.collections += 1
            return
        if not self.gc_alloc_budget or self.cycles % self.gc_check_every:
            return
        used = self._mem_alloc()
        if self._alloc_after_gc is None or used < self._alloc_after_gc:
            self._alloc_after_gc = used    # first look, or CircuitPython collected by itself meanwhile
            return
        grown = used - self._alloc_after_gc
        if grown >= self.gc_alloc_budget and (not busy or grown >= 2 * self.gc_alloc_budget):
            self._gc_collect()
            self.collections += 1
            self._alloc_after_gc = self._mem_alloc()

    def stop_all(self):
        """Stop every module in reverse order (services flush here); never raises."""
        for slot in reversed(self._slots):
            if slot.phase == _RUNNING:
                try:
                    slot.module.stop()
                except Exception as exc:
                    self._note("error", "%s stop failed: %s", slot.module.name, exc)
                slot.phase = _PENDING
                slot.retry_at = None
                slot.due_at = None

    def state(self):
        """Combined state: FAILED if any module failed, WARN if any warns, else OK."""
        worst = OK
        for slot in self._slots:
            st = slot.module.state
            if st == FAILED:
                return FAILED
            if st == WARN:
                worst = WARN
        return worst

    def describe(self):
        """Per-module health and timing for /system/info."""
        mods = {}
        for slot in self._slots:
            d = {
                "state": slot.module.state,
                "worst_poll_ms": slot.worst_ms,
                "slow_polls": slot.slow_polls,
                "faults": slot.total_faults,
                "restarts": slot.restarts,
            }
            if slot.last_error:
                d["last_error"] = slot.last_error
            mods[slot.module.name] = d
        return {"cycles": self.cycles, "worst_cycle_ms": self.worst_cycle_ms, "collections": self.collections,
                "cut_cycles": self.cut_cycles,
                "state": self.state(), "modules": mods}

    def worst_poll_ms(self, name):
        """Worst poll time of the named module (ms)."""
        for slot in self._slots:
            if slot.module.name == name:
                return slot.worst_ms
        return None
