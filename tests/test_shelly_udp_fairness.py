"""The Shelly UDP listener under floods and forged senders (issue 26, findings 3 and 6): answers per source per
second, excess dropped before parsing, the battery answered beside 1, 2 and 8 flooding addresses; never an answer to
a broadcast, multicast or own address; answers bounded against the request's size."""

import socket
import threading
import time

import pytest
import socketpool
from adafruit_ticks import ticks_ms

from core.bus import Bus
from meter.reading import Reading
from services.emulation import shelly_udp as su
from services.emulation.shelly_udp import ShellyUdp
from tests.hostproc import free_port
from tests.steppedclock import SteppedClock
from tests.test_shelly_emulation import IDENT, THREE_PHASE, FakeBus, FakePool, FakeSettings

REQ = b'{"id":1,"method":"EM.GetStatus","params":{"id":0}}'


def _udp(pool, own=None, now=0):
    udp = ShellyUdp(pool, FakeBus(Reading(now, THREE_PHASE)), FakeSettings({"emulation.shelly": True,
                                                                         "emulation.shellyUdpPort": 1010,
                                                                         "emulation.shellyUdpPort2": 0}), IDENT,
                    own=own)
    return udp


def test_a_forged_sender_gets_a_few_answers_a_second_and_the_rest_is_dropped_unparsed(monkeypatch):
    parsed = []
    real = su.shelly_rpc.answer_datagram
    monkeypatch.setattr(su.shelly_rpc, "answer_datagram", lambda *a: parsed.append(1) or real(*a))
    clock = SteppedClock(start=(1 << 29) - 500)               # across the tick wrap
    pool = FakePool()
    udp = _udp(pool, now=clock())
    udp.poll(clock())
    pool.inbox.extend([(REQ, ("10.0.0.9", 5000))] * 20)      # 20 datagrams from one (forged) sender in one second
    for _ in range(10):
        clock.advance(25)
        udp.poll(clock())
    assert not pool.inbox                                      # all read: the socket is drained, not left to fill
    assert len(pool.sockets[0].sent) == ShellyUdp.per_source == len(parsed)
    assert udp.counters["source_limited"] == 20 - ShellyUdp.per_source
    clock.advance(800)
    pool.inbox.append((REQ, ("10.0.0.9", 5000)))
    udp.poll(clock())
    assert len(pool.sockets[0].sent) == ShellyUdp.per_source + 1   # the next second has its own allowance


@pytest.mark.parametrize("sender", ["255.255.255.255", "192.168.1.255", "224.0.0.251", "239.12.255.254",
                                    "0.0.0.0", "192.168.1.20", "192.168.4.1", "192.168.4.255"])
def test_never_an_answer_to_broadcast_multicast_or_the_devices_own_addresses(sender):
    pool = FakePool()
    udp = _udp(pool, own=lambda: ("192.168.1.20", "255.255.255.0", "192.168.4.1", "255.255.255.0"))
    udp.poll(0)
    pool.inbox.append((REQ, (sender, 1010)))
    pool.inbox.append((REQ, ("192.168.1.50", 0)))             # port 0 is nobody's
    udp.poll(100)
    assert pool.sockets[0].sent == [] and udp.counters["bad_sender"] == 2


def test_an_answer_much_larger_than_its_request_is_not_sent():
    pool = FakePool()
    udp = _udp(pool)
    udp.poll(0)
    pool.inbox.append((b'{"method":"Shelly.GetStatus"}', ("192.168.1.50", 4000)))     # 29 B asking for 1,170 B
    pool.inbox.append((b'{"method":"EM.GetStatus"}', ("192.168.1.51", 4000)))         # a battery's smallest ask
    pool.inbox.append((b'{"id":1,"method":"Shelly.GetStatus","params":{"id":0},"src":"battery-0001"}',
                       ("192.168.1.52", 4000)))
    udp.poll(100)
    assert [a for _d, a in pool.sockets[0].sent] == [("192.168.1.51", 4000), ("192.168.1.52", 4000)]
    for data, _a in pool.sockets[0].sent:
        assert len(data) <= ShellyUdp.max_gain * 80
    assert udp.counters["too_large"] == 1


def test_the_peer_table_is_fixed_and_an_idle_poll_allocates_nothing():
    pool = FakePool()
    udp = _udp(pool)
    udp.poll(0)
    for i in range(40):
        pool.inbox.append((REQ, ("10.0.%d.1" % i, 4000)))
    for t in range(1, 20):
        udp.poll(t * 25)
    assert len(udp._peer_ip) == ShellyUdp.peers          # the table never grows
    assert len(pool.sockets[0].sent) <= ShellyUdp.total_per_s


# --- real sockets: floods from 1, 2 and 8 loopback addresses, the battery on 127.0.0.1 -----------------------

class Runner:
    """The listener on the socketpool stand-in, polled in a thread as the supervisor would, with a fresh reading."""

    def __init__(self):
        self.port = free_port()
        self.bus = Bus()
        self.udp = ShellyUdp(socketpool.SocketPool(None), self.bus,
                             FakeSettings({"emulation.shelly": True, "emulation.shellyUdpPort": self.port,
                                           "emulation.shellyUdpPort2": 0}), IDENT, host="127.0.0.1")
        self.run = True
        self.error = None
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self):
        n = 0
        while self.run:
            try:
                now = ticks_ms()
                if n % 100 == 0:
                    self.bus.publish("reading", Reading(now, THREE_PHASE))
                self.udp.poll(now)
            except Exception as exc:
                self.error = exc
                return
            n += 1
            time.sleep(0.005)

    def close(self):
        self.run = False
        self.thread.join(5)
        self.udp.stop()


def _flood(source, port, stop, rate):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((source, 0))
    gap = 1.0 / rate
    nxt = time.monotonic()
    while not stop.is_set():
        try:
            s.sendto(REQ, ("127.0.0.1", port))
        except OSError:
            pass
        nxt += gap
        delay = nxt - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    s.close()


@pytest.mark.slow   # 5 s of flooding per case, in real time
@pytest.mark.parametrize("flooders", [1, 2, 8])
def test_the_battery_is_answered_every_time_beside_flooding_addresses(flooders):
    """1,000 datagrams a second in all (the audit's flood was ~260 from one host), shared by the flooders."""
    r = Runner()
    stop = threading.Event()
    threads = [threading.Thread(target=_flood, args=("127.0.0.%d" % (2 + i), r.port, stop, 1000 // flooders),
                                daemon=True) for i in range(flooders)]
    battery = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    battery.bind(("127.0.0.1", 0))
    battery.settimeout(1.0)
    answered = 0
    try:
        for t in threads:
            t.start()
        time.sleep(0.5)
        for _i in range(15):
            battery.sendto(REQ, ("127.0.0.1", r.port))
            try:
                while b"total_act_power" not in battery.recvfrom(4096)[0]:
                    pass
                answered += 1
            except socket.timeout:
                pass
            time.sleep(0.3)
    finally:
        stop.set()
        for t in threads:
            t.join(5)
        battery.close()
        r.close()
    assert r.error is None, r.error
    assert answered == 15, (answered, r.udp.counters)


VM_CODE = r"""
from core import sockbudget
from core.bus import Bus
from meter.reading import Reading
from services.emulation.shelly_rpc import Identity
from services.emulation.shelly_udp import ShellyUdp
from vm_fakes import Pool, Settings

bus = Bus()
bus.publish("reading", Reading(0, {"1.8.0": (1000, 0), "16.7.0": (250, 0)}))
pool = Pool()
udp = ShellyUdp(pool, bus, Settings({"emulation.shelly": True, "emulation.shellyUdpPort": 1010,
                                      "emulation.shellyUdpPort2": 0}), Identity("a0b1c2d3e4f5", "M", "0.1.0"),
                own=lambda: ("192.168.1.20", "255.255.255.0", None, None))
udp.poll(0)
REQ = b'{"id":1,"method":"EM.GetStatus","params":{"id":0}}'
sock = pool.made[0]
for _ in range(20):
    sock.inbox.append((REQ, ("10.0.0.9", 5000)))
for a in ("255.255.255.255", "192.168.1.255", "224.0.0.251", "192.168.1.20"):
    sock.inbox.append((REQ, (a, 1010)))
for t in range(1, 12):
    udp.poll(t * 25)
print("udp", sock.sent, udp.counters.get("source_limited"), udp.counters.get("bad_sender"))
get = {"mqtt.enable": True, "modbus.enable": True, "emulation.shelly": True, "emulation.shellyUdpPort": 1010,
       "emulation.shellyUdpPort2": 2220, "emulation.sma": True, "accessPoint.enable": True}.get
print("budget", sockbudget.worst_case(get), sockbudget.problem(get, ("accessPoint.enable",))[0])
"""


def test_the_limits_and_the_budget_inside_micropython():
    from tools.mpvm import VM_FAKES, MicroVM

    with MicroVM(packages=("core", "meter", "services"), extra_files=VM_FAKES) as vm:
        out, _fuel = vm.run(VM_CODE)
    assert out.strip().splitlines() == ["udp 4 16 4", "budget 12 accessPoint.enable"], out
