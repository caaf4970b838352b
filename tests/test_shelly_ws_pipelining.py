"""The Shelly WebSocket session with pipelined requests (issue 26, finding 11): a client that sends 20 requests at
once and reads at its own pace gets all 20 answers, in order, instead of being dropped as a slow reader."""

import errno
import json

from services.emulation.shelly_ws import ShellyWs
from tests.test_shelly_emulation import IDENT, THREE_PHASE, FakeBus, FakeSettings, _client_frame
from meter.reading import Reading


class FlowTcp:
    """An adopted socket with real flow control: recv_into gives at most the buffer's size of what the client sent;
    send takes only what fits in the free part of a small send buffer, which the client empties as it reads."""

    def __init__(self, sndbuf=2048):
        self.incoming = bytearray()
        self.sndbuf = sndbuf
        self.in_flight = bytearray()     # sent by the server, not yet read by the client
        self.read = bytearray()          # what the client has read
        self.closed = False

    def setblocking(self, flag):
        pass

    def recv_into(self, buf, n=0):
        if not self.incoming:
            raise OSError(errno.EAGAIN)
        k = min(len(buf), len(self.incoming), n or len(buf))
        buf[:k] = self.incoming[:k]
        del self.incoming[:k]
        return k

    def send(self, data):
        room = self.sndbuf - len(self.in_flight)
        if room <= 0:
            raise OSError(errno.EAGAIN)
        data = bytes(data[:room])
        self.in_flight.extend(data)
        return len(data)

    def client_reads(self, n):
        self.read.extend(self.in_flight[:n])
        del self.in_flight[:n]

    def close(self):
        self.closed = True


def _frames(data):
    """Server frames (unmasked, FIN) in data: [(opcode, payload)]."""
    out = []
    i = 0
    while i + 2 <= len(data):
        size = data[i + 1] & 0x7F
        pos = i + 2
        if size == 126:
            size = (data[i + 2] << 8) | data[i + 3]
            pos = i + 4
        if pos + size > len(data):
            break
        out.append((data[i] & 0x0F, bytes(data[pos:pos + size])))
        i = pos + size
    return out


def test_twenty_pipelined_requests_get_twenty_answers():
    ws = ShellyWs(FakeBus(Reading(0, THREE_PHASE)), FakeSettings({"emulation.shelly": True}), IDENT)
    sock = FlowTcp()
    ws.adopt(sock, ("10.0.0.3", 5000))
    for i in range(1, 21):
        sock.incoming.extend(_client_frame(1, b'{"id":%d,"src":"ha","method":"Shelly.GetStatus"}' % i))
    for t in range(200):                              # the client reads 1 KB between two polls of the firmware
        ws.poll(t * 10)
        sock.client_reads(1024)
        if not sock.incoming and not sock.in_flight and t > 5:
            break
    answers = [json.loads(p) for op, p in _frames(sock.read) if op == 1]
    assert [a["id"] for a in answers] == list(range(1, 21))
    assert all("em:0" in a["result"] for a in answers)         # the whole status, 1.2 KB each
    assert ws.sessions() == 1 and not sock.closed and "slow_reader" not in ws.counters


def test_a_client_that_never_reads_is_not_buffered_for():
    ws = ShellyWs(FakeBus(Reading(0, THREE_PHASE)), FakeSettings({"emulation.shelly": True}), IDENT)
    sock = FlowTcp()
    ws.adopt(sock, ("10.0.0.3", 5000))
    for i in range(200):
        sock.incoming.extend(_client_frame(1, b'{"id":%d,"method":"EM.GetStatus"}' % i))
    for t in range(100):
        ws.poll(t * 10)                               # nobody reads: the session stops taking requests
    assert len(ws._sessions[0].out) <= ShellyWs.max_out if ws.sessions() else True
    assert len(sock.incoming) > 0                     # the rest waits in the client's socket, not in our heap
