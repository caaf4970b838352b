"""What an idle host runtime (`python -m host`) costs, how fast it answers, and what --speed gives.

For each scenario a fresh host on a fresh drive: its own CPU time (utime + stime from /proc/<pid>/stat) over
--seconds of real time, its loop cycles per second (/api/v1/system/info, read before and after), then the latency
of GET /api/v1/system/alive over a fresh connection, probed every 1.3 s (longer than the loop's 1 s of device pace
after activity, so each probe meets an idle loop). Scenarios:

  factory      factory state, no client (the access point up), --speed 1
  mqtt+modbus  MQTT to a local mosquitto (sendInterval 10 s) and the Modbus server on, no Modbus client
  speed N      --speed N (default 900): simulated speed reached (uptime / real time), simulated days per real
               minute, and how many of 20 GET /history/latest answered 200 (a fresh reading)

    .venv/bin/python -m bench.bench_host_idle [--seconds 20] [--speed 900] [--load 0] [--before REV]
                                              [--caps 20,50,100,200]

--load N runs N busy loops (`while 1: pass`) beside the host while it is measured (a loaded machine). --before REV
measures the same scenarios on the repository at REV (git archive into a temporary folder) for a before/after
table. --caps sweeps the loop's longest sleep (host/idle_wait.py CAP_S, through METERPLUS_HOST_IDLE_CAP_MS) in the
factory scenario: CPU against how late a firmware timer may fire (at most the cap).
Wall-clock figures on a shared 2-core machine: other work competes for the CPU.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from tests.hostproc import HostProcess, _ctrl_c_as_in_a_terminal  # noqa: E402

PROBE_EVERY_S = 1.3


class _Host(HostProcess):
    """A HostProcess that runs the runtime of another checkout (root) and with extra environment."""

    def __init__(self, state, root=ROOT, env=None, **kw):
        HostProcess.__init__(self, state, **kw)
        self.root = root
        self.env = env

    def start(self, timeout=60):
        self._log = open(self.log_path, "ab")
        env = dict(os.environ, **(self.env or {}))
        self.proc = subprocess.Popen([sys.executable, "-m", "host", *self.args], cwd=self.root, env=env,
                                     stdout=self._log, stderr=subprocess.STDOUT, preexec_fn=_ctrl_c_as_in_a_terminal)
        self.wait_alive(timeout)
        return self


def _cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _info(h, section, name):
    status, body, _hd = h.get("/api/v1/system/info")
    for entry in body[section]:
        if entry["name"] == name:
            return entry["value"]
    return None


def _busy_loops(n):
    return [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(n)]


def measure(h, seconds, probes):
    """(CPU % of one core, cycles per second, alive median ms, alive worst ms) of a running host."""
    time.sleep(3)                               # past the start's burst
    c0, n0, t0 = _cpu_s(h.proc.pid), _info(h, "supervisor", "cycles"), time.monotonic()
    time.sleep(seconds)
    c1, t1 = _cpu_s(h.proc.pid), time.monotonic()
    n1 = _info(h, "supervisor", "cycles")
    lat = []
    for _ in range(probes):
        time.sleep(PROBE_EVERY_S)
        s = time.perf_counter()
        status = h.get("/api/v1/system/alive", retry_429_for=0)[0]
        lat.append((time.perf_counter() - s) * 1000 if status == 200 else 5000.0)
    med, worst = (statistics.median(lat), max(lat)) if lat else (float("nan"), float("nan"))
    return 100 * (c1 - c0) / (t1 - t0), (n1 - n0) / (t1 - t0), med, worst


def measure_speed(h, seconds):
    """(simulated speed reached, simulated days per real minute, fresh /latest answers of 20)."""
    time.sleep(3)
    u0, t0 = _info(h, "uptime", "uptime"), time.monotonic()
    time.sleep(seconds)
    u1, t1 = _info(h, "uptime", "uptime"), time.monotonic()
    fresh = 0
    for _ in range(20):
        fresh += h.get("/api/v1/history/latest")[0] == 200
        time.sleep(0.1)
    speed = (u1 - u0) / (t1 - t0)
    return speed, speed * 60 / 86400, fresh


def _tree(rev, work):
    path = os.path.join(work, "tree-%s" % rev)
    os.makedirs(path)
    subprocess.run("git archive %s | tar -x -C %s" % (rev, path), shell=True, cwd=ROOT, check=True)
    return path


def run(args):
    work = tempfile.mkdtemp(prefix="bench-host-idle-")
    trees = [("now", ROOT)]
    if args.before:
        trees.insert(0, ("before (%s)" % args.before, _tree(args.before, work)))
    rows = []
    broker = None
    loads = _busy_loops(args.load)
    try:
        from tests.mqtt_peers import Broker

        broker = Broker(os.path.join(work, "broker")).start()
        n = 0
        for label, root in trees:
            scenarios = [("factory", {}, (), None), ("mqtt+modbus",
                         {"mqtt": {"enable": True, "host": "127.0.0.1", "port": broker.port},
                          "modbus": {"enable": True}}, (), None)]
            for name, settings, extra, env in scenarios:
                n += 1
                h = _Host(os.path.join(work, "d%d" % n), root=root, settings=settings or None,
                          args=list(extra), env=env).start()
                try:
                    cpu, cps, med, worst = measure(h, args.seconds, args.probes)
                finally:
                    h.stop()
                rows.append((label, name, "%.1f %%" % cpu, "%.0f" % cps, "%.1f / %.1f ms" % (med, worst)))
                print("  %-14s %-12s CPU %5.1f %% of a core, %4.0f cycles/s, alive median %.1f ms, worst %.1f ms"
                      % (label, name, cpu, cps, med, worst), flush=True)
            n += 1
            h = _Host(os.path.join(work, "d%d" % n), root=root, args=["--speed", str(args.speed)]).start()
            try:
                speed, days_per_min, fresh = measure_speed(h, args.seconds)
            finally:
                h.stop()
            rows.append((label, "speed %g" % args.speed, "%.0fx reached" % speed, "%.2f days/min" % days_per_min,
                         "/latest 200: %d of 20" % fresh))
            print("  %-14s speed %-6g reached %.0fx = %.2f simulated days per real minute; /latest 200 in %d of 20"
                  % (label, args.speed, speed, days_per_min, fresh), flush=True)
        for cap in args.caps:
            n += 1
            h = _Host(os.path.join(work, "d%d" % n), env={"METERPLUS_HOST_IDLE_CAP_MS": str(cap)}).start()
            try:
                cpu, cps, _med, _worst = measure(h, args.seconds, 0)
            finally:
                h.stop()
            rows.append(("now", "factory, cap %d ms" % cap, "%.1f %%" % cpu, "%.0f" % cps,
                         "timers <= %d ms late" % cap))
            print("  cap %4d ms     factory      CPU %5.1f %% of a core, %4.0f cycles/s (a timer fires <= %d ms late)"
                  % (cap, cpu, cps, cap), flush=True)
    finally:
        for p in loads:
            p.kill()
            p.wait()
        if broker is not None:
            broker.stop()
        shutil.rmtree(work, ignore_errors=True)
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=20.0, help="real seconds each figure is measured over")
    ap.add_argument("--probes", type=int, default=15, help="alive probes per scenario (every 1.3 s)")
    ap.add_argument("--speed", type=float, default=900.0, help="the --speed scenario's factor (default 900)")
    ap.add_argument("--load", type=int, default=0, help="busy loops beside the host while measuring (default 0)")
    ap.add_argument("--before", default=None, help="also measure the repository at this revision")
    ap.add_argument("--caps", default="", help="comma-separated CAP_S values in ms to sweep (factory scenario)")
    args = ap.parse_args([] if argv is None else argv)
    args.caps = [int(c) for c in args.caps.split(",") if c.strip()]
    print("host runtime idle: CPython %s, %d busy loops beside it, %g s per figure"
          % (sys.version.split()[0], args.load, args.seconds), flush=True)
    rows = run(args)
    idle = [r for r in rows if r[0] == "now" and r[1] == "factory"]
    fast = [r for r in rows if r[0] == "now" and r[1].startswith("speed")]
    return "host idle: factory CPU %s of a core, %s cycles/s, alive %s; %s: %s, %s" % (
        idle[0][2], idle[0][3], idle[0][4], fast[0][1], fast[0][2], fast[0][3]) if idle and fast else None


if __name__ == "__main__":
    line = main(sys.argv[1:])
    print(line)
