"""OTA costs: the whole application staged from a local server (polls, bytes per poll, worst poll on CPython), and in
the MicroPython VM the fuel and heap of validating this repository's manifest and of hashing one 4 KB slice."""

import json
import os
import runpy
import shutil
import tempfile
import time
import types

from tools.mpvm import MicroVM

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def stage_whole_app():
    import socketpool
    from services.ota.service import OtaService
    from tests.ota_server import UpdateServer, keys_text, make_release

    work = tempfile.mkdtemp(prefix="bench-ota-")
    old = os.getcwd()
    pub = os.path.join(work, "pub")
    os.makedirs(pub)
    manifest = make_release(pub, "9.0.0")
    server = UpdateServer(pub)
    drive = os.path.join(work, "drive")
    os.makedirs(drive)
    shutil.copy(os.path.join(ROOT, "code.py"), drive)   # everything else is new: the whole application is staged
    with open(os.path.join(drive, "ota_keys.txt"), "w") as f:   # the test key that signed the release
        f.write(keys_text())
    boot = types.SimpleNamespace(**runpy.run_path(os.path.join(ROOT, "boot.py"), run_name="boot_ns"))

    class Settings:
        def get(self, key, default=None):
            return {"ota.url": server.url}.get(key, default)

    done = []
    svc = OtaService(socketpool.SocketPool(None), Settings(), "0.0.1", boot, restart=done.append)
    svc.first_check_ms = 0
    os.chdir(drive)
    try:
        svc.start()
        now, polls, worst, t0 = 0, 0, 0.0, time.monotonic()
        while not done:
            if svc.available is not None and svc.phase == "idle" and not svc.last_error:
                svc.start_update()
            a = time.perf_counter()
            svc.poll(now)
            worst = max(worst, time.perf_counter() - a)
            polls += 1
            now += 5
            time.sleep(0.005)   # the firmware loop's idle sleep (code.py IDLE_SLEEP_S)
        wall = time.monotonic() - t0
    finally:
        os.chdir(old)
        server.close()
        shutil.rmtree(work, ignore_errors=True)
    return manifest, polls, worst * 1000, wall


def main():
    manifest, polls, worst_ms, wall = stage_whole_app()
    n, total = len(manifest["files"]), sum(f["size"] for f in manifest["files"])
    print("whole application checked, hashed and staged: %d files, %d bytes, %d loop cycles of 5 ms sleep"
          " (%.0f bytes/cycle), worst poll %.2f ms on CPython, %.2f s"
          % (n, total, polls, total / polls, worst_ms, wall))
    text = json.dumps(manifest)
    with MicroVM(packages=("core", "services")) as vm:
        per_pystone = vm.pystone_fuel()
        setup = "from services.ota import manifest as m\nfrom services.ota.stream import new_sha256\n" \
                "T = %r\nB = bytes(4096)\nh = new_sha256()\n" % text
        parse_fuel, parse_heap = vm.measure(setup, "m.parse_manifest(T)", repeat=3)
        hash_fuel, hash_heap = vm.measure(setup, "h.update(B)", repeat=20)
    # S3 ms = fuel / one pystone's fuel (the S3 does ~1,000 pystones/s). The manifest is parsed in one poll.
    print("manifest of this repository: %d bytes; parse + validate in MicroPython: fuel=%d (%.0f S3 ms, one poll) "
          "heap=%d bytes" % (len(text), parse_fuel, parse_fuel / per_pystone, parse_heap))
    print("SHA-256 of a 4 KB slice in MicroPython: fuel=%d (%.1f S3 ms; the S3's hashlib is mbedTLS, this is the "
          "VM's C code through the same yardstick) heap=%d bytes" % (hash_fuel, hash_fuel / per_pystone, hash_heap))
    return "ota: files=%d bytes=%d bytes_per_poll=%.0f manifest_bytes=%d parse_heap=%d parse_s3_ms=%.0f " \
           "hash4k_fuel=%d" % (n, total, total / polls, len(text), parse_heap, parse_fuel / per_pystone, hash_fuel)
