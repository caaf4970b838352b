"""IR head driver with a recorded-bytes UART: chunked reads, bounded polls, raw ring, sinks, pull mode."""

import binascii
import os

from drivers.ir_head import IrHead
from meter.framer import D0, SML
from meter.sml import SmlResult, decode_frame
from tests import CAPTURES as _CAPTURES

CAPTURES = _CAPTURES


def cap(name):
    with open(os.path.join(CAPTURES, name), "rb") as f:
        data = f.read()
    return binascii.unhexlify(data.strip()) if name.endswith(".hex") else data


class FakeUart:
    """busio.UART with timeout=0 as the firmware uses it: readinto returns None when nothing is waiting."""

    def __init__(self, baudrate=9600):
        self.rx = bytearray()
        self.written = bytearray()
        self.baudrate = baudrate
        self.chunk = None  # at most this many bytes per readinto (like a FIFO that fills as time passes)
        self.reads = 0

    @property
    def in_waiting(self):
        return len(self.rx)

    def readinto(self, buf):
        n = min(len(buf), len(self.rx))
        if self.chunk:
            n = min(n, self.chunk)
        if not n:
            return None
        buf[:n] = self.rx[:n]
        del self.rx[:n]
        self.reads += 1
        return n

    def write(self, data):
        self.written += data
        return len(data)

    def reset_input_buffer(self):
        self.rx = bytearray()


def collect(head):
    got = []

    def sink(buf, n, fmt, now_ms):
        got.append((bytes(buf[:n]), fmt, now_ms))

    head.sink = sink
    return got


def test_telegrams_split_across_polls_at_every_offset():
    tele = cap("holley-dtz541-1.hex")
    for cut in range(0, len(tele) + 1, 7):
        uart = FakeUart()
        head = IrHead(uart, "sml")
        got = collect(head)
        uart.rx += tele[:cut]
        head.poll(0)
        uart.rx += tele[cut:] + tele
        head.poll(1000)
        assert [g[0] for g in got] == [tele, tele], cut
        assert got[0][2] == 1000


def test_poll_is_bounded_and_nothing_is_lost_between_polls():
    tele = cap("ebz-dd3-1.hex")
    uart = FakeUart()
    head = IrHead(uart, "auto")
    head.MAX_READ = 500
    got = collect(head)
    uart.rx += tele * 6  # 2112 bytes waiting
    head.poll(0)
    assert len(uart.rx) == len(tele) * 6 - 500  # one poll took its budget only
    for t in range(1, 10):
        head.poll(t)
    assert len(got) == 6 and all(g[0] == tele for g in got)
    assert head.bytes_total == len(tele) * 6


def test_garbage_and_mixed_formats_in_auto_mode():
    stream = (b"\x00\xff" * 50 + cap("iskra-mt631-1.hex") + b"noise" + cap("d0-ebz-dd3-2r06-1.txt")
              + cap("dzg-dvs7420-1.hex"))
    uart = FakeUart()
    uart.chunk = 13
    head = IrHead(uart, "auto")
    got = collect(head)
    uart.rx += stream
    for t in range(200):
        head.poll(t)
    assert [g[1] for g in got] == [SML, D0, SML]
    assert head.framer.garbage >= 105


def test_sml_mode_ignores_d0_and_d0_mode_ignores_sml():
    uart = FakeUart()
    head = IrHead(uart, "sml")
    got = collect(head)
    uart.rx += cap("d0-ebz-dd3-2r06-1.txt")
    head.poll(0)
    assert got == []
    uart = FakeUart()
    head = IrHead(uart, "d0")
    got = collect(head)
    uart.rx += cap("iskra-mt631-1.hex") + cap("d0-ebz-dd3-2r06-1.txt")
    head.poll(0)
    assert [g[1] for g in got] == [D0]


def test_rawdump_keeps_the_last_bytes_oldest_first():
    uart = FakeUart()
    head = IrHead(uart, "auto")
    head.RAW_SIZE = 1000
    head.__init__(uart, "auto")  # re-allocate with the smaller ring
    data = bytes(i & 0xFF for i in range(2500))
    uart.rx += data
    uart.chunk = 333
    for t in range(20):
        head.poll(t)
    assert head.rawdump() == data[-1000:]
    uart2 = FakeUart()
    head2 = IrHead(uart2, "auto")
    uart2.rx += b"abc"
    head2.poll(0)
    assert head2.rawdump() == b"abc"


def test_buffers_stay_bounded_on_endless_garbage_and_unended_frames():
    uart = FakeUart()
    head = IrHead(uart, "auto")
    got = collect(head)
    # a start escape followed by a never-ending body: the frame buffer overflows and resynchronises
    uart.rx += b"\x1b\x1b\x1b\x1b\x01\x01\x01\x01" + b"\x42" * 5000 + cap("iskra-mt691-1.hex")
    for t in range(20):
        head.poll(t)
        assert head.framer.n <= head.FRAME_SIZE
    assert head.framer.overflows >= 1
    assert len(got) == 1 and got[0][0] == cap("iskra-mt691-1.hex")


def test_sink_exceptions_are_contained_and_counted():
    uart = FakeUart()
    head = IrHead(uart, "sml")

    def bad(buf, n, fmt, now):
        raise RuntimeError("consumer bug")

    head.sink = bad
    uart.rx += cap("iskra-mt691-1.hex") * 2
    head.poll(0)
    assert head.counters["sink_errors"] == 2


def test_uart_errors_do_not_escape_poll():
    class Broken(FakeUart):
        @property
        def in_waiting(self):
            raise OSError(5, "EIO")

    head = IrHead(Broken(), "sml")
    head.poll(0)
    assert head.counters["uart_errors"] == 1 and head.state == "WARN"


def test_decoding_in_the_sink_buffer_in_place():
    tele = cap("holley-dtz541-1.hex")
    uart = FakeUart()
    head = IrHead(uart, "sml")
    res = SmlResult()
    seen = []

    def sink(buf, n, fmt, now):
        seen.append(decode_frame(buf, n, res) and res.values()["1.8.0"])

    head.sink = sink
    uart.rx += tele + tele
    head.poll(0)
    assert seen == [(44998962, -1), (44998962, -1)]


class ModeCMeter(FakeUart):
    """A mode-C meter behind the head: answers /?! with its ident at 300 baud, data at the acknowledged rate."""

    def __init__(self):
        FakeUart.__init__(self, 300)
        self.acks = []

    def write(self, data):
        self.written += data
        if data == b"/?!\r\n":
            self.rx += b"/?!\r\n"  # the head hears its own request (echo)
            self.rx += b"/ISK5MT174-0001\r\n"
        elif data[:1] == b"\x06":
            self.acks.append(bytes(data))
        return len(data)

    def send_data(self):
        body = b"\x021-0:1.8.0*255(000123.4567*kWh)\r\n1-0:16.7.0*255(000042.00*W)\r\n!\r\n\x03"
        bcc = 0
        for c in body[1:]:
            bcc ^= c
        self.rx += body + bytes((bcc,))


def test_pull_mode_requests_acknowledges_and_switches_baud():
    uart = ModeCMeter()
    head = IrHead(uart, "pull")
    head.start()
    got = collect(head)
    head.poll(0)  # request, echo dropped, ident read, ACK sent
    assert uart.written.startswith(b"/?!\r\n")
    assert uart.acks == [b"\x06050\r\n"]  # '5' = 9600 baud offered by the ident
    assert uart.baudrate == 9600
    uart.send_data()
    head.poll(100)
    assert len(got) == 1 and got[0][1] == D0 and got[0][0].startswith(b"/ISK5MT174")
    assert uart.baudrate == 300  # back to the request rate
    head.poll(5000)
    assert head.counters.get("pull_requests") == 1
    head.poll(10000)
    assert head.counters.get("pull_requests") == 2


def test_pull_mode_timeout_returns_to_base_rate():
    class Silent(FakeUart):
        pass

    uart = Silent(300)
    head = IrHead(uart, "pull")
    head.start()
    head.poll(0)
    head.poll(6000)
    assert head.counters["pull_timeouts"] == 1 and uart.baudrate == 300


def test_a_telegram_cut_before_its_end_does_not_take_the_next_one_with_it():
    from meter.sml import SmlResult, decode_frame

    tele = cap("iskra-mt631-1.hex")
    res = SmlResult()
    for cut in (len(tele) - 4, len(tele) - 3, len(tele) - 2, len(tele) - 1):
        uart = FakeUart()
        head = IrHead(uart, "sml")
        good = []

        def sink(buf, n, fmt, now, good=good):
            ok = decode_frame(buf, n, res, crc="x25")
            if ok:
                good.append(res.values()["1.8.0"])
            return ok

        head.sink = sink
        uart.rx += tele[:cut] + tele
        head.poll(0)
        assert good == [(20431047, -1)], cut
