"""Shared state of the host runtime that the CircuitPython stand-ins read (set by host/__main__.py)."""

import time

speed = 1.0            # simulated clock runs this many times faster than the computer's
_t0_real = time.monotonic()
_t0_sim = 0.0
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


def sim_seconds():
    """Seconds of simulated time since the runtime started."""
    return _t0_sim + (time.monotonic() - _t0_real) * speed


def set_speed(value):
    """Change the speed without a jump in simulated time."""
    global speed, _t0_real, _t0_sim
    _t0_sim = sim_seconds()
    _t0_real = time.monotonic()
    speed = float(value)


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
