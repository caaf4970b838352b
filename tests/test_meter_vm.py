"""The decoder's tests again, inside the MicroPython 1.27 VM: captures vs smllib, damage, framing, D0, encoder."""

import binascii

import pytest

from tests.test_meter_captures import (D0_FILES, DAMAGED, SML_COMPLETE, SML_PARTIAL, raw, smllib_expected)
from tools.mpvm import MicroVM


@pytest.fixture(scope="module")
def vm():
    with MicroVM() as v:
        yield v


def _hex(name):
    return binascii.hexlify(raw(name)).decode()


def test_captures_decode_in_the_vm_as_smllib_says(vm):
    cases = [(n, _hex(n), smllib_expected(n)) for n in SML_COMPLETE + SML_PARTIAL]
    code = """
import binascii
from meter.sml import SmlResult, decode_frame, decode_messages
CASES = %r
res = SmlResult()
for name, hx, want in CASES:
    b = bytearray(binascii.unhexlify(hx))
    if "partial" in name:
        ok = decode_messages(b, 0, len(b), res)
    else:
        ok = decode_frame(b, len(b), res)
    assert ok, (name, res.error)
    got = res.values()
    assert got == want, (name, got, want)
    print("OK", name, res.server_id())
""" % (cases,)
    out, fuel = vm.run(code)
    lines = out.split("\n")
    assert sum(1 for ln in lines if ln.startswith("OK ")) == len(cases)
    assert "OK holley-dtz541-1.hex 0a01484c5902000424a0" in lines


def test_damage_is_rejected_in_the_vm(vm):
    cases = [(n, _hex(n)) for n in sorted(DAMAGED)]
    code = """
import binascii
from meter.sml import SmlResult, decode_frame
from meter.framer import Framer
res = SmlResult()
for name, hx in %r:
    b = bytearray(binascii.unhexlify(hx))
    assert not decode_frame(b, len(b), res), name
    assert res.mask == 0 and res.error
    print("REJECTED", name, res.error)
good = bytearray(binascii.unhexlify(%r))
for pos in range(0, len(good) * 8, 97):
    b = bytearray(good)
    b[pos // 8] ^= 1 << (pos %% 8)
    assert not decode_frame(b, len(b), res, False, "x25"), pos
print("FLIPS OK")
""" % (cases, _hex("holley-dtz541-1.hex"))
    out, _ = vm.run(code)
    assert out.count("REJECTED") == 2 and "crc mismatch" in out and "FLIPS OK" in out


def test_framer_and_d0_in_the_vm(vm):
    stream = b"junk\x1b\x1b" + raw("ebz-dd3-1.hex") + raw("d0-ebz-dd3-bz06-1.txt") + raw("dzg-1.hex")[:100] \
        + raw("emh-1.hex")
    code = """
import binascii
from meter.framer import Framer, SML, D0
from meter.sml import SmlResult, decode_frame
from meter.d0 import decode_d0
data = binascii.unhexlify(%r)
fr = Framer(2048, "auto")
res = SmlResult()
got = []
for chunk in (1, 7, 64, 500):
    fr = Framer(2048, "auto")
    got = []
    pos = 0
    while pos < len(data):
        pos += fr.feed(data[pos:pos + chunk])
        while True:
            fmt = fr.next()
            if not fmt:
                break
            b = fr.buf
            n = fr.telegram_len()
            if fmt == SML:
                ok = decode_frame(b, n, res, False, "x25")
            else:
                ok = decode_d0(b, n, res)
            if ok:
                got.append(res.values()["1.8.0"])
            else:
                fr.reject()
    print("CHUNK", chunk, got)
""" % binascii.hexlify(stream).decode()
    out, _ = vm.run(code)
    want = "[(45009189911, -5), (12525688570, -5), (31323636, -1)]"
    assert out.count(want) == 4, out


def test_d0_captures_in_the_vm(vm):
    cases = [(n, _hex(n)) for n in D0_FILES]
    code = """
import binascii
from meter.sml import SmlResult
from meter.d0 import decode_d0
res = SmlResult()
for name, hx in %r:
    b = bytearray(binascii.unhexlify(hx))
    assert decode_d0(b, len(b), res), (name, res.error)
    print(name, sorted(res.values().items()))
""" % (cases,)
    out, _ = vm.run(code)
    assert "('1.8.0', (271412830185, -5))" in out and "('1.7.0', (260, -2))" in out


def test_encoder_decimal_median_in_the_vm(vm):
    code = """
from meter import sml_encode as enc
from meter.sml import SmlResult, decode_frame
from meter.decimal import to_str, kwh_str, parse
from meter.median import Median
res = SmlResult()
sid = b"\\x0a\\x01SIM\\x00\\x00\\x00\\x00\\x01"
for w in range(1, 9):
    for signed in (True, False):
        v = -(1 << (8 * w - 1)) if signed else (1 << (8 * w)) - 1
        t = enc.transport(enc.sml_file(sid, [enc.entry(enc.obis_name("16.7.0"), v, 27, -1, signed, w)]))
        b = bytearray(t)
        assert decode_frame(b, len(b), res), res.error
        assert res.values()["16.7.0"] == (v, -1), (w, signed, res.values())
t = enc.transport(enc.sml_file(sid, [enc.entry(enc.obis_name("1.8.0"), 0x1b1b1b1b, 30, -1, False, 4)] * 4))
b = bytearray(t)
assert decode_frame(b, len(b), res) and res.values()["1.8.0"] == (0x1b1b1b1b, -1)
assert to_str(44998962, -1) == "4499896.2" and kwh_str(44998962, -1) == "4499.8962"
assert to_str(-5, -3) == "-0.005" and to_str(0, 3) == "0" and parse("-000211.26") == (-21126, -2)
m = Median(5)
assert [m.add(v, 0)[0] for v in (100, 110, 5000, 120, 130, 140)] == [100, 100, 110, 110, 120, 130]
print("ALL OK")
"""
    out, _ = vm.run(code)
    assert "ALL OK" in out


def test_ir_head_and_pipeline_in_the_vm():
    """The driver and the pipeline are no pure modules, but nothing in them needs CPython: run them there too."""
    stream = raw("holley-dtz541-1.hex") + b"\x00junk" + raw("itron-openway3hz-1.hex") + raw("holley-dtz541-1.hex")
    code = """
import binascii
from core.bus import Bus
from drivers.ir_head import IrHead
from services.metering.pipeline import MeterPipeline

class Uart:
    def __init__(self, data):
        self.rx = bytearray(data)
    @property
    def in_waiting(self):
        return len(self.rx)
    def readinto(self, buf):
        n = min(len(buf), len(self.rx), 97)
        if not n:
            return None
        buf[:n] = self.rx[:n]
        self.rx = self.rx[n:]
        return n
    def write(self, b):
        return len(b)

class Settings:
    def get(self, key, default=None):
        return {"medianFilterSize": 3, "ctRatio": 2.5}.get(key, default)

bus = Bus()
ring = bus.subscribe("reading", 8)
head = IrHead(Uart(binascii.unhexlify(%r)), "auto")
pipe = MeterPipeline(bus, Settings(), head)
t = 1000
for i in range(20):
    head.poll(t)
    pipe.poll(t)
    t += 500
r = ring.pop()
print("R1", r.values["1.8.0"], r.values["32.7.0"], r.server_id)
h = pipe.health()
print("H", h["telegrams_ok"], h["crc_errors"], h["stale"], len(head.rawdump()))
for i in range(25):
    pipe.poll(t)
    t += 500
print("STALE", pipe.stale, bus.latest("reading"))
""" % binascii.hexlify(stream).decode()
    with MicroVM(packages=("core", "meter", "drivers", "services")) as v:
        out, _ = v.run(code)
    assert "R1 (1124974050, -2) (2344, -1) 0a01484c5902000424a0" in out  # 4499896.2 Wh x 2.5, volts unscaled
    assert "H 2 1 False %d" % len(stream) in out
    assert "STALE True None" in out
