"""Worst poll of each outgoing client against a black-holed host: the cloud (TCP to a listener whose full accept
queue drops SYNs, then TLS), OTA (an update check against the same black hole), NTP (UDP to a socket that never
answers). MQTT has its own, longer bench (bench/bench_mqtt_stall.py, same black hole). Each service runs on the host
stand-ins (socketpool, ssl) against real sockets on 127.0.0.1, polled every 5 ms at real time through at least one
whole connect deadline; poll() is timed with perf_counter.

    .venv/bin/python -m bench.bench_connect [--seconds 12]

The budget (issue 18): no poll over 250 ms. Wall-clock figures on a shared machine include preemption; a real
blocking step (the cloud's old settimeout(2) + connect) shows as ~2,000 ms in every run.
"""

import argparse
import os
import socket
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "host", "cp"), ROOT]

import socketpool  # noqa: E402
from adafruit_ticks import ticks_ms  # noqa: E402

from core.bus import Bus  # noqa: E402
from core.clock import Clock  # noqa: E402
from core.settings import Settings  # noqa: E402
from services.cloud.pairing import Pairing  # noqa: E402
from services.cloud.service import CloudService  # noqa: E402
from services.ota.http_get import HttpGet  # noqa: E402
from tests.mqtt_peers import device_ssl, full_backlog_listener  # noqa: E402

BUDGET_MS = 250


class _CloudSettings:
    def __init__(self, port):
        self.d = {"cloudIotEnabled": True, "cloud.host": "127.0.0.1", "cloud.port": port}

    def get(self, key, default=None):
        return self.d.get(key, default)


def _drive(module, seconds, done=None):
    """Poll module every 5 ms for `seconds` (or until done()); (worst ms, polls)."""
    worst = 0.0
    polls = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end and not (done and done()):
        t0 = time.perf_counter()
        module.poll(ticks_ms())
        worst = max(worst, (time.perf_counter() - t0) * 1000)
        polls += 1
        time.sleep(0.005)
    return worst, polls


def cloud_black_hole(seconds):
    port, held = full_backlog_listener()
    tmp = tempfile.mkdtemp()
    try:
        pairing = Pairing(os.path.join(tmp, "cloud.json"))
        pairing.load()
        pairing.pair("bench-token-0123456789abcdef")
        svc = CloudService(socketpool.SocketPool(None), Bus(), _CloudSettings(port), pairing, "02aabbccddee",
                           "0.0.0", ssl_factory=device_ssl().create_default_context)
        worst, polls = _drive(svc, seconds)
        svc.stop()
        return worst, polls, svc.counters.get("failures", 0), svc.last_error
    finally:
        for s in held:
            s.close()


class _OtaSink:
    def write(self, chunk):
        pass

    def finish(self):
        pass

    def abort(self):
        pass


class _Requests:
    """Starts the OTA service's HTTP GET again whenever the last one ended (as the service's retry does)."""

    def __init__(self, url):
        self.url = url
        self.req = None
        self.failures = 0
        self.last = ""

    def poll(self, now):
        if self.req is None or not self.req.poll(now):
            if self.req is not None:
                self.failures += 1
                self.last = self.req.error.message if self.req.error else "done"
            self.req = HttpGet(socketpool.SocketPool(None), self.url, _OtaSink(), bytearray(1024))
            self.req.poll(now)

    def stop(self):
        if self.req is not None:
            self.req.cancel()


def ota_black_hole(seconds):
    port, held = full_backlog_listener()
    try:
        reqs = _Requests("http://127.0.0.1:%d/ota/manifest.json" % port)
        worst, polls = _drive(reqs, seconds)
        reqs.stop()
        return worst, polls, reqs.failures, reqs.last
    finally:
        for s in held:
            s.close()


def ntp_black_hole(seconds):
    silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)   # takes the requests, never answers
    silent.bind(("127.0.0.1", 0))
    port = silent.getsockname()[1]
    try:
        clock = Clock(socketpool.SocketPool(None), Settings(), server="127.0.0.1:%d" % port, backups=())
        clock.start()
        worst, polls = _drive(clock, seconds)
        clock.stop()
        return worst, polls, clock.counters.get("timeouts", 0), "synced" if clock.synced else "not synced"
    finally:
        silent.close()


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=12.0)
    args = ap.parse_args(argv if argv is not None else [])
    rows = [("cloud, SYNs dropped",) + cloud_black_hole(args.seconds),
            ("OTA, SYNs dropped",) + ota_black_hole(args.seconds),
            ("NTP, server silent",) + ntp_black_hole(args.seconds)]
    print("%-22s %12s %8s %9s  %s" % ("client / black hole", "worst poll", "polls", "failures", "last state"))
    for name, worst, polls, fails, note in rows:
        print("%-22s %9.2f ms %8d %9d  %s" % (name, worst, polls, fails, note))
    top = max(r[1] for r in rows)
    verdict = "within" if top <= BUDGET_MS else "OVER"
    return "connect: worst poll against a black-holed host %.1f ms (%s the %d ms budget)" % (top, verdict, BUDGET_MS)


if __name__ == "__main__":
    print(main(sys.argv[1:]))
