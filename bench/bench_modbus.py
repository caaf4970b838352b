"""Modbus cost in the MicroPython VM: serving one 125-register read, one full server poll, rebuilding the image."""

from tools.mpvm import MicroVM

SETUP_MAP = """
import struct
from services.modbus.sunspec_map import SunSpecMap
from services.modbus.server import handle_frame
from meter.reading import Reading
values = {"1.8.0": (123456789, -1), "2.8.0": (4321000, -1), "16.7.0": (-1234, 0),
          "36.7.0": (-500, 0), "56.7.0": (-400, 0), "76.7.0": (-334, 0),
          "32.7.0": (2301, -1), "52.7.0": (2302, -1), "72.7.0": (2299, -1),
          "31.7.0": (123, -2), "51.7.0": (1, 0), "71.7.0": (50, -2), "14.7.0": (4998, -2)}
reading = Reading(1, values)
m = SunSpecMap(%d, serial="024d50000001", version="0.1.0")
m.update(reading)
tx = bytearray(260)
req = bytearray(struct.pack(">HHHBBHH", 1, 0, 6, 1, 3, 40054, 125))
bad = bytearray(struct.pack(">HHHBBHH", 1, 0, 6, 1, 3, 40170, 20))
n = len(req)
"""

# A whole ModbusServer.poll() with one client whose request is waiting: fake sockets inside the VM
# that copy the request in and swallow the reply, so the figure covers framing, bookkeeping and the copy.
SETUP_POLL = """
import errno, struct
from core.bus import Bus
from meter.reading import Reading
from services.modbus.server import ModbusServer
REQ = struct.pack(">HHHBBHH", 1, 0, 6, 1, 3, 40054, 125)
class Conn:
    def setblocking(self, flag):
        pass
    def recv_into(self, buf, size=0):
        buf[0:len(REQ)] = REQ
        return len(REQ)
    def send(self, data):
        return len(data)
    def close(self):
        pass
class Listener:
    def __init__(self):
        self.pending = [Conn()]
    def setsockopt(self, *a):
        pass
    def bind(self, addr):
        pass
    def listen(self, n):
        pass
    def setblocking(self, flag):
        pass
    def accept(self):
        if self.pending:
            return self.pending.pop(), ("10.0.0.2", 50000)
        raise OSError(errno.EAGAIN)
    def close(self):
        pass
class Pool:
    AF_INET = 2
    SOCK_STREAM = 1
    SOL_SOCKET = 1
    SO_REUSEADDR = 2
    def socket(self, family, kind):
        return Listener()
class Settings:
    doc = {"modbus.enable": True, "modbus.port": 502, "modbus.model": 203, "ctRatio": 1}
    def get(self, key, default=None):
        return self.doc.get(key, default)
bus = Bus()
bus.publish("reading", Reading(1, {"1.8.0": (123456789, -1), "2.8.0": (4321000, -1), "16.7.0": (-1234, 0)}))
srv = ModbusServer(Pool(), bus, Settings())
srv.start()
srv.poll(0)
"""


def main():
    with MicroVM(packages=("core", "meter", "services")) as vm:
        read_fuel, read_heap = vm.measure(SETUP_MAP % 203, "handle_frame(req, n, m, tx)", repeat=200)
        exc_fuel, exc_heap = vm.measure(SETUP_MAP % 203, "handle_frame(bad, n, m, tx)", repeat=200)
        poll_fuel, poll_heap = vm.measure(SETUP_POLL, "srv.poll(1)", repeat=100)
        up203_fuel, up203_heap = vm.measure(SETUP_MAP % 203, "m.update(Reading(1, values))", repeat=20)
        up213_fuel, up213_heap = vm.measure(SETUP_MAP % 213, "m.update(Reading(1, values))", repeat=20)
        st_fuel, st_heap = vm.measure(SETUP_MAP % 203, "m.registers()", repeat=10)
    print("serve one FC3 read of 125 registers (handle_frame): fuel=%d heap=%d bytes" % (read_fuel, read_heap))
    print("answer an out-of-map read with exception 02: fuel=%d heap=%d bytes" % (exc_fuel, exc_heap))
    print("ModbusServer.poll with one 125-register transaction (fake sockets): fuel=%d heap=%d bytes"
          % (poll_fuel, poll_heap))
    print("rebuild the model-203 image from a 13-value Reading: fuel=%d heap=%d bytes" % (up203_fuel, up203_heap))
    print("rebuild the model-213 image from a 13-value Reading: fuel=%d heap=%d bytes" % (up213_fuel, up213_heap))
    print("status listing (15 registers, for /modbus/status): fuel=%d heap=%d bytes" % (st_fuel, st_heap))
    return ("modbus: read125_fuel=%d read125_heap=%d poll_fuel=%d poll_heap=%d update203_fuel=%d update203_heap=%d"
            % (read_fuel, read_heap, poll_fuel, poll_heap, up203_fuel, up203_heap))


if __name__ == "__main__":
    main()
