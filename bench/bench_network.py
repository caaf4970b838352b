"""Network costs in the MicroPython VM: a captive-DNS answer and an Improv frame (reassembly, checksum, encode)."""

import os

from tools.mpvm import MicroVM

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NET = os.path.join(ROOT, "services", "network")

# dnspython's query for captive.apple.com/A (id 0x1234, RD): what a phone asks first on the setup network.
QUERY = bytes.fromhex("1234010000010000000000000763617074697665056170706c6503636f6d0000010001")

DNS_SETUP = """
from dns_wire import answer_into
q = bytearray(%r)
n = len(q)
out = bytearray(512)
ip = bytes((192, 168, 4, 1))
""" % QUERY
DNS_WORK = "answer_into(q, n, out, ip)"

IMPROV_SETUP = """
import improv
frame = improv.encode(improv.WIFI_SETTINGS, [b"Home Network 2.4", b"correct horse battery staple"])
parts = [frame[i:i + 20] for i in range(0, len(frame), 20)]
r = improv.Reassembler()
"""
IMPROV_WORK = """
for p in parts:
    r.add(p)
e, c, d = r.take()
improv.strings(d)
"""


def main():
    files = [(os.path.join(NET, "dns_wire.py"), "dns_wire.py"), (os.path.join(ROOT, "core", "improv.py"), "improv.py")]
    with MicroVM(extra_files=files) as vm:
        dns_fuel, dns_heap = vm.measure(DNS_SETUP, DNS_WORK, repeat=20)
        imp_fuel, imp_heap = vm.measure(IMPROV_SETUP, IMPROV_WORK, repeat=20)
    print("captive DNS answer (A query, 35 B): %.0f fuel, %.0f heap bytes" % (dns_fuel, dns_heap))
    print("Improv WiFi settings frame (49 B in 3 writes): %.0f fuel, %.0f heap bytes" % (imp_fuel, imp_heap))
    return "network: captive DNS answer %.0f fuel / %.0f B heap; Improv frame %.0f fuel / %.0f B heap" % (
        dns_fuel, dns_heap, imp_fuel, imp_heap)


if __name__ == "__main__":
    main()
