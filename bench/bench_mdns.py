"""The mDNS responder's cost on the device: instructions (wasmtime fuel) inside MicroPython 1.27 per answered query
and per idle poll, in ESP32-S3 ms through pystone run in the same VM (the S3 does ~1,000 pystones/s, so one
pystone's fuel is one S3 millisecond), and the heap each allocates.

    .venv/bin/python -m bench.bench_mdns [--json]
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "host", "cp"))   # micropython.const for adafruit_ticks

from tools.mpvm import MicroVM  # noqa: E402

# A fake CircuitPython UDP socket: recvfrom_into from a list, EAGAIN as one prebuilt OSError (the device raises a
# fresh one: that allocation is the platform's, not the responder's), sendto counted.
SETUP = r'''
import errno
from services.network.mdns_responder import MdnsResponder, service_list
EAGAIN = OSError(errno.EAGAIN)
class Sock:
    def __init__(self):
        self.inbox = []
        self.sent = 0
        self.bytes = 0
    def setblocking(self, f): pass
    def bind(self, a): pass
    def setsockopt(self, *a): pass
    def recvfrom_into(self, buf):
        if not self.inbox:
            raise EAGAIN
        data, addr = self.inbox.pop()
        buf[:len(data)] = data
        return len(data), addr
    def sendto(self, data, addr):
        self.sent += 1
        self.bytes += len(data)
        return len(data)
    def close(self): pass
class Pool:
    AF_INET = 2
    SOCK_DGRAM = 2
    def socket(self, f, k):
        self.s = Sock()
        return self.s
IP = bytes((192, 168, 1, 50))
pool = Pool()
r = MdnsResponder(pool, lambda: IP, "meterplus-024d50000001",
                  lambda: service_list("024d50000001", 80, "0.1.0", SHELLY))
r.start()
t = 0
for _ in range(60):
    r.poll(t)
    t += 100
sock = pool.s
Q = bytes.fromhex(QUERY)
ADDR = (PEER, PORT)
'''

QUERIES = {
    # python-zeroconf's browse: PTR _wattwaechter._tcp.local, QM, answered to the group with SRV, TXT, A
    "ptr_qm_with_additionals": ("000000000001000000000000"
                                "0d5f776174747761656368746572045f746370056c6f63616c00000c0001", 5353),
    # a QU question for the host name: unicast A answer
    "a_qu": ("000000000001000000000000" "166d65746572706c75732d303234643530303030303031056c6f63616c0000018001",
             5353),
    # a plain DNS resolver asking the SRV record (legacy unicast: the question repeated, TTL 10)
    "srv_legacy": ("123400000001000000000000" "106d6574657270"
                   "6c75732d3030303030310d5f776174747761656368746572045f746370056c6f63616c0000210001", 40000),
    # a question for someone else's name: parsed and dropped
    "not_ours": ("000000000001000000000000" "056f74686572056c6f63616c0000010001", 5353),
}


def measure(vm, name, hexq, port, shelly=False):
    setup = SETUP.replace("SHELLY", str(shelly)).replace("QUERY", repr(hexq)).replace("PEER", '"192.168.1.20"') \
        .replace("PORT", str(port))
    work = "sock.inbox.append((Q, ADDR))\nt += 1100\nr.poll(t)"
    fuel, heap = slope(vm, setup, work, 10, 30)
    out, _ = vm.run(setup + "\nsock.sent = 0\nsock.bytes = 0\n" + work + "\nprint('@@', sock.sent, sock.bytes)")
    sent, size = [int(x) for x in out.split("@@", 1)[1].split()]
    return fuel, heap, sent, size


def slope(vm, setup, work, a, b):
    """Fuel and heap of one run of work from runs of a and of b repeats: a collection the heap happens to need in
    one of them (~1.1 M fuel here) is a fixed cost that the difference cancels, where an average would spread it."""
    fa, ha = vm.measure(setup, work, repeat=a)
    fb, hb = vm.measure(setup, work, repeat=b)
    return (fb * b - fa * a) / (b - a), (hb * b - ha * a) / (b - a)


def main(argv=()):
    with MicroVM(packages=("core", "meter", "services")) as vm:
        per_pystone = vm.pystone_fuel()
        rows = {}
        for name, (hexq, port) in QUERIES.items():
            fuel, heap, sent, size = measure(vm, name, hexq, port)
            rows[name] = {"fuel": int(fuel), "s3_ms": round(fuel / per_pystone, 2), "heap_bytes": int(heap),
                          "datagrams": sent, "bytes_out": size, "bytes_in": len(hexq) // 2}
        setup = SETUP.replace("SHELLY", "False").replace("QUERY", repr("00")).replace("PEER", '"x"') \
            .replace("PORT", "5353")
        # idle: 19 of 20 polls read nothing; the 20th also looks at the station's address (every 2 s)
        fuel, heap = slope(vm, setup, "t += 100\nr.poll(t)", 40, 80)
        rows["idle_poll"] = {"fuel": int(fuel), "s3_ms": round(fuel / per_pystone, 3), "heap_bytes": heap}
    doc = {"fuel_per_pystone": int(per_pystone), "rows": rows}
    if "--json" in argv:
        print(json.dumps(doc, sort_keys=True))
        return
    print("mDNS responder in MicroPython 1.27 (S3 ms = fuel / fuel of one pystone; S3 ~1,000 pystones/s)")
    print("heap: this VM puts larger call frames on the heap (no pystack) and each raise adds a traceback;")
    print("CircuitPython has MICROPY_ENABLE_PYSTACK, so there an idle poll allocates only the EAGAIN its")
    print("recvfrom_into raises (the platform's; no select)")
    print("%-26s %9s %8s %6s %9s" % ("case", "S3 ms", "heap B", "out", "in->out"))
    for name, row in rows.items():
        print("%-26s %9s %8s %6s %9s" % (name, row["s3_ms"], row["heap_bytes"], row.get("datagrams", ""),
                                        "%s->%s" % (row.get("bytes_in", ""), row.get("bytes_out", ""))))


if __name__ == "__main__":
    main(sys.argv[1:])
