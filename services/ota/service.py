"""Updates over the network: check a manifest, stage verified files, hand the switch to boot.py, prove health.

Check, install, upload and trial are one state machine (one phase, one 4 KB buffer, one journal) whose steps must
exclude each other: one class. Resident are its timers, the API's view and the cleanup; the steps of the work are
services/ota/work.py's methods, put on the class while the parts loaded on demand are (manifest, signature, http_get,
stream, upload, work), taken off when they are let go.
"""

import json
import os

from adafruit_ticks import ticks_add, ticks_diff, ticks_less

from core.elapsed import fresh
from core.files import exists, remove_quiet
from core.module import WARN, Module
from core.modules import unload

# The parts a check, an install or an upload needs (about 25 KB of heap on CircuitPython, `make bench-device`), and
# the service's own work (services/ota/work.py: the check, the install, the trial, the upload; its methods are put on
# OtaService while loaded): load_parts() imports them when work starts (an explicit import: one inside __getattr__
# overflows small C stacks), release_parts() lets them go when the service is idle again.
mf = sg = hg = st = upl = None
PARTS = ("services.ota.work", "services.ota.manifest", "services.ota.signature", "services.ota.ed25519",
         "services.ota.http_get", "services.ota.stream", "services.ota.upload")   # let go together: they import each
#                                                                                    other


def load_parts():
    """Import the check/install/upload code (once until released) and put the work's methods on OtaService."""
    global mf, sg, hg, st, upl
    if mf is None:
        from services.ota import http_get, manifest, signature, stream, upload, work

        for name in work.METHODS:
            setattr(OtaService, name, getattr(work.OtaWork, name))
        mf, sg, hg, st, upl = manifest, signature, http_get, stream, upload


# One part per poll, each after what it imports: an import costs the S3 a collection of the whole heap besides the
# load (~100-300 S3 ms each, bench/bench_ondemand.py), all seven in one poll over a second.
LOAD_ORDER = ("services.ota.manifest", "services.ota.ed25519", "services.ota.signature", "services.ota.stream",
              "services.ota.http_get", "services.ota.upload", "services.ota.work")
_loading = False    # load_step() imported some parts: release_parts() lets them go even if not all came in


def load_step():
    """Import the next part not imported yet and return False; once all are in, make them usable (load_parts) and
    return True."""
    global _loading
    if mf is not None:
        return True
    import sys

    for name in LOAD_ORDER:
        if name not in sys.modules:
            _loading = True
            __import__(name)
            return False
    load_parts()
    return True


def release_parts():
    """Let the check/install/upload code go (the work's methods off OtaService first); True when it was loaded."""
    global mf, sg, hg, st, upl, _loading
    if mf is None:
        if _loading:      # some came in one per poll and the work they were for went away
            _loading = False
            unload(*PARTS)
        return False
    from services.ota.work import METHODS

    for name in METHODS:
        delattr(OtaService, name)
    mf = sg = hg = st = upl = None
    _loading = False
    unload(*PARTS)
    return True

# The journal format is boot.py's (the anchor that performs the switch); docs/ota.md.
JOURNAL = "ota/journal"
STAGE = "ota/stage/"
PREV = "ota/prev/"
RESULT = "ota/result"
BAD = "ota/bad"
FLOOR = "ota/floor"     # the highest min_version of a release installed here (only ever raised; docs/ota.md)

MEMORY_READS_PER_POLL = 8   # recv_into calls per poll into the manifest's memory (files keep HttpGet's 2: flash)

IDLE = "idle"
CHECKING = "checking"
VERIFYING = "verifying"
UPLOADING = "uploading"
# The largest archive (None: manifest, signature and every file with its tar header and padding; max_upload_bytes).
MAX_UPLOAD_BYTES = None
PLANNING = "planning"
DOWNLOADING = "downloading"
RESTARTING = "restarting"
TRIAL = "trial"


def max_upload_bytes():
    """The largest archive accepted: manifest, signature and every file with its tar header and padding."""
    if MAX_UPLOAD_BYTES is not None:
        return MAX_UPLOAD_BYTES
    return mf.MAX_MANIFEST_BYTES + mf.MAX_TOTAL_BYTES + 1024 * (mf.MAX_FILES + 3)


def _read_json(path):
    try:
        with open(path) as f:
            return json.loads(f.read())
    except (OSError, ValueError):
        return None


def _expired(now, stamp, ms):
    """True when stamp is ms or more in the past; a stamp so old that ticks_diff wrapped negative is expired too."""
    age = ticks_diff(now, stamp)
    return age < 0 or age >= ms


def _valid_version(manifest, text):
    try:
        manifest.parse_version(text)
        return True
    except ValueError:
        return False


def _is_dir(path):
    try:
        return os.stat(path)[0] & 0x4000 != 0
    except OSError:
        return False


class OtaService(Module):
    """pool (socketpool), settings, version (running), clock (core.clock.Clock or None), led (StatusLed),
    flush(reason) and restart(reason) (the lifecycle's), health() -> True while the firmware serves, boot (the
    boot module: its journal functions), ssl_factory, rand(n) -> 0..n-1, log."""

    name = "ota"
    idle_every_ms = 250           # polled this often while idle (its timers); every cycle while it works
    first_check_ms = 60000        # the first check after a start (the network is up by then)
    stale_ms = 600000             # GET ota/check starts a new check when the last is older than this
    min_check_gap_ms = 300000     # at most one check (a full signature check) per 5 min, whoever asks (issue 26)
    retry_ms = 3600000            # a failed check or install is tried again after this long
    max_attempts = 3              # installs of one version before waiting for the next night
    healthy_after_ms = 180000     # a new version that served this long is kept
    night_start_min = 60          # the nightly check: a random minute of 01:00..04:59 local time
    night_len_min = 240
    space_margin = 65536          # free space kept beyond the staged files (FAT, journal, logs)
    hash_steps_per_poll = 4
    remove_per_poll = 8

    def __init__(self, pool, settings, version, boot, clock=None, led=None, flush=None, restart=None, health=None,
                 ssl_factory=None, rand=None, log=None):
        Module.__init__(self)
        self._pool = pool
        self._settings = settings
        self.version = version
        self._boot = boot
        self._clock = clock
        self._led = led
        self._flush = flush
        self._restart = restart
        self._health = health
        self._ssl_factory = ssl_factory
        self._rand = rand
        self._log = log
        self._buf = bytearray(4096)
        self.phase = IDLE
        self.available = None       # the validated manifest of a newer version, or None
        self.server_version = ""    # what the server offers (also when it is not newer)
        self.last_checked = 0       # Unix seconds of the last completed check (0: never, or no clock)
        self._checked_at = None     # ticks of the last check's start, then of its end (staleness counts from there)
        self._started_at = None     # ticks of the last check's start while younger than min_check_gap_ms, else None
        self.message = ""
        self.updated = ""           # "Updated from A to B" once an update proved healthy (kept until a restart)
        self.last_error = ""        # reason code of the last failure ("" after a success)
        self.bad = []               # versions boot.py rolled back
        self.floor = ""             # no version below this is installed (the highest min_version installed here)
        self._source = None         # ota.url of the last check: an offer is cleared when the setting changes
        self._keys = None
        self._manifest_data = None
        self._sig_sink = None
        self._sig_check = None
        self.verify_steps_per_poll = 1
        self._upload = None
        self._upload_refusal = None  # (status, answer) of the last refused upload, until a new one starts
        self.upload_idle_ms = 60000  # an upload without a piece for this long is dropped
        self.trial = None           # the journal while a new version proves itself
        self._req = None
        self._sink = None
        self._install_after_check = False
        self._auto = False
        self._attempts = {}
        self._retry_at = None
        self._check_at = None
        self._healthy_since = None
        self._cleanup = []
        self._plan = None
        self._hasher = None
        self._changed = None
        self._new = None
        self._gone = None           # a module's other form the switch sets aside (boot.py's journal "gone")
        self._paths = None
        self._writer = None
        self._dl_path = None
        self.progress = [0, 0]
        self._night_day = None
        self._night_min = None
        self._now = 0
        self.keep_parts = False     # True keeps the parts loaded while idle (a test that tunes their classes)
        self.mpy_version = None     # the .mpy version this interpreter imports (start(): sys.implementation._mpy)
        self._source_form = None    # a checked format 1 manifest while its compiled form is fetched
        self._compiled_url = None
        self._check_t = None
        self._parts_for_check = False   # load_step() is bringing the parts in for a check that is due

    # ------------------------------------------------------------------ lifecycle

    def start(self):
        from services.ota import manifest   # the floor's version check: only this part, let go below

        self.mpy_version = manifest.running_mpy()
        self.bad = _read_json(BAD) or []
        floor = _read_json(FLOOR)
        if floor is None:
            floor = _read_json(FLOOR + ".tmp")   # a cut between removing the old floor and the rename
        self.floor = floor if isinstance(floor, str) and _valid_version(manifest, floor) else ""
        if mf is None:
            unload("services.ota.manifest", collect=False)
        result = _read_json(RESULT)
        if isinstance(result, dict) and result.get("event") == "rolled_back":
            self.message = ("Update to %s was rolled back to %s: it did not prove healthy within %s boots"
                            % (result.get("version"), result.get("back_to"), result.get("boots")))
            self.last_error = "rolled_back"
            self.state = WARN
            self._note("error", "ota: %s", self.message)
        remove_quiet(RESULT)
        if exists("ota/boot_error"):
            try:
                with open("ota/boot_error") as f:
                    self._note("error", "ota: boot.py failed during the update: %s", f.read())
            except OSError:
                pass
            remove_quiet("ota/boot_error")
        journal = self._boot.read_journal(self._boot.DriveFs())
        if journal is not None and journal.get("phase") == "trial":
            self.trial = journal
            self.phase = TRIAL
            if self._led is not None:
                self._led.set("OTA_ACTIVE")
            self._note("info", "ota: running %s on trial (boot %s of %s; the update to %s)", self.version,
                       journal.get("boots"), self._boot.MAX_TRIAL_BOOTS, journal.get("to"))
        elif journal is None:
            self._queue_cleanup()
        self._check_at = None

    def stop(self):
        self._cancel_request()
        if self._upload is not None and self._upload.reader is not None:
            self._upload.reader.abort()
        if self._writer is not None:
            self._writer.abort()
            self._writer = None

    def sockets_held(self):
        """1 while a download or check holds its socket (core/sockbudget.py)."""
        req = self._req
        return 0 if req is None else req.sockets_held()

    def _cancel_request(self):
        if self._req is not None:
            self._req.cancel()
            self._req = None

    def _note(self, level, msg, *args):
        if self._log is not None:
            getattr(self._log, level)(msg, *args)

    def _url(self):
        return self._settings.get("ota.url", "") or ""

    def server_configured(self):
        """Whether ota.url names a real update server (not empty, not the shipped .invalid placeholder)."""
        parts = self._url().split("/")
        return len(parts) > 2 and not parts[2].split(":")[0].endswith(".invalid")

    # ------------------------------------------------------------------ the API's view

    def check_result(self, now=None):
        """The GET /ota/check document (aio-wattwaechter's OtaData, plus state and message); starts a check in the
        background when the last one is older than stale_ms."""
        now = self._now if now is None else now
        self._follow_url()
        if self.phase == IDLE and self._url() and (self._checked_at is None
                                                    or _expired(now, self._checked_at, self.stale_ms)):
            self.request_check()
        m = self.available
        data = {
            "update_available": m is not None,
            "version": m["version"] if m is not None else (self.server_version or self.version),
            "installed_version": self.version,
            "tag": ("v" + m["version"]) if m is not None else "",
            "release_date": m["release_date"] if m is not None else "",
            "release_note_de": m["notes_de"] if m is not None else "",
            "release_note_en": m["notes_en"] if m is not None else "",
            "last_checked": self.last_checked,
            # How old the answer is (s since the last check ended; None: never), and when the next check may run:
            # a "check now" within min_check_gap_ms of the last one gets this cached answer with its age.
            "checked_age_s": (ticks_diff(now, self._checked_at) // 1000 if self._checked_at is not None and
                              fresh(self._checked_at, now, 1 << 28) else None),
            "next_check_in_s": (self.min_check_gap_ms - ticks_diff(now, self._started_at)) // 1000 + 1
            if self._started_at is not None and fresh(self._started_at, now, self.min_check_gap_ms) else 0,
            "url": "",
            "md5": "",
            "state": self.phase,
            "message": self.message,
            "error": self.last_error,
            "progress": {"bytes": self.progress[0], "total": self.progress[1]},
            "auto_ota": bool(self._settings.get("autoOta", True)),
            "server_configured": self.server_configured(),
            "rolled_back": list(self.bad),
        }
        return {"ok": True, "data": data}

    def _follow_url(self):
        """A changed ota.url drops what the old server offered (and a check still talking to it) and checks the new
        one at once: an offer is only ever installed from the server it came from."""
        if self._source is None or self._url() == self._source or self._upload is not None:
            return
        if self.phase not in (IDLE, CHECKING, VERIFYING):
            return   # an install already under way finishes from the manifest it verified
        self._cancel_request()
        self._source = None
        self._source_form = None
        self._sig_check = None
        self._manifest_data = None
        self._sink = self._sig_sink = None
        self.available = None
        self.server_version = ""
        self.phase = IDLE
        self._retry_at = None
        self.message = "ota.url changed: checking the new update server"
        self._note("info", "ota: %s", self.message)
        self.request_check()

    def start_update(self):
        """POST /ota/start: install the update the last check found; the answer aio-wattwaechter reads."""
        self._follow_url()
        # "code" is stable (clients translate it), "message" is English for people; version names the release.
        if self.phase in (PLANNING, DOWNLOADING, RESTARTING):
            return {"ok": True, "update_available": True, "code": "already_running", "version": self._offered(),
                    "message": "Update already running: " + self.message}
        blocked = self._install_blocker()
        if blocked is not None:
            if self.available is None and self.phase == IDLE:
                self.request_check()
            return {"ok": False, "update_available": self.available is not None, "code": blocked[0],
                    "version": self._offered(), "message": blocked[1]}
        self._begin_install(self._now, auto=False)   # the parts come in over the next polls (load_step)
        return {"ok": True, "update_available": True, "code": "installing", "version": self._offered(),
                "message": "Installing %s: the device restarts several times within 2 to 3 minutes"
                           % self.available["version"]}

    def _offered(self):
        return self.available["version"] if self.available is not None else ""

    def _install_blocker(self):
        """(code, message) of what keeps an install from starting now, or None."""
        if self.phase == TRIAL:
            return "trial", "The last update is still proving itself; try again in a few minutes"
        if self._upload is not None:
            return "busy_upload", "Busy: a release is being uploaded"
        if self.available is None:
            return "no_update", "No update available" + (" (" + self.message + ")" if self.message else "")
        if self.phase != IDLE:
            return "busy", "Busy: " + self.phase
        if not exists("code.py"):
            return "no_app", ("The application is not on the drive (host runtime without --app-on-drive): nothing "
                              "to replace")
        return None

    def request_check(self, install=False, auto=False):
        """Check at the next poll, or once min_check_gap_ms have passed since the last one started (one check per
        5 minutes whoever asks: the API, a changed ota.url, the night); with install, an update found is installed."""
        if self._started_at is not None and self._check_at is None:
            self.count("checks_deferred")
        self._check_at = self._now
        self._install_after_check = install
        self._auto = auto

    # ------------------------------------------------------------------ the loop

    def poll(self, now_ms):
        self._poll(now_ms)
        busy = self.phase != IDLE or self._upload is not None or self._cleanup or self._parts_for_check
        self.poll_every_ms = 0 if busy else self.idle_every_ms

    def _poll(self, now_ms):
        self._now = now_ms
        if (self.phase != IDLE or self._upload is not None) and not load_step():
            return     # one part per poll until all are in (the install, a trial)
        if self._cleanup:
            self._cleanup_step()
            return
        if self.phase == TRIAL:
            self._trial_step(now_ms)
            return
        if self._upload is not None:
            self._upload_step(now_ms)
            return
        if self.phase == IDLE or self.phase == CHECKING or self.phase == VERIFYING:
            self._follow_url()
        if self.phase == CHECKING:
            self._check_step(now_ms)
        elif self.phase == VERIFYING:
            self._verify_step(now_ms)
        elif self.phase == PLANNING:
            self._plan_step(now_ms)
        elif self.phase == DOWNLOADING:
            self._download_step(now_ms)
        elif self.phase == IDLE:
            self._schedule(now_ms)
            if (mf is not None or _loading) and self.phase == IDLE and self._req is None and self._upload is None \
                    and not self.keep_parts and not self._parts_for_check:
                self._release_parts()   # once per piece of work, not every idle poll

    def _release_parts(self):
        """Let the check/install/upload code go while nothing uses it (the next check imports it again)."""
        self._keys = None
        self._sink = self._sig_sink = None
        self._writer = self._hasher = None
        release_parts()
        self.count("parts_released")

    def _schedule(self, now):
        if self._checked_at is None and self._check_at is None:
            self._check_at = ticks_add(now, self.first_check_ms)
        if self._night_due():
            auto = bool(self._settings.get("autoOta", True))
            self._note("info", "ota: nightly check (autoOta %s)", "on" if auto else "off")
            self.request_check(install=auto, auto=True)
            self._attempts = {}
        if self._retry_at is not None and not ticks_less(now, self._retry_at):
            self._retry_at = None
            self.request_check(install=self._install_after_check, auto=self._auto)
        if self._started_at is not None and not fresh(self._started_at, now, self.min_check_gap_ms):
            self._started_at = None     # dropped once old: the tick wrap never makes it recent again
        if self._check_at is not None and not ticks_less(now, self._check_at) and self._started_at is None:
            self._parts_for_check = self.server_configured() and not load_step()
            if self._parts_for_check:
                return     # the check's parts come in one per poll; it starts once all are in
            self._check_at = None
            self._start_check(now)

    def _night_due(self):
        """True once per local day at the chosen random minute of the night window (needs a synced clock)."""
        clock = self._clock
        if clock is None or not clock.synced:
            return False
        utc = clock.time()
        local = clock.local(utc)
        day, minute = local // 86400, (local % 86400) // 60
        if self._night_min is None:
            self._night_min = self.night_start_min + (self._rand(self.night_len_min) if self._rand else 0)
        if self._night_day == day:
            return False
        if self._night_min <= minute < self.night_start_min + self.night_len_min:
            self._night_day = day
            self._night_min = self.night_start_min + (self._rand(self.night_len_min) if self._rand else 0)
            return True
        return False

    # ------------------------------------------------------------------ check

    def _start_check(self, now):
        url = self._url()
        self._checked_at = now
        self._started_at = now
        if not url:
            self.message = "Update checks are off (ota.url is empty)"
            return
        if url.split("/")[2].split(":")[0].endswith(".invalid"):  # the shipped placeholder: not a failure
            self.message = "No update server configured (ota.url is the placeholder %s)" % url
            return
        self._source = url
        load_parts()     # in already when _schedule started it (load_step); at once when a test calls this
        self._fetch_manifest(now)

    # The check, the install, the trial and the upload are services/ota/work.py's, on this class while the parts
    # are loaded (load_parts).

    # ------------------------------------------------------------------ install (its steps are the work's)

    def _begin_install(self, now, auto):
        m = self.available
        self._attempts[m["version"]] = self._attempts.get(m["version"], 0) + 1
        self._install_after_check = True   # a retry after a failure installs again
        self._auto = auto
        self.phase = PLANNING
        self._plan = list(m["files"])
        self._changed = []
        self._new = []
        self._gone = []
        self._paths = set(p for p, _s, _h in m["files"])
        self._hasher = None
        self.progress = [0, 0]
        self.message = "Preparing the update to %s" % m["version"]
        if self._led is not None:
            self._led.set("OTA_ACTIVE")
        self._note("info", "ota: installing %s (%s)", m["version"], "nightly" if auto else "requested")
        self._queue_cleanup()

    # ------------------------------------------------------------------ cleanup

    def _queue_cleanup(self):
        """Remove what an earlier update left in ota/stage and ota/prev (only when no journal needs them)."""
        for top in ("ota/stage", "ota/prev"):
            if exists(top):
                self._cleanup.append(top)

    def _cleanup_step(self):
        """Remove up to remove_per_poll entries, depth first."""
        for _ in range(self.remove_per_poll):
            if not self._cleanup:
                return
            path = self._cleanup[-1]
            if _is_dir(path):
                try:
                    names = os.listdir(path)
                except OSError:
                    names = []
                if names:
                    for n in names:
                        self._cleanup.append(path + "/" + n)
                    continue
                try:
                    os.rmdir(path)
                except OSError:
                    pass
            else:
                remove_quiet(path)
            self._cleanup.pop()

    # ------------------------------------------------------------------ upload (POST /ota/upload)

    def upload_piece(self, offset, data):
        """One piece of an uploaded release archive at byte offset; offset 0 starts a new upload. Returns (HTTP
        status, answer): 200 taken (received says how much of the archive the device has), 409 send again from
        received (offset mismatch, busy, verifying), 400 refused (the upload is dropped, nothing stays staged)."""
        load_parts()
        return self._upload_piece(offset, data)

    def describe(self):
        d = Module.describe(self)
        d["phase"] = self.phase
        d["available"] = self.available["version"] if self.available is not None else None
        d["last_error"] = self.last_error
        return d
