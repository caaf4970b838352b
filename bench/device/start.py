"""The start on the device clock: boot.py, then code.py from its first line to the first answer and the first reading.

Started by bench/bench_device.py as `micropython -X heapsize=N start.py <seconds> start [flags]` in a staged drive
(runner.py's stand-ins and peers). Like a reset of the chip: boot.py runs, then code.py's imports and build() and the
loop, every bit of it on the device clock (runner.py's _hostenv: this interpreter's CPU time times the S3 factor), with
a client asking /api/v1/system/alive as fast as it is answered and an MQTT broker waiting for the first reading. The
drive folder is kept between runs by the caller, so a second run is a start with the history file already there.

Reports (device ms): boot.py, code.py's imports, each feature's wiring (bench_device.module_costs() has each
module's own import time), the first alive answer, the first power reading on MQTT, every feature wired (up_ms:
the run goes on to it, so the figures below cover the features wired after the first reading too), and the
watchdog's longest gap between arming or feeding and the next feed: the start trips the watchdog when that gap is
over its timeout. WiFi association, done by the radio's firmware, is not in these figures (the stand-in joins at once).
With `flash=typ` or `flash=max` (runner.py) every drive write stalls the clock as the flash chip would (hw/flashfs.py).
"""

import gc
import sys

import runner
from runner import _hostenv, _unix_time, socketpool

MAX_SECONDS = runner.SECONDS
FIRMWARE_TOPS = runner.RESIDENT_TOPS


class FirstReading(runner.MqttBroker):
    """The broker, noting when the first power reading arrives (Home Assistant's power entity)."""

    first_us = None

    def _time(self, payload):
        if self.first_us is None:
            self.first_us = _hostenv.device_us()


def timed_exec(path, scope):
    """Run a file's source in scope on the device clock (as one long step: nothing else runs meanwhile)."""
    with open(path) as f:
        source = f.read()
    _hostenv.begin_step()
    try:
        exec(source, scope)
    finally:
        _hostenv.end_step()


def main():
    runner.write_settings()
    if runner.FLASH is not None:
        import flashfs

        flashfs.install(runner.FLASH, runner._builtin_os)   # every drive write of the start stalls the clock
    clock = runner.Clock()
    clock.step_start = 0
    meter = runner.SmlMeter(clock)
    _hostenv.meter_source = meter
    broker = FirstReading(clock, meter)
    socketpool.peers[1883] = broker.accept
    ntp = runner.NtpServer()
    for name in runner.stand_ins():      # C modules on the device: loaded before the chip starts
        __import__(name)
    import microcontroller

    gc.collect()
    result = {"mode": "start", "heap_total": gc.mem_free() + gc.mem_alloc()}
    t_real = _unix_time.ticks_ms()
    start_us = _hostenv.device_us()
    timed_exec("boot.py", {"__name__": "__main__"})
    result["boot_py_ms"] = (_hostenv.device_us() - start_us) // 1000
    # CircuitPython starts code.py in a fresh VM after boot.py: its heap is gone.
    gc.collect()
    code_start = _hostenv.device_us()
    source = runner.code_py_without_run()
    scope = {"__name__": "__main__"}
    _hostenv.begin_step()
    exec(source, scope)
    imported = _hostenv.device_us()
    features = {}
    wire_feature = scope["wire_feature"]

    def timed_wire_feature(app, name, module_name):
        t = _hostenv.device_us()
        wire_feature(app, name, module_name)
        features[name] = (_hostenv.device_us() - t) // 1000

    scope["wire_feature"] = timed_wire_feature
    app = scope["build"]()
    _hostenv.end_step()
    built = _hostenv.device_us()
    sup = app.supervisor
    client = None
    alive_us = None
    up_us = None          # every feature wired ("Meter Plus up")
    steps = 0
    worst_step = 0
    while (_hostenv.device_us() - code_start) < MAX_SECONDS * 1000000:
        clock.step_start = clock.mark()
        _hostenv.begin_step()
        sup.step()
        scope["wire_next"](app)
        spent = _hostenv.end_step()
        steps += 1
        if spent > worst_step:
            worst_step = spent
        meter.tick(_hostenv.sim_seconds())
        broker.poll()
        socketpool.pump_udp()
        if alive_us is None:
            if client is None:
                client = runner.HttpClient("/api/v1/system/alive", clock, "alive")
            if client.done():
                if client.status == 200:
                    alive_us = _hostenv.device_us()
                client = None
        if up_us is None and not app.starting:
            up_us = _hostenv.device_us()
        # On to the last feature's wiring: the features after the first reading (code.py) are still part of the
        # start the watchdog and the flash figures must cover (the history file of a fresh drive among them).
        if alive_us is not None and broker.first_us is not None and up_us is not None:
            break
        _hostenv.advance(runner.IDLE_SLEEP_MS * 1000)
    wd = microcontroller.watchdog
    if runner.FLASH is not None:
        import flashfs

        fl = flashfs.summary()
        result["flash"] = {"figure": fl["figure"], "erases": fl["erases"], "programs": fl["programs"],
                           "stall_ms": fl["stall_us"][runner.FLASH] // 1000}
    result.update({
        "imports_ms": (imported - code_start) // 1000,
        "build_ms": (built - imported) // 1000,
        "code_to_loop_ms": (built - start_us) // 1000,
        # From the chip's start: boot.py's time is in both.
        "alive_ms": None if alive_us is None else (alive_us - start_us) // 1000,
        "first_reading_ms": None if broker.first_us is None else (broker.first_us - start_us) // 1000,
        "up_ms": None if up_us is None else (up_us - start_us) // 1000,
        "features_ms": features,
        "modules_loaded": sorted(n for n in sys.modules if n.split(".")[0] in FIRMWARE_TOPS),
        "loop_steps": steps,
        "worst_loop_step_ms": worst_step // 1000,
        "watchdog_timeout_s": wd.timeout,
        "watchdog_longest_gap_ms": wd.longest_gap_ms,
        "watchdog_tripped": wd.tripped,
        "watchdog_feeds": wd.feeds,
        "factor": _hostenv.factor,
        "real_ms": _unix_time.ticks_diff(_unix_time.ticks_ms(), t_real),
        "ntp_answers": ntp.answers,
        "features_off": app.features_off,
        "module_states": {name: m["state"] for name, m in sup.describe()["modules"].items()},
        "log": runner.log_lines(app)[-20:],
    })
    sup.stop_all()
    print("@@BENCH@@ " + runner.json.dumps(result))


def set_factor():
    """The device clock's factor from pystone, as runner.main() sets it (or the caller's `factor=N` flag)."""
    for flag in runner.FLAGS:
        if flag.startswith("factor="):
            _hostenv.factor = float(flag[7:])
            return
    samples = runner.pystone_samples(runner.PYSTONE_LOOPS)
    _hostenv.factor = samples[1] / runner.S3_PYSTONES


try:
    set_factor()
    main()
except MemoryError as exc:
    print("@@BENCH@@ " + runner.json.dumps({"memory_error": str(exc)}))
    sys.exit(4)
