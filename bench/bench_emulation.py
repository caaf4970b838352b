"""Latency of the meter emulations (issue 21 point 5): telegram in -> the value in a Shelly UDP answer, a Shelly HTTP
answer and an SMA datagram, on the host runtime fed through a pseudo-terminal as its IR head.

The bench writes one SML telegram a second with a power value no earlier telegram had, notes when its last byte
was written, and watches three outputs at once: a battery asking the UDP port every 20 ms, a poller asking
GET /rpc/EM.GetStatus every 350 ms (inside the emulation's 30 requests per 10 s), and the SMA datagrams arriving at
a unicast target. The latency of an output is the time from the telegram's last byte to the first answer that
carries its value (the HTTP figure includes up to 350 ms of the poller's own interval). The median filter is off
(medianFilterSize 0): with it on, every output shows a step's value the same telegrams later.

It then compares the supervisor's worst poll and worst cycle with the emulations on and off (the same feed,
RUN_S seconds each): the emulations must not slow the loop.

    .venv/bin/python -m bench.bench_emulation [--telegrams 30]
"""

import argparse
import json
import os
import pty
import socket
import statistics
import struct
import sys
import tempfile
import threading
import time
import tty

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "host", "cp"), ROOT]

from meter import sml_encode as enc  # noqa: E402
from tests.hostproc import HostProcess, http_request  # noqa: E402

SMA_PORT = 9522
SERVER_ID = bytes.fromhex("0a01534d5400000004d2")


def telegram(seq, power_w, import_wh10):
    """An SML telegram with total power power_w (W) split over three phases and an import total."""
    l1 = power_w // 3
    l2 = power_w // 3
    entries = [
        enc.entry(enc.obis_name("1.8.0"), import_wh10, 30, -1, signed=False),
        enc.entry(enc.obis_name("2.8.0"), 5000, 30, -1, signed=False),
        enc.entry(enc.obis_name("16.7.0"), power_w, 27, 0, signed=True, width=4),
        enc.entry(enc.obis_name("36.7.0"), l1, 27, 0, signed=True),
        enc.entry(enc.obis_name("56.7.0"), l2, 27, 0, signed=True),
        enc.entry(enc.obis_name("76.7.0"), power_w - l1 - l2, 27, 0, signed=True),
    ]
    return enc.transport(enc.sml_file(SERVER_ID, entries, seq))


def sma_power(data):
    """Net power in W (import - export) of an EMETER datagram, from its 1.4.0 and 2.4.0 channels (0.1 W)."""
    pos, imp, exp = 28, None, None
    while pos + 4 <= len(data):
        b, c, d, _e = data[pos:pos + 4]
        if (b, c, d) == (0, 0, 0):
            break
        size = 8 if d == 8 else 4
        if b == 0 and d == 4 and c in (1, 2):
            value = struct.unpack(">I", data[pos + 4:pos + 8])[0]
            if c == 1:
                imp = value
            else:
                exp = value
        pos += 4 + size
    if imp is None or exp is None:
        return None
    return (imp - exp) // 10


class Watch(threading.Thread):
    """Calls sample() every period_s and records (time, value) whenever the value changes."""

    def __init__(self, sample, period_s):
        threading.Thread.__init__(self, daemon=True)
        self.sample = sample
        self.period_s = period_s
        self.seen = []
        self.stop = threading.Event()

    def run(self):
        last = object()
        while not self.stop.is_set():
            try:
                value = self.sample()
            except OSError:
                value = None
            now = time.monotonic()
            if value is not None and value != last:
                self.seen.append((now, value))
                last = value
            self.stop.wait(self.period_s)


def _free_udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _feed(master, count, start_power, written, seq0=0):
    """Write count telegrams a second apart with unique powers; written gets (time of last byte, power). The
    import total grows with the sequence number: a falling total would be held back by the energy floor."""
    for k in range(count):
        power = start_power + 7 * k
        data = telegram(seq0 + k, power, 1000000 + seq0 + k)
        os.write(master, data)
        written.append((time.monotonic(), power))
        time.sleep(1.0)


def _latencies(written, seen):
    out = []
    for t_written, power in written:
        hits = [t for t, v in seen if v == power and t >= t_written - 0.005]
        out.append(hits[0] - t_written if hits else None)
    return out


def _supervisor(device):
    status, body, _ = http_request(device.url + "/api/v1/system/info", retry_429_for=5)
    info = json.loads(body)
    rows = {row["name"]: row["value"] for row in info["supervisor"]}
    return rows


def _start(state, slave, settings, extra_args=()):
    h = HostProcess(state, args=("--meter", slave) + tuple(extra_args), settings=settings)
    h.start()
    return h


def measure(count):
    """(latencies per output, loop figures with emulations on and off)."""
    master, slave_fd = pty.openpty()
    tty.setraw(slave_fd)
    slave = os.ttyname(slave_fd)
    udp_port = _free_udp()
    sma_rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sma_rx.bind(("127.0.0.1", SMA_PORT))
    sma_rx.settimeout(0.2)
    results = {}
    loops = {}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in ("on", "off"):
            on = mode == "on"
            settings = {"medianFilterSize": 0,
                        "emulation": {"shelly": on, "shellyUdpPort": udp_port, "shellyUdpPort2": 0,
                                      "sma": on, "smaTargets": "127.0.0.1"}}
            device = _start(os.path.join(tmp, mode), slave, settings)
            try:
                written = []
                _feed(master, 3, 500, written, seq0=0 if on else 1000)    # warm-up: the meter is live
                watches = {}
                if on:
                    sources = iter(range(10 ** 9))

                    def udp_sample(sources=sources):
                        # 50 asks a second from one address would be over the listener's per-source limit (4 a
                        # second, issue 26): the probe takes turns among 16 loopback addresses (~3 a second each)
                        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                        s.settimeout(0.2)
                        s.bind(("127.0.0.%d" % (10 + next(sources) % 16), 0))
                        try:
                            s.sendto(b'{"id":1,"method":"EM.GetStatus","params":{"id":0}}', ("127.0.0.1", udp_port))
                            doc = json.loads(s.recvfrom(2048)[0])
                            return int(round(doc["result"]["total_act_power"]))
                        except socket.timeout:
                            return None
                        finally:
                            s.close()

                    def http_sample(device=device):
                        status, body, _ = http_request(device.url + "/rpc/EM.GetStatus?id=0", retry_429_for=0)
                        return int(round(json.loads(body)["total_act_power"])) if status == 200 else None

                    def sma_sample():
                        try:
                            return sma_power(sma_rx.recvfrom(2048)[0])
                        except socket.timeout:
                            return None

                    watches = {"shelly_udp": Watch(udp_sample, 0.02), "shelly_http": Watch(http_sample, 0.35),
                               "sma_datagram": Watch(sma_sample, 0.0)}
                    for w in watches.values():
                        w.start()
                written = []
                _feed(master, count, 1000 if on else 3000, written, seq0=100 if on else 1100)
                time.sleep(1.5)
                for name, w in watches.items():
                    w.stop.set()
                    w.join(2)
                    results[name] = _latencies(written, w.seen)
                loops[mode] = _supervisor(device)
            finally:
                device.stop()
    sma_rx.close()
    os.close(master)
    os.close(slave_fd)
    return results, loops


VM_SETUP = r"""
from meter.reading import Reading
from services.emulation.shelly_rpc import Identity
from services.emulation.shelly_udp import ShellyUdp
from services.emulation.sma_sender import SmaSender
from core.bus import Bus

from vm_fakes import Pool, Settings

SRC = ("192.168.1.50", 40000)
VALUES = {"1.8.0": (123456789, -1), "2.8.0": (4567, 0), "16.7.0": (-3085, -1), "36.7.0": (-1031, -1),
          "56.7.0": (-1030, -1), "76.7.0": (-1024, -1), "32.7.0": (2303, -1), "52.7.0": (2287, -1),
          "72.7.0": (2313, -1), "31.7.0": (452, -2), "51.7.0": (451, -2), "71.7.0": (45, -1), "14.7.0": (4999, -2)}
bus = Bus()
bus.publish("reading", Reading(0, VALUES))
pool = Pool()
settings = Settings({"emulation.shelly": True, "emulation.shellyUdpPort": 1010, "emulation.shellyUdpPort2": 2220,
                     "emulation.sma": True, "emulation.smaTargets": ""})
udp = ShellyUdp(pool, bus, settings, Identity("a0b1c2d3e4f5", "Meter Plus", "0.1.0"))
udp.per_source = udp.total_per_s = 1000   # the cost of an answer is measured, not the per-source limit (issue 26)
udp.poll(0)
sma = SmaSender(pool, bus, settings, "a0b1c2d3e4f5")
sma.start()
sma.poll(0)
REQ = b'{"id":1,"method":"EM.GetStatus","params":{"id":0}}'
t = [0]
from services.emulation.loader import EmulationLoader

class App:
    shelly_udp = shelly_ws = sma = shelly_ident = None
    def __init__(self):
        self.bus = Bus()
        self.settings = Settings({})
off = EmulationLoader(App())
"""

VM_WORK = (
    ("loader, both emulations off", "off.poll(1)"),
    ("Shelly UDP, idle poll (2 ports)", "t[0] += 20\nudp.poll(t[0])"),
    ("Shelly UDP, one answer", "t[0] += 20\npool.made[0].inbox.append((REQ, SRC))\nudp.poll(t[0])"),
    ("SMA, poll between datagrams", "sma.poll(500)"),
    ("SMA, one datagram", "t[0] += 1000\nbus.publish('reading', Reading(t[0], VALUES))\nsma.poll(t[0])"),
)


def vm_costs():
    """[(what, fuel, heap bytes)] of the emulation modules' polls in the MicroPython VM."""
    from tools.mpvm import VM_FAKES, MicroVM

    out = []
    with MicroVM(packages=("core", "meter", "services"), extra_files=VM_FAKES) as vm:
        for what, work in VM_WORK:
            fuel, heap = vm.measure(VM_SETUP, work, repeat=10)
            out.append((what, fuel, heap))
    return out


def main(argv=()):
    ap = argparse.ArgumentParser()
    ap.add_argument("--telegrams", type=int, default=30)
    args = ap.parse_args(list(argv))
    results, loops = measure(args.telegrams)
    print("telegram -> output latency over %d telegrams (ms): median / worst / missed" % args.telegrams)
    worst_all = 0.0
    for name in ("shelly_udp", "shelly_http", "sma_datagram"):
        got = [x for x in results[name] if x is not None]
        missed = len(results[name]) - len(got)
        med = statistics.median(got) * 1000 if got else float("nan")
        worst = max(got) * 1000 if got else float("nan")
        worst_all = max(worst_all, worst)
        print("  %-13s %7.1f / %7.1f / %d" % (name, med, worst, missed))
    for mode in ("off", "on"):
        rows = loops[mode]
        polls = sorted(((v, k[:-len(".worst_poll_ms")]) for k, v in rows.items() if k.endswith(".worst_poll_ms")),
                       reverse=True)
        emu = ", ".join("%s %s" % (k, v) for v, k in polls if k in ("shelly_udp", "shelly_ws", "sma"))
        print("  emulations %-3s worst cycle %s ms; worst polls: %s%s" % (
            mode, rows.get("worst_cycle_ms"), ", ".join("%s %s" % (k, v) for v, k in polls[:3]),
            "; emulation modules: " + emu if emu else ""))
    print("poll cost in the MicroPython VM (fuel / heap bytes allocated):")
    for what, fuel, heap in vm_costs():
        print("  %-34s %9.0f / %6.0f" % (what, fuel, heap))
    return "emulation latency: worst %.0f ms of 1000 (UDP, HTTP incl. 350 ms polling, SMA)" % worst_all


if __name__ == "__main__":
    print(main(sys.argv[1:]))
