"""Cost of the foundation's hot path in the MicroPython VM: a bus publish and one supervisor cycle."""

from tools.mpvm import MicroVM

SETUP = """
from core.bus import Bus
from core.module import Module
from core.supervisor import Supervisor
bus = Bus()
rings = [bus.subscribe("reading", 8) for _ in range(3)]
class Idle(Module):
    def poll(self, now):
        pass
t = [0]
def clock():
    return t[0]
sup = Supervisor(clock, watchdog=None, gc_collect=None)
for _ in range(8):
    sup.add(Idle())
sup.step()
"""


def main():
    with MicroVM() as vm:
        pub_fuel, pub_heap = vm.measure(SETUP, "bus.publish('reading', 1)", repeat=200)
        step_fuel, step_heap = vm.measure(SETUP, "sup.step()", repeat=100)
    print("bus.publish to 3 subscribers: fuel=%d heap=%d bytes" % (pub_fuel, pub_heap))
    print("supervisor cycle with 8 idle modules: fuel=%d heap=%d bytes" % (step_fuel, step_heap))
    return "core: publish_fuel=%d supervisor_cycle_fuel=%d supervisor_cycle_heap=%d" % (pub_fuel, step_fuel, step_heap)
