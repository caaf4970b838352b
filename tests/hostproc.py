"""Start `python -m host` as a subprocess on free ports and wait until it answers (shared by end-to-end tests)."""

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


RETRY_429_FOR_S = 60.0   # how long a test client keeps honouring 429 before it reports the 429


def retry_after_s(headers, default=1.0):
    """Seconds a 429/503 asks the client to wait (Retry-After in delta-seconds; the firmware sends no dates)."""
    value = (headers.get("Retry-After") or "").strip() if headers is not None else ""
    return float(value) if value.isdigit() else default


def meter_time_args(epoch):
    """["--meter-time", "HH:MM"]: the simulated household starts at the local time of epoch in the device's default
    zone (a test with a simulated clock must not import or export by the hour CI happens to run at: PV exports at
    midday)."""
    from datetime import datetime, timezone
    from zoneinfo import ZoneInfo

    from core.settings import DEFAULTS

    local = datetime.fromtimestamp(epoch, timezone.utc).astimezone(ZoneInfo(DEFAULTS["timezone"]))
    return ["--meter-time", "%02d:%02d" % (local.hour, local.minute)]


def http_request(url, data=None, method=None, timeout=5, headers=None, retry_429_for=RETRY_429_FOR_S):
    """(status, body bytes, headers); a 429 is honoured as the spec asks clients: wait Retry-After, ask again.

    The device-wide budget (25 requests / 10 s) is shared by everything a test does, so how fast a machine sends
    them must never decide a test: only retry_429_for=0 lets a test see the 429 itself."""
    deadline = time.monotonic() + retry_429_for
    while True:
        req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                body, status, hdrs = r.read(), r.status, r.headers
        except urllib.error.HTTPError as e:
            body, status, hdrs = e.read(), e.code, e.headers
        wait = retry_after_s(hdrs)
        if status != 429 or time.monotonic() + wait > deadline:
            return status, body, hdrs
        time.sleep(wait)


def parse_body(body):
    """JSON when it parses, else the raw bytes (None for an empty body)."""
    try:
        return json.loads(body) if body else None
    except ValueError:
        return body


# Test servers listen below the kernel's ephemeral range (ip_local_port_range, 32768-60999 by default): a port
# that bind(0) hands out is free only at that instant, and any outgoing connection on the machine (a flood test,
# a browser) may take it as its source port before the firmware starts listening on it.
_PORTS = (20000, 32000)
_given = set()      # ports this process handed out: free when checked, maybe not yet bound by whoever asked


def wait_until(predicate, timeout, interval, describe):
    """Poll predicate() until it returns something truthy and return it; after timeout s fail with describe()."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError("condition not met within %s s; %s" % (timeout, describe()))


def recv_until_closed(s):
    """All a socket receives until the peer closes it, resets it or its timeout passes."""
    out = b""
    try:
        while True:
            got = s.recv(65536)
            if not got:
                break
            out += got
    except (socket.timeout, ConnectionResetError):
        pass
    return out


def port_range():
    """The ports this process picks from: all of _PORTS, or under pytest-xdist (make test) worker N's own slice of
    it, so that two workers never hand out the same port between its check and its bind (a firmware bound to
    another worker's broker port, say)."""
    lo, hi = _PORTS
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if worker.startswith("gw") and worker[2:].isdigit() and count.isdigit() and int(count) > 1:
        size = (hi - lo) // int(count)
        lo += (int(worker[2:]) % int(count)) * size
        hi = lo + size
    return lo, hi


def free_port():
    """A port that is free for TCP and UDP on 127.0.0.1 now, that no outgoing connection will borrow, and that this
    process has not handed out before (two free_port() calls before either port is bound differ)."""
    lo, hi = port_range()
    if len(_given) > (hi - lo) // 2:
        _given.clear()      # the early ones are long bound or closed again
    for _ in range(200):
        port = random.randrange(lo, hi)
        if port in _given:
            continue
        try:
            for k in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
                with socket.socket(socket.AF_INET, k) as s:
                    s.bind(("127.0.0.1", port))
        except OSError:
            continue
        _given.add(port)
        return port
    raise RuntimeError("no free port in %d-%d" % (lo, hi))


def _ctrl_c_as_in_a_terminal():
    """Start the runtime with SIGINT at its default, as `make run` in a terminal has it. A test run started as a
    background job of a script inherits SIGINT ignored, and Python then never turns SIGINT into KeyboardInterrupt,
    so the Ctrl-C test would wait in vain."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class HostProcess:
    """A running firmware on the host runtime: .url, .get(path), .stop(); the drive is .state."""

    def __init__(self, state, args=(), settings=None, http_port=None, modbus_port=None, rate_limit=None):
        self.state = str(state)
        self.port = http_port or free_port()
        self.modbus_port = modbus_port or free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        os.makedirs(self.state, exist_ok=True)
        if settings is not None:
            with open(os.path.join(self.state, "settings.json"), "w") as f:
                json.dump(settings, f)
        if rate_limit is not None:
            write_settings_toml(self.state, "METERPLUS_API_RATE_LIMIT = %d\n" % rate_limit)
        self.args = ["--state", self.state, "--http-port", str(self.port), "--modbus-port", str(self.modbus_port)]
        self.args += list(args)
        self.log_path = os.path.join(self.state, "host.log")
        self.proc = None

    def start(self, timeout=60):
        if os.environ.get("METERPLUS_TEST_RING") == "fast":      # make test-fast: the tests not marked slow
            raise RuntimeError("%s starts the host runtime: mark it slow (pyproject.toml's markers), make test runs it"
                               % os.environ.get("PYTEST_CURRENT_TEST", "this test").split(" ")[0])
        self._log = open(self.log_path, "ab")
        self._log_from = self._log.tell()     # this process's lines (a drive's log may hold an earlier run's)
        self.proc = subprocess.Popen([sys.executable, "-m", "host", *self.args], cwd=ROOT,
                                     stdout=self._log, stderr=subprocess.STDOUT, preexec_fn=_ctrl_c_as_in_a_terminal)
        self.wait_alive(timeout)
        return self

    def started(self):
        """True once the firmware's latest start wired every feature: code.py answers alive while it still wires
        the later ones (the start in stages) and logs "Meter Plus up" when the last is in; every restart the host
        runtime makes logs "restarting the firmware" first (a version that crashes never says "up")."""
        with open(self.log_path, "rb") as f:
            f.seek(getattr(self, "_log_from", 0))
            text = f.read().decode("utf-8", "replace")
        return text.rfind("Meter Plus up") > text.rfind("restarting the firmware")

    def wait_alive(self, timeout=60):
        """Wait until the firmware answers alive and its start is complete (started())."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("host exited with %s:\n%s" % (self.proc.returncode, self.log()))
            # The log first: asked ten times a second through a start of several seconds, alive would spend the
            # device's request budget (25 per 10 s) before the test's own first request.
            try:  # a 429 is an answer too: the firmware is up (the test's own requests honour it)
                if self.started() and self.get("/api/v1/system/alive", timeout=1, retry_429_for=0)[0] in (200, 429):
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError("host did not answer within %s s:\n%s" % (timeout, self.log()))

    def wait_reading(self, timeout=60):
        """Wait for the simulated meter's first telegram (/history/latest answers 200): alive comes before it, and
        a test that expects a live meter from its first request would otherwise race the meter's start."""
        return self.wait_for(lambda: self.get("/api/v1/history/latest")[0] == 200, timeout=timeout)

    def get(self, path, timeout=5, headers=None, retry_429_for=RETRY_429_FOR_S):
        """(status, parsed JSON or raw bytes, headers); a 429 is waited out (see http_request)."""
        status, body, hdrs = http_request(self.url + path, timeout=timeout, headers=headers,
                                          retry_429_for=retry_429_for)
        return status, parse_body(body), hdrs

    def post(self, path, doc, timeout=5, headers=None, retry_429_for=RETRY_429_FOR_S):
        """POST doc as JSON: (status, parsed JSON or raw bytes, headers); a 429 is waited out."""
        hdrs = {"Content-Type": "application/json"}
        hdrs.update(headers or {})
        status, body, answer_headers = http_request(self.url + path, data=json.dumps(doc).encode(), method="POST",
                                                    timeout=timeout, headers=hdrs, retry_429_for=retry_429_for)
        return status, parse_body(body), answer_headers

    def wait_for(self, predicate, timeout=30, interval=0.2):
        """Poll predicate() until it returns something truthy; return it."""
        return wait_until(predicate, timeout, interval, lambda: "log:\n" + self.log()[-3000:])

    def log(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def stop(self, sig=signal.SIGTERM, timeout=20):
        """Stop the process; return its exit code."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise
        finally:
            self._log.close()

    def kill(self):
        """SIGKILL: a power cut."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._log.close()

    def control(self, name, value):
        """Write a host-control file (see host/cp/_hostenv.control); None removes it."""
        d = os.path.join(self.state, ".host_control")
        os.makedirs(d, exist_ok=True)
        p = os.path.join(d, name)
        if value is None:
            if os.path.exists(p):
                os.remove(p)
        else:
            with open(p, "w") as f:
                f.write(str(value))


def write_settings_toml(state, extra):
    """The drive's settings.toml: the repo's, with the keys in extra replaced (TOML forbids a key twice)."""
    with open(os.path.join(ROOT, "settings.toml")) as f:
        toml = f.read()
    for line in extra.splitlines():
        key = line.split("=")[0].strip()
        toml = "\n".join(ln for ln in toml.splitlines() if ln.split("=")[0].strip() != key)
    with open(os.path.join(str(state), "settings.toml"), "w") as f:
        f.write(toml + "\n" + extra)
