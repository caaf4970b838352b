"""Updates over the network: check a manifest, stage verified files, hand the switch to boot.py, prove health.

Longer than the ~600-line rule on purpose: check, install, upload and trial are one state machine (one phase,
one 4 KB buffer, one journal) whose steps must exclude each other; split into classes they would share all of
that state. The work itself lives in the parts loaded on demand (manifest, signature, http_get, stream, upload).
"""

import json
import os

from adafruit_ticks import ticks_add, ticks_diff, ticks_less

from core.elapsed import fresh
from core.files import exists, remove_quiet
from core.module import OK, WARN, Module
from core.modules import unload
from core.url import resolve

# The parts a check, an install or an upload needs (about 25 KB of heap on CircuitPython, `make bench-device`):
# load_parts() imports them when work starts (an explicit import: one inside __getattr__ overflows small C stacks),
# release_parts() lets them go when the service is idle again.
mf = sg = hg = st = upl = None
PARTS = ("services.ota.manifest", "services.ota.signature", "services.ota.ed25519", "services.ota.http_get",
         "services.ota.stream", "services.ota.upload")   # let go together: they import each other


def load_parts():
    """Import the check/install/upload code (once until released)."""
    global mf, sg, hg, st, upl
    if mf is None:
        from services.ota import http_get, manifest, signature, stream, upload

        mf, sg, hg, st, upl = manifest, signature, http_get, stream, upload


def release_parts():
    """Let the check/install/upload code go; True when it was loaded."""
    global mf, sg, hg, st, upl
    if mf is None:
        return False
    mf = sg = hg = st = upl = None
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


def _makedirs(path):
    parts = path.split("/")[:-1]
    for i in range(1, len(parts) + 1):
        d = "/".join(parts[:i])
        if not exists(d):
            os.mkdir(d)


def _expired(now, stamp, ms):
    """True when stamp is ms or more in the past; a stamp so old that ticks_diff wrapped negative is expired too."""
    age = ticks_diff(now, stamp)
    return age < 0 or age >= ms


def _iso(secs):
    """YYYY-MM-DD HH:MM of Unix seconds (UTC)."""
    from core.tz import to_civil

    y, mo, d, hh, mm, _ss = to_civil(int(secs))
    return "%04d-%02d-%02d %02d:%02d" % (y, mo, d, hh, mm)


def _valid_version(text):
    try:
        mf.parse_version(text)
        return True
    except ValueError:
        return False


def _sig_url(url):
    """Where the detached signature of the manifest at url is: <url>.sig (before a query)."""
    q = url.find("?")
    return url + sg.SIG_SUFFIX if q < 0 else url[:q] + sg.SIG_SUFFIX + url[q:]


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

    # ------------------------------------------------------------------ lifecycle

    def start(self):
        load_parts()   # the floor's version check; let go at the first idle poll
        self.mpy_version = mf.running_mpy()
        self.bad = _read_json(BAD) or []
        floor = _read_json(FLOOR)
        if floor is None:
            floor = _read_json(FLOOR + ".tmp")   # a cut between removing the old floor and the rename
        self.floor = floor if isinstance(floor, str) and _valid_version(floor) else ""
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
        self._begin_install(self._now, auto=False)
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
        busy = self.phase != IDLE or self._upload is not None or self._cleanup
        self.poll_every_ms = 0 if busy else self.idle_every_ms

    def _poll(self, now_ms):
        self._now = now_ms
        if self.phase != IDLE or self._upload is not None:
            load_parts()
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
            if mf is not None and self.phase == IDLE and self._req is None and self._upload is None \
                    and not self.keep_parts:
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
        load_parts()
        try:
            self._keys = sg.load_keys()
        except sg.SignatureProblem as exc:   # fail closed: without a trusted key nothing can be installed
            self._failed(now, "signature", "update check: %s" % exc)
            return
        self._sink = st.MemorySink(mf.MAX_MANIFEST_BYTES)
        self._sig_sink = None
        self._req = hg.HttpGet(self._pool, url, self._sink, self._buf, self._ssl_factory)
        # Into memory, not onto the flash: as much per poll as the socket holds (on the device the TCP window,
        # ~6 KB, ends a poll's reads first), so a 17 KB manifest takes one poll, not three.
        self._req.reads_per_poll = MEMORY_READS_PER_POLL
        self.phase = CHECKING

    def _check_step(self, now):
        """Fetch the manifest, then its detached signature; then verify (VERIFYING) before anything parses it."""
        req = self._req
        if req.poll(now):
            return
        self._req = None
        self.phase = IDLE
        if self._source_form is not None:
            self._compiled_fetched(now, req)
            return
        if req.error is not None:
            if self._sig_sink is not None:
                self._sink = self._sig_sink = None
                self._manifest_data = None
                if req.error.reason == "http":
                    self._failed(now, "signature", "update check: no signature for the manifest (%s): refused, only "
                                 "signed releases are installed" % req.error.message)
                else:
                    self._failed(now, req.error.reason, "update check failed fetching the signature: "
                                 + req.error.message)
                return
            self._failed(now, req.error.reason, "update check failed: " + req.error.message)
            return
        if self._sig_sink is None:
            self._manifest_data = bytes(self._sink.data)
            self._sink = self._sig_sink = st.MemorySink(256)
            self._req = hg.HttpGet(self._pool, _sig_url(self._source), self._sig_sink, self._buf, self._ssl_factory)
            self._req.reads_per_poll = MEMORY_READS_PER_POLL
            self.phase = CHECKING
            return
        data = self._sig_sink.data
        self._sink = self._sig_sink = None
        try:
            sig = sg.parse_signature(data)
        except sg.SignatureProblem as exc:
            self._manifest_data = None
            self._failed(now, "signature", "update check: bad signature file: %s: refused" % exc)
            return
        self._sig_check = sg.ManifestSignatureCheck(self._manifest_data, sig, self._keys)
        self.phase = VERIFYING

    def _verify_step(self, now):
        """A slice of the signature check per poll (docs/ota.md: about 90 polls); then the manifest is read."""
        chk = self._sig_check
        for _ in range(self.verify_steps_per_poll):
            if chk.step():
                break
        else:
            return
        self._sig_check = None
        data = self._manifest_data
        self._manifest_data = None
        self.phase = IDLE
        if not chk.ok:
            self._failed(now, "signature", "update check: the manifest's signature is wrong: %s: refused"
                         % chk.error)
            return
        self._checked_manifest(now, data)

    def _checked_manifest(self, now, data):
        """A signed manifest: validate it and decide what to offer."""
        t = self._clock.time() if self._clock is not None and self._clock.synced else None
        try:
            m = mf.parse_manifest(data)
        except mf.ManifestError as exc:
            self._failed(now, "manifest", "update check: bad manifest: %s" % exc)
            return
        except (MemoryError, RuntimeError) as exc:   # a signed manifest still must not fault the module
            self._failed(now, "manifest", "update check: manifest cannot be read: %r" % exc)
            return
        m["source"] = self._source
        if mf.expired(m, t):
            self.available = None
            self.server_version = ""
            self._failed(now, "expired", "update check: the server's manifest (version %s) expired at %s UTC: "
                                         "refused (an old manifest served again)" % (m["version"], _iso(m["expires"])))
            return
        offered = mf.is_newer(m["version"], self.version) and self._refusal(m) is None
        if m["format"] == 2 and offered:
            why = self._compiled_blocker(m["mpy"])
            if why is not None:
                self._failed(now, "manifest", "update check: %s is compiled (.mpy v%d) and cannot be installed here: "
                                              "%s" % (m["version"], m["mpy"], why))
                return
        elif m["mpy_manifest"] is not None and offered:
            why = self._compiled_blocker(m["mpy"])
            if why is None:
                self._fetch_compiled(m, t)
                return
            m["form_note"] = why
        self._offer(now, m, t)

    def _compiled_blocker(self, version):
        """Why this device cannot install an update's compiled form (.mpy files of version), or None."""
        if getattr(self._boot, "SWITCH_VERSION", 1) < 2:
            return ("this drive's boot.py cannot set a module's .py aside for its .mpy (install boot.py over USB: "
                    "python -m tools.install)")
        if self.mpy_version is None:
            return "this interpreter imports no CircuitPython .mpy files"
        if self.mpy_version != version:
            return "its .mpy files are version %d, this CircuitPython imports version %d" % (version, self.mpy_version)
        return None

    def _fetch_compiled(self, m, t):
        """Fetch the compiled form's manifest that the signed manifest m pins by size and SHA-256 (no second
        signature check: its bytes are what the signature covered)."""
        path, size, sha = m["mpy_manifest"]
        self._source_form = m
        self._check_t = t
        self._compiled_url = resolve(m["source"], path)
        self._sink = st.HashingWriter(st.MemorySink(mf.MAX_MANIFEST_BYTES), size, sha, path)
        self._req = hg.HttpGet(self._pool, self._compiled_url, self._sink, self._buf, self._ssl_factory)
        self._req.reads_per_poll = MEMORY_READS_PER_POLL
        self.phase = CHECKING

    def _compiled_fetched(self, now, req):
        """The compiled form's manifest arrived (or not): offer it, or the source form with the reason."""
        m = self._source_form
        sink = self._sink
        self._source_form = None
        self._sink = None
        why = None
        if req.error is not None:
            why = "%s: %s" % (req.error.reason, req.error.message)
        else:
            try:
                c = mf.parse_manifest(bytes(sink._f.data))
            except mf.ManifestError as exc:
                c = None
                why = "bad manifest: %s" % exc
            except (MemoryError, RuntimeError) as exc:
                c = None
                why = "manifest cannot be read: %r" % exc
            if c is not None and (c["format"] != 2 or c["version"] != m["version"] or c["mpy"] != m["mpy"]):
                why = "it is not the compiled form of %s (mpy v%s)" % (m["version"], m["mpy"])
            if why is None:
                c["source"] = self._compiled_url
                c["expires"] = m["expires"]
                self._offer(now, c, self._check_t)
                return
        m["form_note"] = "its compiled form could not be used (%s)" % why
        self._note("warning", "ota: %s: %s", m["version"], m["form_note"])
        self._offer(now, m, self._check_t)

    def _offer(self, now, m, t):
        """A valid, signed manifest that has not expired: offer it when it is newer and not refused."""
        # A check that took long (a slow server, the signature's ~90 polls on a loaded device) is fresh from its
        # end: GET ota/check would otherwise start another one at once and refuse ota/start as "Busy: checking".
        self._checked_at = now
        self.last_checked = t or 0
        self.server_version = m["version"]
        refused = self._refusal(m)
        if refused is not None:
            self.available = None
            self.message = refused
            if self.last_error != "rolled_back":
                self.last_error = ""
            self._note("warning", "ota: %s", refused)
            self._install_after_check = False
            return
        if mf.is_newer(m["version"], self.version):
            self.available = m
            self.message = "Version %s is available" % m["version"]
            if m.get("form_note"):   # it installs as source: a slower start than the compiled form
                self.message += " (as source: %s)" % m["form_note"]
            if self.last_error != "rolled_back":
                self.last_error = ""
            self._note("info", "ota: %s", self.message)
            if self._install_after_check:
                blocked = self._install_blocker()
                if blocked is None and self._attempts.get(m["version"], 0) < self.max_attempts:
                    self._begin_install(now, auto=self._auto)
                elif blocked is not None:
                    self._note("warning", "ota: not installing: %s", blocked[1])
            elif self._auto:
                self._note("info", "ota: autoOta is off: %s only reported", m["version"])
        else:
            self.available = None
            self.message = "Up to date (%s; the server offers %s)" % (self.version, m["version"])
            if self.updated:  # the check a minute after an update must not hide that it happened
                self.message = "%s. %s" % (self.updated, self.message)
            if self.last_error != "rolled_back":
                self.last_error = ""
        self._install_after_check = False

    def _refusal(self, m):
        """Why a newer signed version is not offered (rolled back here, below the floor), or None."""
        v = m["version"]
        if not mf.is_newer(v, self.version):
            return None
        if v in self.bad:
            return ("Version %s was rolled back here: it is not offered again until a newer version appears "
                    "(running %s)" % (v, self.version))
        if self.floor and mf.is_newer(self.floor, v):
            return ("Version %s is below %s, the minimum version of a release installed here: refused (a "
                    "downgrade to a version with a known hole)" % (v, self.floor))
        return None

    def _failed(self, now, reason, message):
        """A failed check or install: the running version is untouched; report and retry later."""
        self.last_error = reason
        self.message = message + "; retrying in %d min" % (self.retry_ms // 60000)
        self.state = WARN
        self.count("failures")
        self._note("warning", "ota: %s", self.message)
        self._retry_at = ticks_add(now, self.retry_ms)
        self.phase = IDLE
        if self._led is not None:
            self._led.set("OTA_ACTIVE", False)

    # ------------------------------------------------------------------ install

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

    def _plan_step(self, now):
        """Hash the running files in slices; keep the ones that differ."""
        for _ in range(self.hash_steps_per_poll):
            if self._hasher is None:
                if not self._plan:
                    self._plan_done(now)
                    return
                self._hasher = st.FileHasher(self._plan[0][0], self._buf)
            if self._hasher.step():
                path, size, sha = self._plan.pop(0)
                h = self._hasher
                self._hasher = None
                if h.size is None:
                    self._new.append(path)
                self._note_twin(path)
                if h.size != size or h.sha != sha:
                    self._changed.append((path, size, sha))

    def _note_twin(self, path):
        """A module's other form on the drive that this version does not ship goes aside with the switch: core/x.py
        would win the import over a new core/x.mpy, a core/x.mpy beside a new core/x.py is stale code."""
        other = mf.twin(path)
        if other is not None and other not in self._paths and getattr(self._boot, "SWITCH_VERSION", 1) >= 2 \
                and exists(other):
            self._gone.append(other)

    def _plan_done(self, now):
        total = 0
        for _p, size, _s in self._changed:
            total += size
        self.progress = [0, total]
        if not self._changed and not self._gone:
            self._failed(now, "identical", "the files of %s are already installed" % self.available["version"])
            return
        free = self._free_bytes()
        if free is not None and free < total + self.space_margin:
            self._failed(now, "drive_full", "not enough space on the drive: %d bytes free, %d needed"
                         % (free, total + self.space_margin))
            return
        self.message = "Downloading %d files (%d bytes) of %s" % (len(self._changed), total,
                                                                   self.available["version"])
        self.phase = DOWNLOADING
        self._dl_index = 0

    def _free_bytes(self):
        try:
            st = os.statvfs("/")
            return st[1] * st[4]  # f_frsize * f_bavail
        except (OSError, AttributeError):
            return None

    def _download_step(self, now):
        if self._req is None:
            if self._dl_index >= len(self._changed):
                self._commit(now)
                return
            path, size, sha = self._changed[self._dl_index]
            self._dl_path = STAGE + path
            try:
                _makedirs(self._dl_path)
                f = open(self._dl_path, "wb")
            except OSError as exc:
                reason = "drive_full" if exc.args and exc.args[0] == 28 else "drive"
                self._failed(now, reason, "cannot stage %s: %s" % (path, exc))
                return
            self._writer = st.HashingWriter(f, size, sha, path)
            url = resolve(self.available["source"], self.available["base"] + path)
            self._req = hg.HttpGet(self._pool, url, self._writer, self._buf, self._ssl_factory)
            self._req_base = self.progress[0]
        req = self._req
        running = req.poll(now)
        self.progress[0] = self._req_base + req.received
        if running:
            return
        self._req = None
        self._writer = None
        if req.error is not None:
            remove_quiet(self._dl_path)
            err = req.error
            self._failed(now, err.reason, "download of %s (%s) failed (%s): %s"
                         % (self._dl_path[len(STAGE):], self.available["version"], err.reason, err.message))
            return
        self._dl_index += 1

    def _commit(self, now):
        """Every changed file is staged and verified: flush, write the journal, restart into boot.py's switch."""
        m = self.available
        if self._flush is not None:
            self._flush("ota")
        doc = {"phase": "switch", "from": self.version, "to": m["version"],
               "files": [p for p, _s, _h in self._changed], "new": list(self._new), "gone": list(self._gone or ()),
               "min": m["min_version"]}
        fs = self._boot.DriveFs()
        try:
            self._boot.write_journal(fs, doc)
        except OSError as exc:
            self._boot.drop_journal(fs)
            self._failed(now, "drive", "cannot write the update journal: %s" % exc)
            return
        self.phase = RESTARTING
        self.message = "Restarting into %s" % m["version"]
        self._note("info", "ota: %d files of %s staged and verified: restarting to switch", len(self._changed),
                   m["version"])
        if self._restart is not None:
            self._restart("ota")

    # ------------------------------------------------------------------ trial and cleanup

    def _trial_step(self, now):
        healthy = self._health() if self._health is not None else True
        if not healthy:
            self._healthy_since = None
            return
        if self._healthy_since is None:
            self._healthy_since = now
            return
        if ticks_diff(now, self._healthy_since) >= self.healthy_after_ms:
            self._raise_floor(self.trial.get("min"))
            self._boot.drop_journal(self._boot.DriveFs())
            to = self.trial.get("to")
            # Name the version that runs (core/version.py of the files installed), not only the one announced.
            self._note("info", "ota: %s proved healthy and is kept", self.version)
            self.updated = "Updated from %s to %s" % (self.trial.get("from"), self.version)
            if to != self.version:
                self.updated += " (the release was announced as %s)" % to
                self._note("warning", "ota: the update to %s runs version %s", to, self.version)
            self.message = self.updated
            self.trial = None
            self.phase = IDLE
            self.state = OK
            if self._led is not None:
                self._led.set("OTA_ACTIVE", False)
            self._queue_cleanup()

    def _raise_floor(self, min_version):
        """Keep the highest min_version installed (ota/floor); it never goes down."""
        if not isinstance(min_version, str) or not _valid_version(min_version):
            return
        if self.floor and not mf.is_newer(min_version, self.floor):
            return
        try:
            _makedirs(FLOOR)
            with open(FLOOR + ".tmp", "w") as f:
                f.write(json.dumps(min_version))
            remove_quiet(FLOOR)
            os.rename(FLOOR + ".tmp", FLOOR)
            self.floor = min_version
        except OSError as exc:
            self._note("error", "ota: cannot store the minimum version %s: %s", min_version, exc)

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
        up = self._upload
        if offset == 0:
            if up is not None:
                self._upload_fail("cancelled", "a new upload replaced an unfinished one", quiet=True)
            blocked = self._upload_blocker()
            if blocked is not None:
                return 409, self._upload_answer(False, 0, blocked[1], blocked[0])
            try:
                keys = sg.load_keys()
            except sg.SignatureProblem as exc:
                return 400, self._upload_answer(False, 0, "Upload refused: %s" % exc, "signature")
            self._upload_refusal = None
            up = self._upload = upl.Upload(self._now, keys)
            up.reader = upl.ArchiveReader(self._upload_member, self._upload_end, lambda: up.verifying or up.complete)
            self.phase = UPLOADING
            self.progress = [0, 0]
            self.message = "Receiving an uploaded release"
            if self._led is not None:
                self._led.set("OTA_ACTIVE")
            self._note("info", "ota: upload started")
        if up is None:
            if self._upload_refusal is not None:
                return self._upload_refusal
            return 409, self._upload_answer(False, 0, "No upload in progress: start at offset 0")
        if offset != up.received:
            return 409, self._upload_answer(False, up.received, "Expected offset %d" % up.received)
        limit = max_upload_bytes()
        if up.received + len(data) > limit:
            return self._upload_fail("oversized", "the archive is larger than %d bytes" % limit)
        up.last = self._now
        try:
            took = up.reader.feed(data)
        except upl.ArchiveError as exc:
            return self._upload_fail("archive", str(exc))
        except st.DownloadError as exc:
            return self._upload_fail(exc.reason, exc.message)
        except sg.SignatureProblem as exc:
            return self._upload_fail("signature", "%s" % exc)
        except mf.ManifestError as exc:
            return self._upload_fail("manifest", "bad manifest: %s" % exc)
        except OSError as exc:
            reason = "drive_full" if exc.args and exc.args[0] == 28 else "drive"
            return self._upload_fail(reason, "cannot stage: %s" % exc)
        except (MemoryError, RuntimeError) as exc:
            return self._upload_fail("memory", "%r" % exc)
        up.received += took
        self.progress[0] = up.received
        if took < len(data) and up.verifying:
            return 409, self._upload_answer(True, up.received, "Checking the signature: send the rest again "
                                                                "in a moment")
        if up.complete:
            return 200, self._upload_answer(True, up.received, "Every file is staged and verified: installing "
                                                               "(the device restarts)", done=True)
        return 200, self._upload_answer(True, up.received, self.message)

    def _upload_blocker(self):
        """(code, message) of what keeps an upload from starting now, or None."""
        if self.phase == TRIAL:
            return "trial", "The last update is still proving itself; try again in a few minutes"
        if self.phase != IDLE:
            return "busy", "Busy: " + self.phase
        if not exists("code.py"):
            return "no_app", ("The application is not on the drive (host runtime without --app-on-drive): nothing "
                              "to replace")
        if self._cleanup or exists("ota/stage") or exists("ota/prev"):
            if not self._cleanup:
                self._queue_cleanup()
            return "busy", "Busy: removing what an earlier update left; send again in a moment"
        return None

    def _upload_answer(self, ok, received, message, error="", done=False):
        return {"ok": ok, "received": received, "state": self.phase, "message": message,
                "error": error or ("" if ok else self.last_error), "done": done}

    def _upload_fail(self, reason, why, quiet=False):
        """Drop the upload: nothing it staged stays (removed over the next polls); report; (400, answer)."""
        up = self._upload
        self._upload = None
        if up is not None and up.reader is not None:
            up.reader.abort()
        self._sig_check = None
        self.phase = IDLE
        self._queue_cleanup()
        if self._led is not None:
            self._led.set("OTA_ACTIVE", False)
        if quiet:
            return None
        self.last_error = reason
        self.message = "Upload refused: " + why
        self.state = WARN
        self.count("failures")
        self._note("warning", "ota: %s", self.message)
        self._upload_refusal = (400, self._upload_answer(False, up.received if up is not None else 0, self.message,
                                                         reason))
        return self._upload_refusal

    def _upload_member(self, name, size):
        up = self._upload
        if up.manifest_data is None:
            if name != upl.MANIFEST:
                raise upl.ArchiveError("the archive must start with %s (found %s)" % (upl.MANIFEST, name))
            if size > mf.MAX_MANIFEST_BYTES:
                raise st.DownloadError("oversized", "manifest larger than %d bytes" % mf.MAX_MANIFEST_BYTES)
            return upl.Collect(mf.MAX_MANIFEST_BYTES, upl.MANIFEST, self._upload_got_manifest)
        if up.manifest is None:
            if name != upl.SIGNATURE:
                raise sg.SignatureProblem("the archive has no signature (%s must follow %s, found %s): only "
                                          "signed releases are installed" % (upl.SIGNATURE, upl.MANIFEST, name))
            return upl.Collect(256, upl.SIGNATURE, self._upload_got_signature)
        if name not in up.files:
            raise upl.ArchiveError("%s is not in the manifest" % name)
        if name in up.staged:
            raise upl.ArchiveError("%s is in the archive twice" % name)
        want, sha = up.files[name]
        if size != want:
            raise st.DownloadError("oversized" if size > want else "truncated",
                                "%s: %d bytes in the archive, the manifest says %d" % (name, size, want))
        path = STAGE + name
        _makedirs(path)
        return upl.Staged(st.HashingWriter(open(path, "wb"), size, sha, name), name, up.staged.append)

    def _upload_got_manifest(self, data):
        self._upload.manifest_data = data

    def _upload_got_signature(self, data):
        up = self._upload
        self._sig_check = sg.ManifestSignatureCheck(up.manifest_data, sg.parse_signature(data), up.keys)
        up.verifying = True
        self.phase = VERIFYING
        self.message = "Checking the signature of the uploaded release"

    def _upload_end(self):
        up = self._upload
        if up.manifest is None:
            raise upl.ArchiveError("the archive ended before the manifest and its signature")
        missing = [p for p in up.files if p not in up.staged]
        if missing:
            raise upl.ArchiveError("%d files of %s missing, e.g. %s" % (len(missing), up.manifest["version"],
                                                                   sorted(missing)[0]))
        up.complete = True

    def _upload_step(self, now):
        """Between pieces: the signature check in slices, the commit once complete, the idle timeout."""
        up = self._upload
        if up.complete:
            m = up.manifest
            self.available = m
            self._changed = list(m["files"])
            self._new = [p for p, _s, _h in m["files"] if not exists(p)]
            self._gone = []
            self._paths = set(p for p, _s, _h in m["files"])
            for p, _s, _h in m["files"]:
                self._note_twin(p)
            self._upload = None
            self.phase = IDLE
            self._note("info", "ota: upload of %s complete (%d files)", m["version"], len(m["files"]))
            self._commit(now)
            return
        if up.verifying:
            chk = self._sig_check
            for _ in range(self.verify_steps_per_poll):
                if chk.step():
                    break
            else:
                return
            self._sig_check = None
            if not chk.ok:
                self._upload_fail("signature", "the manifest's signature is wrong: %s" % chk.error)
                return
            try:
                m = mf.parse_manifest(up.manifest_data)
            except mf.ManifestError as exc:
                self._upload_fail("manifest", "bad manifest: %s" % exc)
                return
            except (MemoryError, RuntimeError) as exc:
                self._upload_fail("manifest", "manifest cannot be read: %r" % exc)
                return
            m["source"] = "upload"
            why = self._refusal(m)
            if why is None and not mf.is_newer(m["version"], self.version):
                why = "version %s is not newer than the running %s" % (m["version"], self.version)
            if why is None and m["format"] == 2 and self._compiled_blocker(m["mpy"]) is not None:
                why = ("this archive holds %s compiled (.mpy v%d), which this device cannot install: %s; upload "
                       "meterplus-%s-update.tar (its source form) instead"
                       % (m["version"], m["mpy"], self._compiled_blocker(m["mpy"]), m["version"]))
            if why is not None:
                self._upload_fail("version", why)
                return
            free = self._free_bytes()
            need = m["total"] + self.space_margin
            if free is not None and free < need:
                self._upload_fail("drive_full", "not enough space on the drive: %d bytes free, %d needed"
                                  % (free, need))
                return
            up.manifest = m
            up.files = {}
            for path, size, sha in m["files"]:
                up.files[path] = (size, sha)
            up.manifest_data = b""
            up.verifying = False
            self.phase = UPLOADING
            self.progress[1] = m["total"]
            self.message = "Receiving %s (%d files, signature good)" % (m["version"], len(m["files"]))
            self._note("info", "ota: uploaded manifest of %s is signed by a trusted key", m["version"])
            return
        if _expired(now, up.last, self.upload_idle_ms):
            self._upload_fail("network", "no piece for %d s" % (self.upload_idle_ms // 1000))

    def describe(self):
        d = Module.describe(self)
        d["phase"] = self.phase
        d["available"] = self.available["version"] if self.available is not None else None
        d["last_error"] = self.last_error
        return d
