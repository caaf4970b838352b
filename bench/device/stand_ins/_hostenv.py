"""The host runtime's shared state (host/cp/_hostenv.py) for CircuitPython's unix port: same names, no CPython."""

import time

speed = 1              # the device bench runs in real time
_t0_ns = time.monotonic_ns()
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


def sim_ms():
    """Milliseconds since the bench started (an int: 30-bit floats cannot hold milliseconds for long)."""
    return (time.monotonic_ns() - _t0_ns) // 1_000_000


def sim_seconds():
    """Seconds since the bench started."""
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
