"""Decoder cost: MicroPython-VM fuel and heap per telegram over tests/captures; CPython speed vs smllib."""

import binascii
import os
import time

from tools.mpvm import MicroVM
from tests import CAPTURES as _CAPTURES

CAPTURES = _CAPTURES
DAMAGED = ("dzg-dwsb20-3-corrupt.hex", "itron-openway3hz-1.hex")


def complete_captures():
    """(name, bytes) of every complete SML capture that is not damaged."""
    out = []
    for name in sorted(os.listdir(CAPTURES)):
        if name.endswith(".hex") and "partial" not in name and name not in DAMAGED:
            with open(os.path.join(CAPTURES, name)) as f:
                out.append((name, binascii.unhexlify(f.read().strip())))
    return out


SETUP = """
import binascii
from meter.sml import SmlResult, decode_frame
src = binascii.unhexlify(%r)
n = len(src)
buf = bytearray(n)
res = SmlResult()
assert decode_frame(bytearray(src), n, res), res.error
"""
# Copying the telegram into the reused buffer stands for the framer handing it over; it costs no heap.
WORK = """
buf[:] = src
decode_frame(buf, n, res)
"""


def vm_figures(captures, repeat=5):
    rows = []
    with MicroVM() as vm:
        for name, data in captures:
            setup = SETUP % binascii.hexlify(data).decode()
            fuel, heap = vm.measure(setup, WORK, repeat=repeat)
            rows.append((name, len(data), fuel, heap))
    return rows


def cpython_speedup(captures, rounds=30):
    """smllib's time / ours on the same telegrams: full frame read (CRC) and list decoding."""
    from smllib import SmlStreamReader

    from meter.sml import SmlResult, decode_frame

    res = SmlResult()
    bufs = [bytearray(d) for _, d in captures]

    def ours():
        for (_, d), b in zip(captures, bufs):
            b[:] = d
            if not decode_frame(b, len(d), res):
                raise AssertionError(res.error)

    def theirs():
        for _, d in captures:
            r = SmlStreamReader()
            r.add(d)
            frame = r.get_frame()
            frame.parse_frame()

    def best(fn):
        t = None
        for _ in range(rounds):
            t0 = time.perf_counter()
            fn()
            dt = time.perf_counter() - t0
            t = dt if t is None or dt < t else t
        return t

    ours()
    theirs()
    t_ours = best(ours)
    t_theirs = best(theirs)
    return t_theirs / t_ours, t_ours, t_theirs


def main():
    caps = complete_captures()
    rows = vm_figures(caps)
    for name, size, fuel, heap in rows:
        print("  %-28s %4d bytes  fuel=%8d  heap=%5d" % (name, size, fuel, heap))
    fuel = sum(r[2] for r in rows) / len(rows)
    heap = sum(r[3] for r in rows) / len(rows)
    speedup, t_ours, t_theirs = cpython_speedup(caps)
    print("  CPython: ours %.3f ms, smllib %.3f ms for %d telegrams" % (t_ours * 1e3, t_theirs * 1e3, len(caps)))
    print("  targets: fuel <= 1500000, heap <= 512, speedup >= 5")
    return "decode: fuel_per_telegram=%d heap_per_telegram=%d cpython_speedup_vs_smllib=%.1f" % (fuel, heap, speedup)


if __name__ == "__main__":
    print(main())
