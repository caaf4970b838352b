"""Shared state of the host runtime that the CircuitPython stand-ins read (set by host/__main__.py)."""

import time

speed = 1.0            # simulated clock runs this many times faster than the computer's
meter_source = None    # object with read_available(now_s) -> bytes, fed to the IR head UART
state_dir = "."        # the simulated CIRCUITPY drive
forced_free_heap = None  # when set, gc.mem_free() on the firmware side reports this (tests the 503 path)
reset_count = 0        # how often the firmware was restarted in this process
last_reset_reason = None  # "WATCHDOG" after a crash restart, else None
mac = b"\x02\x4d\x50\x00\x00\x01"
# The simulated air: networks the wifi stand-in can scan and join (ssid, password, rssi, channel).
# A test replaces it in-process, or from outside with .host_control/air holding a JSON list of such objects.
air = [
    {"ssid": "HostNetwork", "password": "host-password", "rssi": -48, "channel": 6},
    {"ssid": "Neighbour", "password": "not-yours-1", "rssi": -77, "channel": 11},
]
ap_stations = []       # phones joined to the device's access point (wifi.radio.stations_ap)
ble = True             # False: a board without BLE (_bleio.adapter is None)
mdns_port = None       # where the mdns stand-in answers DNS queries (host/__main__.py --mdns-port)
reset_reason = None    # forces microcontroller.cpu.reset_reason (a ResetReason name) when set


# The simulated clock. At --speed N it runs N times faster than the computer's, but the host runtime's loop bounds
# it (clamp()): one loop cycle may span at most STEP_S of simulated time, so a PC too slow (or stopped) to keep up
# slows the simulation instead of letting it leap past the firmware (at --speed 900 one cycle of 50 ms would be
# 45 simulated seconds: every reading stale). Behind the nominal clock, the loop runs without waiting and
# catches up STEP_S per cycle, for at most CATCH_UP_S of real time; lag beyond that is forgiven (the simulation
# is slower from then on, never faster). A stretch of GRACE_S real seconds without any cycle (a firmware stage
# that waits on ticks outside the loop: start, an orderly stop) lets simulated time run on at real time.
# At speed <= 1 the clamp never binds. The NTP stand-in's thread reads the clock too: the state is one tuple,
# swapped whole.
STEP_S = 2.0           # the meter's IR head reads 2 s of 9600 baud per poll; readings go stale after 10 s
CATCH_UP_S = 5.0
GRACE_S = 2.0
# (real anchor, nominal simulated time there, speed, real time of the cycle's start, simulated time there, step
# or None when unclamped)
_clock = (time.monotonic(), 0.0, 1.0, 0.0, 0.0, None)


def _read(c, now):
    r0, n0, sp, rb, sb, step = c
    nominal = n0 + (now - r0) * sp
    if step is None:
        return nominal
    cap = sb + step + max(0.0, now - rb - GRACE_S)
    return nominal if nominal < cap else cap


def sim_seconds():
    """Seconds of simulated time since the runtime started."""
    return _read(_clock, time.monotonic())


def set_speed(value):
    """Change the speed without a jump in simulated time."""
    global speed, _clock
    now = time.monotonic()
    s = _read(_clock, now)
    speed = float(value)
    step = _clock[5]
    _clock = (now, s, speed, now, s, step)


def clamp(step=STEP_S):
    """Bound the simulated time of one loop cycle to step seconds (None: free running, from where it is now)."""
    global _clock
    now = time.monotonic()
    s = _read(_clock, now)
    _clock = (now, s, speed, now, s, step)


def cycle():
    """A loop cycle starts: the clamp counts from here. Returns how far (simulated s) the clock is behind the
    nominal one: > 0 means the loop should not wait."""
    global _clock
    now = time.monotonic()
    r0, n0, sp, _rb, _sb, step = c = _clock
    if step is None:
        return 0.0
    s = _read(c, now)
    behind = n0 + (now - r0) * sp - s
    most = CATCH_UP_S * sp
    if behind > most:     # forgive what cannot be caught up: the nominal clock moves back to most ahead
        n0 -= behind - most
        behind = most
    _clock = (r0, n0, sp, now, s, step)
    return behind


class HostReset(BaseException):
    """Raised by microcontroller.reset()/supervisor.reload(): the runner restarts code.py."""

    def __init__(self, kind):
        BaseException.__init__(self, kind)
        self.kind = kind


def control(name):
    """A test's instruction to the running firmware: contents of <state>/.host_control/<name>, or None."""
    import os

    try:
        with open(os.path.join(state_dir, ".host_control", name)) as f:
            return f.read().strip()
    except OSError:
        return None


def networks():
    """The networks on the air now: .host_control/air (JSON) when a test wrote one, else air."""
    text = control("air")
    if text:
        import json

        return json.loads(text)
    return air
