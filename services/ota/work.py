"""The update's work: the check, the install, the trial and the upload of services/ota/service.py's OtaService.

Loaded with the other parts (load_parts) when work starts and let go when the service is idle again: these methods
are put on OtaService while loaded and taken off when released, so the resident service is its timers, the API's
view and the cleanup (the check runs once a day, an install rarely; CircuitPython keeps every imported module's code
in the heap)."""

import json
import os

from adafruit_ticks import ticks_add, ticks_diff

from core.files import exists, remove_quiet
from core.module import OK, WARN
from core.url import resolve
from services.ota import http_get as hg, manifest as mf, signature as sg, stream as st, upload as upl
from services.ota.service import CHECKING, DOWNLOADING, FLOOR, IDLE, MEMORY_READS_PER_POLL, RESTARTING, STAGE, \
    TRIAL, UPLOADING, VERIFYING, _expired, _valid_version, max_upload_bytes


def _makedirs(path):
    parts = path.split("/")[:-1]
    for i in range(1, len(parts) + 1):
        d = "/".join(parts[:i])
        if not exists(d):
            os.mkdir(d)


def _iso(secs):
    """YYYY-MM-DD HH:MM of Unix seconds (UTC)."""
    from core.tz import to_civil

    y, mo, d, hh, mm, _ss = to_civil(int(secs))
    return "%04d-%02d-%02d %02d:%02d" % (y, mo, d, hh, mm)


def _sig_url(url):
    """Where the detached signature of the manifest at url is: <url>.sig (before a query)."""
    q = url.find("?")
    return url + sg.SIG_SUFFIX if q < 0 else url[:q] + sg.SIG_SUFFIX + url[q:]


class OtaWork:
    """Methods of OtaService (self is the service), on its class while the parts are loaded."""

    def _fetch_manifest(self, now):
        """Fetch the manifest into memory (the check's first request)."""
        try:
            self._keys = sg.load_keys()
        except sg.SignatureProblem as exc:   # fail closed: without a trusted key nothing can be installed
            self._failed(now, "signature", "update check: %s" % exc)
            return
        self._sink = st.MemorySink(mf.MAX_MANIFEST_BYTES)
        self._sig_sink = None
        self._req = hg.HttpGet(self._pool, self._source, self._sink, self._buf, self._ssl_factory)
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

    def _sig_steps(self):
        """A slice of the signature check (verify_steps_per_poll steps); the finished check, else None."""
        chk = self._sig_check
        for _ in range(self.verify_steps_per_poll):
            if chk.step():
                self._sig_check = None
                return chk
        return None

    def _verify_step(self, now):
        """A slice of the signature check per poll (docs/ota.md: about 90 polls); then the manifest is read."""
        chk = self._sig_steps()
        if chk is None:
            return
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
        if not isinstance(min_version, str) or not _valid_version(mf, min_version):
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

    def _upload_piece(self, offset, data):
        """upload_piece() with the parts loaded."""
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
            chk = self._sig_steps()
            if chk is None:
                return
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


# What load_parts() puts on OtaService and release_parts() takes off again (a test checks it is every method).
METHODS = ("_fetch_manifest", "_check_step", "_sig_steps", "_verify_step", "_checked_manifest", "_compiled_blocker",
           "_fetch_compiled", "_compiled_fetched", "_offer", "_refusal", "_failed", "_plan_step",
           "_note_twin", "_plan_done", "_free_bytes", "_download_step", "_commit", "_trial_step", "_raise_floor",
           "_upload_piece", "_upload_blocker", "_upload_answer", "_upload_fail", "_upload_member",
           "_upload_got_manifest", "_upload_got_signature", "_upload_end", "_upload_step")
