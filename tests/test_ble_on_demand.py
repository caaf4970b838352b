"""The Improv BLE transport is built only when a provisioning window first opens (issue 19 point 2)."""

from core import improv
from services.network.ble_on_demand import OnDemandTransport


class FakeTransport:
    def __init__(self):
        self.calls = []
        self.connected = False
        self.advertising = False

    def start(self):
        self.calls.append("start")

    def set_state(self, state):
        self.calls.append(("state", state))

    def advertise(self, on):
        self.advertising = on
        self.calls.append(("advertise", on))

    def read(self):
        return b"x"

    def set_error(self, error):
        self.calls.append(("error", error))


class Log:
    def __init__(self):
        self.errors = []

    def error(self, msg, *args):
        self.errors.append(msg % args)


def test_nothing_is_built_while_no_window_is_open():
    built = []
    t = OnDemandTransport(lambda: built.append(1) or FakeTransport())
    t.start()
    t.set_state(improv.AUTHORIZATION_REQUIRED)
    for _ in range(3):
        t.advertise(False)
    t.discard_input()
    t.set_error(improv.NO_ERROR)
    t.send_result(b"r")
    t.disconnect()
    assert built == [] and t.connected is False and t.advertising is False and t.read() is None and not t.loaded


def test_the_first_window_builds_it_once_with_the_state_set_before():
    made = []

    def factory():
        made.append(FakeTransport())
        return made[-1]

    t = OnDemandTransport(factory)
    t.set_state(improv.AUTHORIZED)
    t.advertise(True)
    t.advertise(False)
    t.advertise(True)
    assert len(made) == 1 and t.loaded
    assert made[0].calls[:3] == ["start", ("state", improv.AUTHORIZED), ("advertise", True)]
    assert t.read() == b"x" and t.advertising is True


def test_out_of_memory_building_it_leaves_setup_to_the_access_point():
    tries = []
    log = Log()

    def factory():
        tries.append(1)
        raise MemoryError("memory allocation failed, allocating 8192 bytes")

    t = OnDemandTransport(factory, log)
    t.advertise(True)
    t.advertise(True)   # not tried again until the next restart: no thrashing of the heap every poll
    assert tries == [1] and not t.loaded and "MemoryError" in t.failed
    assert log.errors and "BLE provisioning off until restart" in log.errors[0]
    assert t.connected is False and t.read() is None
