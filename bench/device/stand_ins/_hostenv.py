"""The host runtime's shared state (host/cp/_hostenv.py) for CircuitPython's unix port: same names, no CPython."""

import benchclock

speed = 1
meter_source = None    # object with read_available(now_s, uart) -> bytes, fed to the IR head UART
state_dir = "."        # the simulated CIRCUITPY drive (the working directory)
forced_free_heap = None
reset_count = 0
last_reset_reason = None
mac = b"\x02\x4d\x50\x00\x00\x01"
air = [
    {"ssid": "HostNetwork", "password": "host-password", "rssi": -48, "channel": 6},
]
ap_stations = []
ble = True             # False: a board without BLE (_bleio.adapter is None)
mdns_port = None
reset_reason = None


# The device's clock. The bench runs the firmware as an ESP32-S3 would: its own work takes `factor` times as long as
# on this interpreter (runner.py sets it from pystone: bench pystones / the S3's; both timed in this process's CPU
# time, bench/device/meterplus_s3/benchclock.c, so other processes on the machine do not count), the loop's sleeps
# take as long as they say, and the peers' work takes no device time at all. runner.py brackets each supervisor step
# with begin_step()/end_step() and adds each sleep with advance(); everything the firmware reads
# (supervisor.ticks_ms, time.monotonic) is this clock.
factor = 1.0
_device_us = 0         # device time at the start of the current stretch of counted CPU time (or now, between steps)
_step_t0 = None        # the interpreter's ticks_us when the current stretch began; None between steps and in pause()
_step_start_us = 0     # device time when the current step began (pause()/resume() inside a step keep it)
_in_step = False
stalled_us = 0         # device time the chip stood still in stall() (flash erases and programs), in all


_CPU_WRAP = 1 << 30   # benchclock.cpu_us() wraps here (a small int)


def cpu_us_since(t0):
    """CPU microseconds of this process since benchclock.cpu_us() read t0."""
    return (benchclock.cpu_us() - t0) % _CPU_WRAP


def device_us():
    """Microseconds of device time since the bench started."""
    if _step_t0 is None:
        return _device_us
    return _device_us + int(cpu_us_since(_step_t0) * factor)


def begin_step():
    global _step_t0, _step_start_us, _in_step
    _step_start_us = _device_us
    _in_step = True
    _step_t0 = benchclock.cpu_us()


def end_step():
    """Close the current step; its device microseconds (from begin_step(), stalls included, sleeps not)."""
    global _device_us, _step_t0, _in_step
    _device_us = device_us()
    _step_t0 = None
    _in_step = False
    return _device_us - _step_start_us


def pause():
    """Stop counting the step's CPU time (the bench's own measuring inside a step); the step goes on."""
    global _device_us, _step_t0
    _device_us = device_us()
    _step_t0 = None


def resume():
    global _step_t0
    _step_t0 = benchclock.cpu_us()


def advance(us):
    """Device time that passes without work (the loop's sleep; a sleep inside a step is not the step's time)."""
    global _device_us, _step_start_us
    _device_us += us
    if _in_step:
        _step_start_us += us


def stall(us):
    """The whole chip stands still for us (a flash erase or program: code and PSRAM sit behind the same cache): inside
    a step the step grows by it, between steps the clock moves on."""
    global _device_us, stalled_us
    _device_us += us
    stalled_us += us


def sim_ms():
    """Milliseconds of device time since the bench started (an int: 30-bit floats cannot hold them for long)."""
    return device_us() // 1000


def sim_seconds():
    """Seconds of device time since the bench started."""
    return sim_ms() / 1000


class HostReset(BaseException):
    """Raised by microcontroller.reset()/supervisor.reload(): the bench stops there."""

    def __init__(self, kind):
        BaseException.__init__(self, kind)
        self.kind = kind


def control(name):
    """No test instructions on the device bench."""
    return None


def networks():
    """The simulated air."""
    return air
