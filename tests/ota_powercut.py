"""Power cuts during an update on the host runtime: SIGKILL `python -m host --app-on-drive` at a random moment of the
update (download, boot.py's switch, the trial), start it again, and check the drive boots a whole old or new version.

Shared by tests/test_ota_host.py (make test, a few cuts) and bench/soak_ota.py (hundreds)."""

import json
import os
import random
import shutil
import tempfile
import time

from core.json_store import read_json_file
from host.ntp_server import scaled_clock, start_ntp_server
from tests.hostproc import ROOT, HostProcess, http_request
from tests.ota_server import UpdateServer, make_release, pubkey_file
from tools.ota_manifest import APP_FOLDERS, app_files

SPEED = 60.0
BOOT_OP_DELAY_MS = 40     # slows boot.py's renames so a cut lands inside the switch (host/__main__.py)


class Failure(AssertionError):
    """A check after a cut failed."""


def midday_ntp(speed=SPEED):
    """("host:port", stop) of an NTP stand-in whose clock starts at 10:00 UTC of today and runs speed times fast.

    With --ntp local the firmware's clock is this computer's: a run between 01:00 and 04:59 Berlin time (or one
    that reaches that window at --speed) gets the nightly check, and autoOta (on by default) installs the offered
    update without ota/start. From 10:00 UTC the window is 13 simulated hours or more away (13 minutes at 60)."""
    host, port, stop = start_ntp_server(clock=scaled_clock(speed, int(time.time()) // 86400 * 86400 + 10 * 3600))
    return "%s:%d" % (host, port), stop


def tree(folder):
    """{path: bytes} of the application files in folder (boot.py excluded: updates never touch it)."""
    out = {}
    for rel in app_files(folder):
        with open(os.path.join(folder, rel), "rb") as f:
            out[rel] = f.read()
    return out


def get_json(host, path):
    status, body, _h = http_request(host.url + path, timeout=5)
    return status, (json.loads(body) if status == 200 and body else None)


def wait_version(host, versions, timeout=60):
    """Wait until the firmware answers and return the version it reports (must be one of versions)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            status, body = get_json(host, "/api/v1/system/alive")
            if status == 200:
                if body["version"] not in versions:
                    raise Failure("unexpected version %r" % body["version"])
                return body["version"]
        except OSError:
            pass
        if host.proc.poll() is not None:
            raise Failure("host exited %s:\n%s" % (host.proc.returncode, host.log()[-3000:]))
        time.sleep(0.1)
    raise Failure("no answer within %d s:\n%s" % (timeout, host.log()[-3000:]))


def start_update(host, timeout=60):
    """Wait until ota/check offers the update, then POST ota/start."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, body = get_json(host, "/api/v1/ota/check")
        if status == 200 and body["data"]["update_available"] and body["data"]["state"] == "idle":
            status, raw, _h = http_request(host.url + "/api/v1/ota/start", data=b"", method="POST")
            answer = json.loads(raw)
            if status == 200 and answer["ok"]:
                return
            raise Failure("ota/start refused: %r" % answer)
        time.sleep(0.2)
    raise Failure("no update offered within %d s:\n%s" % (timeout, host.log()[-3000:]))


def prepare(workdir):
    """An update server with release 0.2.0 and the expected old/new application trees."""
    pub = os.path.join(workdir, "pub")
    os.makedirs(pub)
    changes = {"services/ota/added_in_020.py": '"""New in 0.2.0."""\n'}
    for path in ("core/files.py", "meter/crc.py", "services/ota/routes.py"):  # changed files, not only new ones
        with open(os.path.join(ROOT, path)) as f:
            changes[path] = f.read() + "# changed in 0.2.0\n"
    make_release(pub, "0.2.0", changes=changes)
    server = UpdateServer(pub)
    from core.version import VERSION
    # the installed version: a snapshot, so edits to the repository during a long soak change nothing
    base = os.path.join(workdir, "base")
    os.makedirs(base)
    for entry in ("boot.py", "code.py"):
        shutil.copy(os.path.join(ROOT, entry), os.path.join(base, entry))
    for folder in APP_FOLDERS:
        if os.path.isdir(os.path.join(ROOT, folder)):
            shutil.copytree(os.path.join(ROOT, folder), os.path.join(base, folder),
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    old = tree(base)
    new = tree(os.path.join(pub, "0.2.0"))
    return server, VERSION, old, new


def drive_phase(state):
    """Where the update stood when the power went: no journal yet, mid-switch (files left in ota/stage), trial..."""
    phase = None
    for name in ("ota/journal", "ota/journal.tmp"):
        try:
            with open(os.path.join(state, name)) as f:
                phase = json.load(f).get("phase")
            break
        except (OSError, ValueError):
            continue
    if phase is None:
        return "before the journal" if not os.path.exists(os.path.join(state, "ota/prev")) else "after the trial"
    staged = 0
    for _root, _dirs, files in os.walk(os.path.join(state, "ota/stage")):
        staged += len(files)
    if phase == "switch":
        return "switch, %d files still staged" % staged
    return phase


def one_cut(workdir, i, server, old_version, old, new, rng, log=print, ntp="local"):
    """Run one update, SIGKILL it at a random moment, restart and check. Returns where the cut landed."""
    state = os.path.join(workdir, "drive%d" % i)
    shutil.copytree(os.path.join(workdir, "base"), state)   # a flashed device: the runtime keeps what it finds
    settings = {"device_name": "cut %d" % i, "ota": {"url": server.url}}
    key = pubkey_file(workdir)
    h = HostProcess(state, args=["--app-on-drive", "--speed", str(SPEED), "--ntp", ntp, "--ota-pubkey", key],
                    settings=settings)
    h.control("boot_op_delay_ms", BOOT_OP_DELAY_MS)
    h.start()
    try:
        wait_version(h, (old_version,))
        start_update(h)
        # the cut: anywhere from the download to the trial, weighted towards boot.py's switch
        landing = rng.choice(("download", "switch", "switch", "trial"))
        if landing != "download":
            deadline = time.monotonic() + 60
            while "restarting the firmware" not in h.log():
                if time.monotonic() > deadline:
                    raise Failure("no restart after ota/start:\n%s" % h.log()[-3000:])
                time.sleep(0.005)
        n_ops = 4 * 5 + 6     # moves and folder creations of a five-file switch, journal writes
        time.sleep(rng.uniform(0, n_ops * BOOT_OP_DELAY_MS / 1000.0) if landing == "switch"
                   else rng.uniform(0, 0.4))
    finally:
        h.kill()
    landing = drive_phase(state)
    h = HostProcess(state, args=["--app-on-drive", "--speed", str(SPEED), "--ntp", ntp, "--ota-pubkey", key])
    h.start()
    try:
        version = wait_version(h, (old_version, "0.2.0"))
        got = tree(state)
        if got != (new if version == "0.2.0" else old):
            diff = sorted(p for p in set(got) | set(new) if got.get(p) != (new if version == "0.2.0" else old).get(p))
            raise Failure("cut %d (%s): version %s runs but the drive differs in %s" % (i, landing, version, diff[:5]))
        if (read_json_file(os.path.join(state, "settings.json")) or {}).get("device_name") != "cut %d" % i:
            raise Failure("cut %d: settings changed" % i)
    finally:
        h.stop()
    shutil.rmtree(state, ignore_errors=True)
    return landing, version


def run(n, seed=1, log=print):
    """n cuts; returns {(landing, version): count}."""
    rng = random.Random(seed)
    workdir = tempfile.mkdtemp(prefix="ota-cut-")
    server, old_version, old, new = prepare(workdir)
    stats = {}
    try:
        for i in range(n):
            ntp, stop_ntp = midday_ntp()   # one clock for both starts of a cut; a new one keeps a long soak at midday
            try:
                key = one_cut(workdir, i, server, old_version, old, new, rng, log, ntp=ntp)
            finally:
                stop_ntp()
            stats[key] = stats.get(key, 0) + 1
            log("cut %d/%d: %s -> %s runs" % (i + 1, n, key[0], key[1]))
    finally:
        server.close()
        shutil.rmtree(workdir, ignore_errors=True)
    return stats
