"""The outage journal's module: at each start, when the device went down, when it came back, and why."""

from adafruit_ticks import ticks_diff

from core.module import WARN, Module
from core.tz import civil_from_days
from services.outages import journal as oj

# CircuitPython's microcontroller.ResetReason names -> the journal's reasons. SOFTWARE and the orderly restarts are
# refined by the note the firmware leaves before it resets (note_restart); a crash ends in WATCHDOG (RESET mode).
_RESET_REASONS = (("POWER_ON", "power"), ("BROWNOUT", "brownout"), ("WATCHDOG", "watchdog"),
                  ("RESET_PIN", "reset_pin"), ("SOFTWARE", "software"), ("DEEP_SLEEP_ALARM", "software"))
# Lifecycle's restart reasons -> the journal's.
_NOTES = (("api", "restart"), ("ota", "ota"), ("factory_reset", "button"), ("button", "button"))


def reason_of_reset(name):
    """The journal reason of a reset reason name ("unknown" for UNKNOWN, RESCUE_DEBUG and anything new)."""
    for reset, reason in _RESET_REASONS:
        if reset == name:
            return reason
    return "unknown"


def reason_of_note(why):
    for note, reason in _NOTES:
        if note == why:
            return reason
    return "software"


def utc_text(ts, with_date=True):
    """YYYY-MM-DD HH:MM UTC (or HH:MM) of epoch seconds; "unknown" for 0."""
    if not ts:
        return "unknown"
    y, m, d = civil_from_days(ts // 86400)
    hm = "%02d:%02d" % (ts % 86400 // 3600, ts % 3600 // 60)
    return ("%04d-%02d-%02d %s UTC" % (y, m, d, hm)) if with_date else hm + " UTC"


def span_text(seconds):
    """A duration in words: 45 s, 12 min, 1 h 28 min, 3 d 4 h."""
    if seconds < 60:
        return "%d s" % seconds
    if seconds < 3600:
        return "%d min" % (seconds // 60)
    if seconds < 86400:
        return "%d h %d min" % (seconds // 3600, seconds % 3600 // 60)
    return "%d d %d h" % (seconds // 86400, seconds % 86400 // 3600)


class Outages(Module):
    """journal (OutageJournal), clock (core.clock.Clock), reset_reason (a ResetReason name), last_seen: callable
    giving the last UTC second the device is known to have been up before this start (the history's newest
    record; 0 when unknown), ota: the OTA service or None (a rollback names its reason), log."""

    name = "outages"
    poll_every_ms = 1000     # its journal changes at boot and on the minute

    def __init__(self, journal, clock, reset_reason, last_seen=None, ota=None, log=None):
        Module.__init__(self)
        self.journal = journal
        self._clock = clock
        self.reset_reason = reset_reason
        self._last_seen = last_seen
        self._ota = ota
        self._log = log
        self._started_ms = None
        self._up_known = False
        self.current = None          # [down, up, reason, detail] of this start

    def _note(self, level, msg, *args):
        if self._log is not None:
            self._log.log(level, msg, *args)

    def start(self):
        j = self.journal
        try:
            j.open()
        except OSError as exc:
            self.state = WARN
            self._note("error", "outages: journal unavailable: %s", exc)
            return
        newest = j.newest
        seen = self._last_seen() if self._last_seen is not None else 0
        if newest is not None and newest[4] & oj.F_PENDING:
            # The firmware left a note before an orderly restart: this start completes that record.
            down = newest[1] or seen
            reason = oj.REASONS[newest[3]]
            detail = newest[5]
            replace = True
        else:
            down = seen
            if newest is not None and newest[2] > down:
                down = newest[2]          # up at least since its last start
            reason = reason_of_reset(self.reset_reason)
            if newest is None and not seen:
                # No journal and no history: the device's first start ever (or after both were wiped) ends no
                # outage, whatever reset reason the chip reports.
                reason = "first_start"
            detail = self.reset_reason[:12]
            replace = False
        if self._ota is not None and getattr(self._ota, "last_error", "") == "rolled_back":
            reason = "rollback"
        self.current = [down, 0, reason, detail]
        self._write(replace)

    def _write(self, replace):
        down, up, reason, detail = self.current
        try:
            self.journal.put(down, up, oj.reason_code(reason), 0, detail, replace=replace)
        except OSError as exc:
            self.state = WARN
            self.count("write_errors")
            self._note("error", "outages: cannot write the journal: %s", exc)

    def poll(self, now_ms):
        if self._started_ms is None:
            self._started_ms = now_ms
        if self._up_known or self.current is None or self._clock is None or not self._clock.synced:
            return
        # The start's wall time: the clock's now minus the time since start (the sync comes within minutes, far
        # inside what ticks_diff can tell).
        up = self._clock.time(now_ms) - ticks_diff(now_ms, self._started_ms) // 1000
        self.current[1] = up
        self._up_known = True
        self._write(True)
        down = self.current[0]
        if down and up >= down:
            self._note("info", "outage: down %s, up %s (%s), reason %s", utc_text(down),
                       utc_text(up, up // 86400 != down // 86400), span_text(up - down), self.current[2])
        else:
            self._note("info", "outage: down unknown, up %s, reason %s", utc_text(up), self.current[2])

    def note_restart(self, why):
        """Before an orderly restart (Lifecycle): a pending record the next start completes with its up time."""
        now = self._clock.time() if self._clock is not None and self._clock.synced else 0
        try:
            self.journal.put(now, 0, oj.reason_code(reason_of_note(why)), oj.F_PENDING, why[:12])
        except OSError as exc:
            self.count("write_errors")
            self._note("error", "outages: cannot note the restart: %s", exc)

    def describe(self):
        d = Module.describe(self)
        if self.current is not None:
            d["last_reason"] = self.current[2]
        return d
