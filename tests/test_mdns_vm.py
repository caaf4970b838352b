"""The mDNS responder inside MicroPython 1.27 (ring 2): it imports and runs there, and sends the same bytes as under
CPython for the same packets (probes, announcements, QM, QU and legacy answers, a conflict, goodbyes)."""

from bench.bench_mdns import QUERIES, SETUP
from tools.mpvm import MicroVM

SCRIPT = r'''
import binascii
sock.sent = 0
out = []
def grab(data, addr):
    out.append(binascii.hexlify(bytes(data)).decode() + "@" + str(addr[1]))
    return len(data)
sock.sendto = grab
for h, port in PACKETS:
    sock.inbox.append((binascii.unhexlify(h), ("192.168.1.20", port)))
    t += 1100
    r.poll(t)
r.stop()
for line in out:
    print("@@", line)
'''

# a response claiming our host name with another address: the responder renames itself and probes again
CONFLICT = ("000084000000000100000000" "166d65746572706c75732d303234643530303030303031056c6f63616c00"
            "0001800100000078" "0004c0a80163", 5353)


def run_cpython(packets):
    ns = {}
    setup = SETUP.replace("SHELLY", "True").replace("QUERY", repr("00")).replace("PEER", '"x"') \
        .replace("PORT", "5353")
    exec(setup, ns)
    ns["PACKETS"] = packets
    lines = []
    ns["print"] = lambda *a: lines.append(" ".join(str(x) for x in a))
    exec(SCRIPT, ns)
    return lines


def test_the_responder_sends_the_same_bytes_in_micropython():
    packets = [QUERIES[k] for k in sorted(QUERIES)] + [CONFLICT] + [QUERIES["a_qu"]]
    setup = SETUP.replace("SHELLY", "True").replace("QUERY", repr("00")).replace("PEER", '"x"') \
        .replace("PORT", "5353")
    with MicroVM(packages=("core", "meter", "services")) as vm:
        out, _fuel = vm.run(setup + "\nPACKETS = %r\n" % (packets,) + SCRIPT)
    vm_lines = [line for line in out.splitlines() if line.startswith("@@")]
    cp_lines = run_cpython(packets)
    assert len(vm_lines) >= 6 and vm_lines == cp_lines
    assert any(line.endswith("@40000") for line in vm_lines)            # the legacy answer went to its asker
