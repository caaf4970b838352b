"""Cost of checking a release signature (services/ota/ed25519.py): in the MicroPython VM the fuel of every step()
(one step per poll) and of the whole check, and the heap it allocates; on CPython the time of the whole check and
of its longest step. The device has no hashlib.sha512, so the VM runs the pure-Python SHA-512 (one block)."""

import hashlib
import time

from tools.mpvm import MicroVM


def _case():
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    pub = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    msg = b"MPOTA1" + hashlib.sha256(b"a manifest").digest()   # what the device checks (services/ota/signature.py)
    return pub, msg, key.sign(msg)


def labels(pub, msg, sig):
    """The kind of work of each step as the device runs it (pure-Python SHA-512)."""
    from services.ota import ed25519 as ed

    real = ed.sha512
    ed.sha512 = lambda data=b"": ed.Sha512()
    try:
        v = ed.Verifier(pub, msg, sig)
        out = list(v._gen)
    finally:
        ed.sha512 = real
    return out + ["final"]


def vm_steps(pub, msg, sig, n):
    """[(fuel of step i)] for i in 1..n, the heap allocated by the whole check, in MicroPython, and the fuel of one
    pystone there (fuel / that = S3 ms)."""
    setup = "from services.ota import ed25519 as ed\nimport micropython\nv = ed.Verifier(%r, %r, %r)\n" % (
        pub, msg, sig)
    fuels = []
    with MicroVM(packages=("core", "services")) as vm:
        per_pystone = vm.pystone_fuel()
        prev = vm.run(setup, fuel=10 ** 10)[1]
        for k in range(1, n + 1):
            fuel = vm.run(setup + "for _ in range(%d):\n    v.step()\n" % k, fuel=10 ** 10)[1]
            fuels.append(fuel - prev)
            prev = fuel
        out, _f = vm.run(setup + "m0 = micropython.mem_total()\nwhile not v.step():\n    pass\n"
                         "print(v.ok, micropython.mem_total() - m0)\n", fuel=10 ** 10)
    ok, heap = out.split()
    assert ok == "True"
    return fuels, int(heap), per_pystone


def cpython(pub, msg, sig, runs=20):
    from services.ota import ed25519 as ed

    whole, worst = [], 0.0
    for _ in range(runs):
        v = ed.Verifier(pub, msg, sig)
        t0 = time.perf_counter()
        while True:
            a = time.perf_counter()
            done = v.step()
            worst = max(worst, time.perf_counter() - a)
            if done:
                break
        whole.append(time.perf_counter() - t0)
        assert v.ok
    whole.sort()
    return whole[len(whole) // 2] * 1000, worst * 1000


def main():
    pub, msg, sig = _case()
    kinds = labels(pub, msg, sig)
    fuels, heap, per_pystone = vm_steps(pub, msg, sig, len(kinds))
    total = sum(fuels)
    per_kind = {}
    for kind, fuel in zip(kinds, fuels):
        per_kind[kind] = max(per_kind.get(kind, 0), fuel)
    worst_i = max(range(len(fuels)), key=lambda i: fuels[i])
    print("signature check in MicroPython: %d steps (one per poll), %.1f M fuel in all (%.1f S3 s), worst step %.2f M"
          " fuel (%.0f S3 ms, %s), %d KB heap allocated in all (garbage as it goes; a step keeps a few KB)"
          % (len(fuels), total / 1e6, total / per_pystone / 1000, fuels[worst_i] / 1e6, fuels[worst_i] / per_pystone,
             kinds[worst_i], heap // 1024))
    for kind in ("pow", "sha512", "scalar", "table", "ladder", "final"):
        if kind in per_kind:
            print("  worst %-6s step: %.2f M fuel (%d steps)" % (kind, per_kind[kind] / 1e6, kinds.count(kind)))
    med_ms, worst_ms = cpython(pub, msg, sig)
    print("on CPython: whole check %.2f ms (median of 20), longest step %.3f ms" % (med_ms, worst_ms))
    return "ota_sig: steps=%d total_fuel=%.0fM worst_step_fuel=%.2fM worst_step_s3_ms=%.0f heap_kb=%d " \
           "cpython_ms=%.2f" % (len(fuels), total / 1e6, fuels[worst_i] / 1e6, fuels[worst_i] / per_pystone,
                                heap // 1024, med_ms)


if __name__ == "__main__":
    import os
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path[:0] = [os.path.join(root, "host", "cp"), root]
    main()
