"""Orderly restarts: reboot on request, factory reset on the 10 s button hold, flush on a short press."""

from adafruit_ticks import ticks_add, ticks_less

from core.durable_file import remove_all
from core.module import Module


class Lifecycle(Module):
    """bus, led (StatusLed), reset (callable that restarts the chip), flushables (objects with flush()),
    wipe_paths (files removed by a factory reset: settings, tokens, CA certificate)."""

    name = "lifecycle"
    poll_every_ms = 100     # restarts and resets are human-paced
    reboot_delay_ms = 500      # lets the HTTP answer leave before the restart
    reset_delay_ms = 2000      # keeps the LED solid red long enough to be seen

    def __init__(self, bus, led, reset, flushables=(), wipe_paths=(), log=None):
        Module.__init__(self)
        self._bus = bus
        self._events = bus.subscribe("event", 8)
        self._led = led
        self._reset = reset
        self.flushables = list(flushables)
        self.wipe_paths = list(wipe_paths)
        self._log = log
        self._restart_at = None
        self.pending = None   # "reboot" or "factory_reset" while a restart is scheduled
        self.before_restart = []   # callables(reason) told before an orderly restart (the outage journal)
        self._now = 0

    def flush_all(self, reason):
        """Write every buffered record to the flash now; a failing flush does not stop the others."""
        for f in self.flushables:
            try:
                f.flush()
            except Exception as exc:
                self.count("flush_errors")
                if self._log is not None:
                    self._log.error("flush (%s) failed: %s", reason, exc)
        self.count("flushes")

    def _tell(self, reason):
        for fn in self.before_restart:
            try:
                fn(reason)
            except Exception as exc:   # a note that fails must not stop the restart
                self.count("notify_errors")
                if self._log is not None:
                    self._log.error("restart note failed: %s", exc)

    def request_reboot(self, reason="api"):
        """Flush now and restart shortly (settings and history are kept)."""
        if self.pending:
            return
        self.flush_all(reason)
        self._tell(reason)
        self.pending = "reboot"
        self._restart_at = ticks_add(self._now, self.reboot_delay_ms)
        if self._log is not None:
            self._log.info("restart requested (%s)", reason)

    def factory_reset(self):
        """Reset pending: solid red, wipe settings, tokens and WiFi, keep history, restart into setup mode."""
        if self.pending == "factory_reset":
            return
        self._led.set("RESET_PENDING")
        self.flush_all("factory reset")
        self._tell("factory_reset")
        for path in self.wipe_paths:
            remove_all(path)  # with the copies a write may have left (core/durable_file.py)
        self.pending = "factory_reset"
        self._restart_at = ticks_add(self._now, self.reset_delay_ms)
        if self._log is not None:
            self._log.warning("factory reset: settings wiped")

    def poll(self, now_ms):
        self._now = now_ms
        ev = self._events.pop()
        while ev is not None:
            if ev == ("button", "short"):
                self.flush_all("button")
                self._bus.publish("event", ("ble", "open_window"))
            elif ev == ("button", "reset"):
                self.factory_reset()
            ev = self._events.pop()
        if self._restart_at is not None and not ticks_less(now_ms, self._restart_at):
            self._restart_at = None
            self._reset()

    def describe(self):
        d = Module.describe(self)
        d["pending"] = self.pending
        return d
