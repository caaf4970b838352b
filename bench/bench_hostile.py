"""Latency of GET /system/alive while hostile clients hold the API, on the host runtime (`python -m host`).

Five kinds of hostile client, COUNT connections of each (default 40), every one reconnecting as soon as the
server lets it go: connect-and-idle, slow loris (one byte every 300 ms), half body (a head announcing 100
bytes, 20 sent), connect-and-close flood, and never-reading (asks for the 25 KB time-zone list with a 1 KB
receive buffer and never reads). Each kind runs alone, then all five at once (5 x COUNT connections), while an
honest client asks for alive every 100 ms over a fresh connection; the table gives alive's median and worst
latency (a failed or timed-out probe counts as the 5 s timeout). Two address layouts: the attackers on another
loopback address than the honest client (127.0.0.2 vs 127.0.0.1: one hostile device on the LAN), and the
attackers on the honest client's own address (what an audit from one machine does; the per-peer limit cannot
help there).

    .venv/bin/python bench/bench_hostile.py [--count 40] [--seconds 5] [--layout both|other|same]
    make bench ARGS=hostile

Wall-clock figures on a shared 2-core machine: the attackers' 200 threads compete with the firmware for the CPU.
"""

import argparse
import multiprocessing
import os
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from tests.hostproc import HostProcess  # noqa: E402

HONEST = "127.0.0.1"
ATTACKER = "127.0.0.2"
PROBE_TIMEOUT = 5.0
ALIVE = b"GET /api/v1/system/alive HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


def _connect(port, source, stop, rcvbuf=None):
    """A connected socket from source, or None once stop is set (connect retries while the backlog is full)."""
    while not stop.is_set():
        s = socket.socket()
        try:
            if rcvbuf:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            s.bind((source, 0))
            s.settimeout(3.0)
            s.connect(("127.0.0.1", port))
            return s
        except OSError:
            s.close()
            stop.wait(0.05)
    return None


def _wait_closed(s, stop, limit=10.0):
    """Block until the server closes s (or stop, or limit seconds): the attacker holds its slot."""
    s.settimeout(0.2)
    end = time.monotonic() + limit
    while not stop.is_set() and time.monotonic() < end:
        try:
            if not s.recv(4096):
                return
        except socket.timeout:
            continue
        except OSError:
            return


def idle(port, source, stop):
    while not stop.is_set():
        s = _connect(port, source, stop)
        if s is None:
            return
        _wait_closed(s, stop)
        s.close()


def slowloris(port, source, stop):
    while not stop.is_set():
        s = _connect(port, source, stop)
        if s is None:
            return
        try:
            for ch in ALIVE:
                s.sendall(bytes([ch]))
                if stop.wait(0.3):
                    break
        except OSError:
            pass  # cut off: that is what the server should do
        s.close()


def half_body(port, source, stop):
    while not stop.is_set():
        s = _connect(port, source, stop)
        if s is None:
            return
        try:
            s.sendall(b"POST /api/v1/settings HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                      b"Content-Length: 100\r\n\r\n{\"device_name\": \"xxxx")
            _wait_closed(s, stop)
        except OSError:
            pass
        s.close()


def flood(port, source, stop):
    while not stop.is_set():
        s = _connect(port, source, stop)
        if s is None:
            return
        s.close()
        stop.wait(0.005)


def never_reads(port, source, stop):
    while not stop.is_set():
        s = _connect(port, source, stop, rcvbuf=1024)
        if s is None:
            return
        try:
            s.sendall(b"GET /api/v1/system/timezones HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            stop.wait(2.0)  # reads nothing; the server must give up on it, not wait
        except OSError:
            pass
        s.close()


KINDS = (("connect-and-idle", idle), ("slowloris 1 B/300 ms", slowloris), ("half body", half_body),
         ("connect-and-close flood", flood), ("never reads", never_reads))


def probe(port):
    """(seconds, failure) of one alive over a fresh connection from the honest address; failure is None when the
    answer was 200, else what went wrong (connect, closed, status, timeout)."""
    t0 = time.monotonic()
    s = socket.socket()
    stage = "connect"
    try:
        s.bind((HONEST, 0))
        s.settimeout(PROBE_TIMEOUT)
        s.connect(("127.0.0.1", port))
        stage = "answer"
        s.sendall(ALIVE)
        answer = b""
        while True:
            left = PROBE_TIMEOUT - (time.monotonic() - t0)
            if left <= 0:
                return PROBE_TIMEOUT, "timeout"
            s.settimeout(left)
            got = s.recv(4096)
            if not got:
                break
            answer += got
        took = time.monotonic() - t0
        if not answer:
            return took, "closed"
        if not answer.startswith(b"HTTP/1.1 200"):
            return took, "status " + answer[9:12].decode("latin-1")
        return took, None
    except socket.timeout:
        return PROBE_TIMEOUT, stage + " timeout"
    except OSError as exc:
        return time.monotonic() - t0, "%s %s" % (stage, type(exc).__name__)
    finally:
        s.close()


def _attack(port, kinds, count, source, stop, ready):
    """The attackers' process: count threads of each kind until stop is set."""
    halt = threading.Event()
    threads = [threading.Thread(target=fn, args=(port, source, halt), daemon=True)
               for _name, fn in kinds for _ in range(count)]
    for t in threads:
        t.start()
    ready.set()
    stop.wait()
    halt.set()
    for t in threads:
        t.join(10)


def listen_overflows():
    """The kernel's count of handshakes dropped because a listen queue was full (TcpExtListenOverflows)."""
    try:
        with open("/proc/net/netstat") as f:
            rows = [line.split() for line in f if line.startswith("TcpExt:")]
        return int(rows[1][rows[0].index("ListenOverflows")])
    except (OSError, ValueError, IndexError):
        return -1


def scenario(port, kinds, count, source, seconds):
    """(median s, worst s, probes, {failure: count}, listen overflows) of alive while count clients of each kind
    attack from another process (the honest client does not share their interpreter)."""
    ctx = multiprocessing.get_context("fork")
    stop = ctx.Event()
    ready = ctx.Event()
    proc = ctx.Process(target=_attack, args=(port, kinds, count, source, stop, ready), daemon=True)
    proc.start()
    times = []
    failures = {}
    try:
        ready.wait(30)
        time.sleep(1.0)  # let the attack reach its steady state
        overflows = listen_overflows()
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            took, failure = probe(port)
            if failure is not None:
                failures[failure] = failures.get(failure, 0) + 1
                took = PROBE_TIMEOUT
            times.append(took)
            time.sleep(0.1)
        overflows = listen_overflows() - overflows
    finally:
        stop.set()
        proc.join(30)
        if proc.is_alive():
            proc.kill()
    time.sleep(1.0)  # let the server shed the last attackers before the next scenario
    return statistics.median(times), max(times), len(times), failures, overflows


def http_counters(host):
    """The server's counters from /system/info (accepted, evicted, refused, ...)."""
    try:
        status, body, _h = host.get("/api/v1/system/info", timeout=10)
    except OSError:
        return {}
    if status != 200:
        return {}
    return {e["name"]: e["value"] for e in body.get("http", [])}


def run(count, seconds, layouts):
    state = tempfile.mkdtemp(prefix="bench-hostile-")
    host = HostProcess(state, rate_limit=1000000).start()  # the device-wide 429 would hide the server
    rows = []
    try:
        for layout in layouts:
            source = ATTACKER if layout == "other" else HONEST
            for name, fn in KINDS + (("all five at once", None),):
                kinds = KINDS if fn is None else ((name, fn),)
                n = count * len(kinds)
                med, worst, probes, failures, overflows = scenario(host.port, kinds, count, source, seconds)
                failed = sum(failures.values())
                rows.append((layout, name, n, med, worst, probes, failed))
                print("%-6s %-24s %4d conns  alive median %6.3f s  worst %6.3f s  (%d probes, %d failed%s; "
                      "listen queue overflows %d)" % (layout, name, n, med, worst, probes, failed,
                                                      "".join(": %s x%d" % kv for kv in sorted(failures.items())),
                                                      overflows), flush=True)
        counters = http_counters(host)
    finally:
        host.stop()
        shutil.rmtree(state, ignore_errors=True)
    return rows, counters


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=40, help="connections of each kind (default 40)")
    ap.add_argument("--seconds", type=float, default=5.0, help="probing time per scenario (default 5)")
    ap.add_argument("--layout", choices=("both", "other", "same"), default="both",
                    help="attackers on another address, on the honest client's, or both (default)")
    args = ap.parse_args([] if argv is None else argv)
    layouts = ("other", "same") if args.layout == "both" else (args.layout,)
    print("alive latency under hostile clients (%d per kind), host CPython %s; other = attackers on %s, "
          "same = on the honest client's %s" % (args.count, sys.version.split()[0], ATTACKER, HONEST))
    rows, counters = run(args.count, args.seconds, layouts)
    if counters:
        print("server counters: " + ", ".join("%s=%s" % kv for kv in sorted(counters.items())))
    parts = []
    for layout, name, _n, med, worst, _p, failed in rows:
        if name == "all five at once":
            parts.append("%s: median %.2f s worst %.2f s%s" % (layout, med, worst,
                                                               " (%d failed)" % failed if failed else ""))
    worst_all = max(r[4] for r in rows)
    return "hostile (%d/kind, all kinds at once) alive %s; worst of every scenario %.2f s" % (
        args.count, "; ".join(parts), worst_all)


if __name__ == "__main__":
    print(main(sys.argv[1:]))
