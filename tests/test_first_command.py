"""The README's first command: `make run` on a clean copy of the repository, in a brand-new virtualenv that holds only
the '# run' packages, answers /api/v1/system/alive and serves the web page; a port in use and a missing package each
end the runtime at once with one clear message instead of a retry loop that keeps the port."""

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from tests.hostproc import ROOT, free_port

pytestmark = pytest.mark.slow

START_S = 600       # pip installs the run packages from PyPI first: generous for a slow mirror


def _tracked_files():
    """The repository's tracked files (what a clone holds), or None outside a git checkout."""
    if shutil.which("git") is None:
        return None
    r = subprocess.run(["git", "-C", ROOT, "ls-files", "-z"], capture_output=True)
    if r.returncode != 0:
        return None
    return [p for p in r.stdout.decode().split("\0") if p]


def _clean_copy(dest):
    files = _tracked_files()
    if files is None:
        pytest.skip("not a git checkout: the clean-copy test needs `git ls-files`")
    for rel in files:
        src = os.path.join(ROOT, rel)
        if not os.path.lexists(src):
            continue        # deleted in the work tree, not yet committed
        target = os.path.join(dest, rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if os.path.islink(src):
            os.symlink(os.readlink(src), target)
        else:
            shutil.copy2(src, target)


def _get(url):
    """(status, headers, body) of a GET; an error status is an answer too."""
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def _children(pid):
    """PIDs of pid's child processes (make's recipe: the runtime)."""
    out = []
    for tid in os.listdir("/proc/%d/task" % pid):
        with open("/proc/%d/task/%s/children" % (pid, tid)) as f:
            out += [int(c) for c in f.read().split()]
    return out


def test_make_run_on_a_clean_copy_answers_and_stops_cleanly(tmp_path):
    copy = tmp_path / "clone"
    _clean_copy(str(copy))
    assert not (copy / ".venv").exists()
    port = free_port()
    log = open(tmp_path / "make-run.log", "wb")
    env = dict(os.environ)
    for key in ("VIRTUAL_ENV", "PYTHONPATH", "MAKEFLAGS", "MFLAGS", "MAKELEVEL"):
        env.pop(key, None)
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep)
                                  if not p.startswith(os.path.join(ROOT, ".venv")))
    make = subprocess.Popen(["make", "run", "ARGS=--http-port %d --state %s" % (port, tmp_path / "drive")],
                            cwd=str(copy), stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + START_S
        alive = None
        while time.monotonic() < deadline and make.poll() is None:
            try:
                alive = _get("http://127.0.0.1:%d/api/v1/system/alive" % port)
                break
            except OSError:
                time.sleep(0.5)
        text = (tmp_path / "make-run.log").read_bytes().decode("utf-8", "replace")
        assert alive is not None and alive[0] == 200, text[-4000:]
        # The start goes on in stages after the first answer: meanwhile the page is a 503 that reloads itself a
        # second later (Retry-After), as a browser would.
        for _ in range(30):
            status, headers, body = _get("http://127.0.0.1:%d/" % port)
            if status != 503:
                break
            assert headers["Retry-After"] == "1" and b"location.reload()" in body
            time.sleep(1)
        assert status == 200 and headers["Content-Type"].startswith("text/html") and len(body) > 1000
        # the new venv holds the run packages only: what the test suite needs is not what the runtime got
        venv_python = str(copy / ".venv" / "bin" / "python")
        probe = subprocess.run([venv_python, "-c", "import pytest"], capture_output=True)
        assert probe.returncode != 0
        # a second start on the same port: one clear line, exit 2, and the first one keeps serving
        second = subprocess.run([venv_python, "-m", "host", "--http-port", str(port), "--state",
                                 str(tmp_path / "drive2")], cwd=str(copy), capture_output=True, text=True,
                                timeout=60)
        assert second.returncode == 2
        assert second.stderr.count("already in use") == 1 and "--http-port" in second.stderr, second.stderr
        assert _get("http://127.0.0.1:%d/api/v1/system/alive" % port)[0] == 200
        for child in _children(make.pid):          # Ctrl-C's SIGTERM cousin to the runtime, as a user stops it
            os.kill(child, signal.SIGTERM)
        assert make.wait(60) == 0
    finally:
        if make.poll() is None:
            os.killpg(make.pid, signal.SIGKILL)
            make.wait()
        log.close()
    text = (tmp_path / "make-run.log").read_bytes().decode("utf-8", "replace")
    assert "host: stopped" in text and "Traceback" not in text
    with socket.socket() as s:                   # the port is free again
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))


def test_a_port_in_use_ends_the_start_with_one_message_and_status_2(tmp_path):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        r = subprocess.run([sys.executable, "-m", "host", "--http-port", str(port), "--state", str(tmp_path / "d")],
                           cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "port %d on 127.0.0.1 is already in use" % port in r.stderr
    assert "http start fault" not in r.stdout and not (tmp_path / "d").exists()   # nothing started


def test_a_missing_package_ends_the_start_and_frees_the_port(tmp_path):
    port = free_port()
    code = ("import sys, runpy; sys.modules['typing_extensions'] = None; "
            "sys.argv = ['host', '--http-port', '%d', '--state', %r]; "
            "runpy.run_module('host', run_name='__main__', alter_sys=True)" % (port, str(tmp_path / "d")))
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "'typing_extensions' is not installed" in r.stderr and "# run" in r.stderr
    assert "Address already in use" not in r.stdout + r.stderr
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))


CRASH_AFTER_LISTENING = '''
import os
import time

import microcontroller
import socketpool
import wifi
from watchdog import WatchDogMode

runs = int(open("runs.txt").read()) if "runs.txt" in os.listdir() else 0
with open("runs.txt", "w") as f:
    f.write(str(runs + 1))
pool = socketpool.SocketPool(wifi.radio)
sock = pool.socket(pool.AF_INET, pool.SOCK_STREAM)
try:
    sock.bind(("127.0.0.1", int(os.getenv("METERPLUS_HTTP_PORT"))))
    sock.listen(1)
    result = "listening"
except OSError as exc:
    result = "bind failed: %s" % exc
with open("results.txt", "a") as f:
    f.write(result + "\\n")
microcontroller.watchdog.timeout = 1
microcontroller.watchdog.mode = WatchDogMode.RESET
if runs == 0:
    raise RuntimeError("a crash after the listener is up")
while True:
    microcontroller.watchdog.feed()
    time.sleep(0.05)
'''


def test_a_crash_restart_frees_the_crashed_firmwares_sockets(tmp_path):
    """As a chip reset does: the restarted firmware can listen on its port again (the reported start that failed
    21 times with "Address already in use" after a crash)."""
    drive = tmp_path / "drive"
    drive.mkdir()
    (drive / "code.py").write_text(CRASH_AFTER_LISTENING)
    # the runtime's simulated meter encodes with it (no __pycache__: another test process may be writing a .pyc)
    shutil.copytree(os.path.join(ROOT, "meter"), drive / "meter", ignore=shutil.ignore_patterns("__pycache__"))
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "host", "--app-on-drive", "--http-port", str(port),
                             "--state", str(drive)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        results = drive / "results.txt"
        while time.monotonic() < deadline and not (results.exists() and results.read_text().count("\n") >= 2):
            assert proc.poll() is None, proc.stdout.read().decode()
            time.sleep(0.1)
        assert results.read_text().splitlines()[:2] == ["listening", "listening"]
    finally:
        proc.terminate()
        out = proc.communicate(timeout=30)[0].decode()
    assert "watchdog: restarting the firmware after a crash" in out
