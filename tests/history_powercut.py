"""Power cuts on the host runtime: SIGKILL `python -m host` at random moments of a simulated week, check the file.

Shared by tests/test_history_powercut.py (make test) and bench/soak_history.py. The simulated wall clock comes from
an NTP stand-in in this process that keeps running across the kills, so the week goes on while the firmware is down.
"""

import http.client
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

from host.ntp_server import scaled_clock, start_ntp_server
from services.history import store as hs
from tests.hostproc import HostProcess, http_request

EPOCH0 = 1_782_000_000          # 2026-06-21 (UTC), a simulated week from here
FLUSH_MIN = 60                  # the default batch interval
BATCH_MAX = FLUSH_MIN // 15 + 2  # quarter hours a batch can hold (+1 for a day change, +1 for one being closed)


class Failure(AssertionError):
    """A check after a restart failed."""


PATH = "history/history.bin"    # where the firmware keeps it (code.py)
LEGACY = "history.bin"          # where firmware before the history/ folder kept it
FULL_SIZE = hs.HEADER_SIZE + (hs.HR_CAP + hs.LR_CAP) * hs.REC_SIZE


def history_path(state):
    """The drive's history file: in its folder, or where an older firmware left it; None when there is none."""
    for rel in (PATH, LEGACY):
        if os.path.exists(os.path.join(state, rel)):
            return os.path.join(state, rel)
    return None


def read_file(state):
    """(parse_header result, records oldest first) of the drive's history file, read from a copy (no repair)."""
    tmp = tempfile.mkdtemp(prefix="hcut-")
    try:
        shutil.copy(history_path(state), os.path.join(tmp, "history.bin"))
        with open(os.path.join(tmp, "history.bin"), "rb") as f:
            header = hs.parse_header(f.read(hs.HEADER_SIZE))
        st = hs.HistoryStore(os.path.join(tmp, "history.bin"))
        st.scan()
        return header, list(st.records(hs.HR)), list(st.records(hs.LR))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _get(url, timeout=5):
    status, body, _ = http_request(url, timeout=timeout)
    return status, (json.loads(body or b"null") if status == 200 else None)


def served_quarters(host, sim_now):
    """Timestamps of the quarter hours the firmware serves (flash and RAM) for the current local day.

    One day only: the answer stays short, and a quarter hour lost just before midnight is simply not compared.
    """
    date = time.strftime("%Y-%m-%d", time.gmtime(sim_now + 7200))  # Berlin summer time
    status, body = _get(host.url + "/api/v1/history/highRes?date=" + date)
    if status != 200:
        raise Failure("highRes %s answered %s" % (date, status))
    return {i["timestamp"] for i in body["items"]}


def run(n_kills, workdir, speed=3600.0, seed=1, up_s=(0.8, 4.0), log=print, old_file=None):
    """Start, run a random while, snapshot what is served, SIGKILL, check the file; n_kills times. Returns stats.

    old_file: a history file put at the drive root first, where an older firmware kept it (moved at the first start).
    """
    rng = random.Random(seed)
    sim = scaled_clock(speed, EPOCH0)
    ntp_host, ntp_port, stop_ntp = start_ntp_server(clock=sim)
    state = os.path.join(workdir, "drive")
    kept = {}            # seq -> record on the flash after earlier cuts: none may vanish or change
    if old_file is not None:
        os.makedirs(state, exist_ok=True)
        shutil.copy(old_file, os.path.join(state, LEGACY))
        kept = {r[0]: r for r in read_file(state)[1]}
    stats = {"kills": 0, "records": 0, "lost_max": 0, "lost_total": 0, "snapshots": 0, "cut_while_made": 0}
    try:
        for i in range(n_kills):
            host = HostProcess(state, args=["--speed", str(speed), "--ntp", "%s:%d" % (ntp_host, ntp_port)])
            try:
                host.start(timeout=60)
                time.sleep(rng.uniform(*up_s))
                served = None
                for _try in range(3):
                    try:
                        served = served_quarters(host, int(sim()))
                        break
                    except (OSError, http.client.HTTPException, Failure, ValueError):
                        pass  # a busy or cut answer: without a snapshot the file checks below still run
                stats["snapshots"] += served is not None
                time.sleep(rng.uniform(0, 0.3))
            finally:
                host.kill()   # the cut itself, and never a firmware left running when this harness fails
            stats["kills"] += 1
            if history_path(state) is None:
                continue          # killed before the clock synced and the file was created
            # Cut while the file was made a slice per poll: short, or a migration's .new beside it.
            stats["cut_while_made"] += (os.path.getsize(history_path(state)) < FULL_SIZE
                                        or os.path.exists(os.path.join(state, "history", "history.new"))
                                        or os.path.exists(os.path.join(state, "history", "history.tmp")))
            header, hr, lr = read_file(state)
            if header is None:
                raise Failure("cut %d: header unreadable" % i)
            if header[:2] != (hs.VERSION, hs.REC_SIZE):
                raise Failure("cut %d: header %r" % (i, header))
            for name, recs in (("HighRes", hr), ("LowRes", lr)):
                ts = [r[1] for r in recs]
                seqs = [r[0] for r in recs]
                if ts != sorted(set(ts)) or seqs != sorted(set(seqs)):
                    raise Failure("cut %d: %s records out of order" % (i, name))
            for r in hr:
                old = kept.get(r[0])
                if old is not None and old != r:
                    raise Failure("cut %d: record %d changed" % (i, r[0]))
            now = {r[0] for r in hr}
            gone = [s for s in kept if s not in now]
            # Only a full ring may drop records, and only its oldest (overwritten by the newest).
            if gone and (len(hr) < hs.HR_CAP - 2 * BATCH_MAX or max(gone) > min(now)):
                raise Failure("cut %d: flushed records lost: %s" % (i, gone[:5]))
            kept = {r[0]: r for r in hr}
            if served is not None:
                on_flash = {r[1] for r in hr}
                lost = sorted(served - on_flash)
                newest_kept = max(on_flash) if on_flash else -1
                if any(t < newest_kept for t in lost):
                    raise Failure("cut %d: a record older than the last flushed one is missing" % i)
                if len(lost) > BATCH_MAX:
                    raise Failure("cut %d: %d records lost, more than a batch" % (i, len(lost)))
                stats["lost_max"] = max(stats["lost_max"], len(lost))
                stats["lost_total"] += len(lost)
            stats["records"] = len(hr)
            if (i + 1) % 25 == 0:
                log("cut %d: %d quarter hours, %d days on flash, simulated %s" % (
                    i + 1, len(hr), len(lr), time.strftime("%Y-%m-%d %H:%M", time.gmtime(sim()))))
        # the drive still boots cleanly and serves what it has
        host = HostProcess(state, args=["--speed", str(speed), "--ntp", "%s:%d" % (ntp_host, ntp_port)])
        host.start(timeout=60)
        try:
            status = None
            for _try in range(5):
                try:
                    status, _body = _get(host.url + "/api/v1/history/lowRes?start=%s&days=14"
                                         % time.strftime("%Y-%m-%d", time.gmtime(EPOCH0)))
                    break
                except (OSError, http.client.HTTPException, ValueError):
                    time.sleep(0.2)   # cut by the simulated-time send deadline (see above): ask again
            if status != 200:
                raise Failure("lowRes after the last cut answered %s" % status)
        finally:
            host.stop()
    finally:
        stop_ntp()
    stats["sim_days"] = (sim() - EPOCH0) / 86400
    stats["moved"] = os.path.exists(os.path.join(state, PATH)) and not os.path.exists(os.path.join(state, LEGACY))
    return stats


# --- power cuts while an older firmware's file is moved into history/ (HistoryStore.move_legacy) ---

_CUT_CHILD = """
import builtins, os, signal, sys
sys.path[:0] = [%r, %r]
from services.history.store import HistoryStore
os.chdir(sys.argv[1])
left = [int(sys.argv[2])]
def step():
    left[0] -= 1
    if left[0] < 0:
        os.kill(os.getpid(), signal.SIGKILL)      # the power goes before this step reaches the drive
def hook(fn):
    def run(*a, **k):
        step()
        return fn(*a, **k)
    return run
class Counted:
    def __init__(self, f):
        self.f = f
    def write(self, b):
        step()
        return self.f.write(b)
    def __enter__(self):
        return self
    def __exit__(self, *e):
        step()
        self.f.close()
    def __getattr__(self, n):
        return getattr(self.f, n)
real_open = builtins.open
def open_(path, mode="r", *a, **k):
    if any(c in mode for c in "wax+"):
        step()
        return Counted(real_open(path, mode, *a, **k))
    return real_open(path, mode, *a, **k)
builtins.open = open_
os.mkdir, os.rename, os.remove = hook(os.mkdir), hook(os.rename), hook(os.remove)
HistoryStore(legacy=%r).open()
print("steps", int(sys.argv[2]) - left[0])
"""


def migration_steps(state, cut_at):
    """Run HistoryStore.open() on the drive folder state in a child process that is SIGKILLed before its
    cut_at-th change to the drive (mkdir, open for writing, write, close, rename, remove). Returns the number of
    changes it made when it finished, or None when it was cut."""

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = _CUT_CHILD % (os.path.join(root, "host", "cp"), root, LEGACY)
    p = subprocess.run([sys.executable, "-c", code, state, str(cut_at)], capture_output=True, text=True, timeout=60)
    if p.returncode == 0:
        return int(p.stdout.split()[-1])
    if p.returncode != -9:
        raise Failure("migration child failed: %s" % p.stderr[-2000:])
    return None


def assert_every_cut_recovers(tmp_path, monkeypatch, seed, cuts, expected):
    """For every cut in cuts: copy the drive folder seed, SIGKILL its migration before that change, and check the
    next start serves exactly expected (the (hr, lr) records) from the one history file."""
    from services.history import store as hs

    for cut in cuts:
        drive = str(tmp_path / ("cut%d" % cut))
        shutil.copytree(seed, drive)
        assert migration_steps(drive, cut) is None
        monkeypatch.chdir(drive)
        st = hs.HistoryStore(legacy=LEGACY)
        assert st.open() in ("ok", "migrated"), "cut before step %d" % cut
        assert (list(st.records(hs.HR)), list(st.records(hs.LR))) == expected, "cut before step %d" % cut
        assert os.listdir("history") == ["history.bin"], "cut before step %d" % cut
        monkeypatch.chdir(str(tmp_path))
        shutil.rmtree(drive)
