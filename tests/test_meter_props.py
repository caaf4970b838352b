"""Property-based tests of framer and decoder: random bytes, truncation, bit flips, dropped/duplicated bytes, splits."""

import binascii
import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from meter import sml_encode as enc
from meter.d0 import decode_d0
from meter.framer import D0, SML, Framer
from meter.sml import SmlResult, decode_frame, decode_messages
from tests import CAPTURES as _CAPTURES

CAPTURES = _CAPTURES
GOOD = ["holley-dtz541-1.hex", "ebz-dd3-1.hex", "dzg-dvs7420-3.hex", "iskra-mt691-1.hex", "apator-1.hex",
        "emh-1.hex", "dzg-1.hex"]


def cap(name):
    with open(os.path.join(CAPTURES, name), "rb") as f:
        data = f.read()
    return binascii.unhexlify(data.strip()) if name.endswith(".hex") else data


TELEGRAMS = [cap(n) for n in GOOD]
D0_TELEGRAM = cap("d0-ebz-dd3-2r06-1.txt")


def decoded(tele):
    b = bytearray(tele)
    res = SmlResult()
    assert decode_frame(b, len(b), res, crc="x25"), res.error
    return res.values()


EXPECTED = [decoded(t) for t in TELEGRAMS]
PROPS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def run_stream(data, chunks, size=2048, mode="auto"):
    """Feed data in the given chunk sizes; return decoded values of every telegram; check bounds as we go."""
    fr = Framer(size, mode)
    res = SmlResult()
    out = []
    pos = 0
    ci = 0
    steps = 0
    while pos < len(data):
        k = chunks[ci % len(chunks)] if chunks else len(data)
        ci += 1
        taken = fr.feed(data[pos:pos + k])
        pos += taken
        while True:
            steps += 1
            assert steps < 10 * len(data) + 1000, "framer does not make progress"
            fmt = fr.next()
            assert 0 <= fr.n <= size
            if not fmt:
                break
            n = fr.telegram_len()
            b = fr.buf
            if fmt == SML:
                assert b[0:8] == b"\x1b\x1b\x1b\x1b\x01\x01\x01\x01" and b[n - 8:n - 4] == b"\x1b\x1b\x1b\x1b"
                if decode_frame(b, n, res, crc="x25"):
                    out.append(res.values())
                else:
                    fr.reject()
            else:
                assert fmt == D0
                if decode_d0(b, n, res):
                    out.append(res.values())
        if taken == 0:
            assert fr.free() > 0, "a full buffer was not released"
    return out, fr


@PROPS
@given(st.binary(max_size=3000), st.lists(st.integers(1, 700), min_size=1, max_size=8))
def test_random_bytes_never_raise_never_hang_stay_bounded(data, chunks):
    values, fr = run_stream(data, chunks)
    assert fr.n <= fr.size
    # random bytes practically never carry a valid frame with a valid CRC and structure
    assert values == [] or all(isinstance(v, dict) for v in values)


@PROPS
@given(st.binary(max_size=1200))
def test_decoders_survive_arbitrary_buffers(data):
    res = SmlResult()
    b = bytearray(data)
    assert decode_frame(b, len(b), res) in (True, False)
    b = bytearray(data)
    assert decode_messages(b, 0, len(b), res) in (True, False)
    b = bytearray(data)
    assert decode_d0(b, len(b), res) in (True, False)


@PROPS
@given(st.sampled_from(range(len(TELEGRAMS))), st.data())
def test_bytes_after_a_start_escape_are_survived(i, data):
    body = data.draw(st.binary(max_size=600))
    trailer = data.draw(st.binary(min_size=3, max_size=3))
    tele = b"\x1b\x1b\x1b\x1b\x01\x01\x01\x01" + body + b"\x1b\x1b\x1b\x1b\x1a" + trailer
    res = SmlResult()
    b = bytearray(tele)
    assert decode_frame(b, len(b), res) in (True, False)
    if not res.error:
        assert res.crc in ("x25", "kermit")


@PROPS
@given(st.sampled_from(range(len(TELEGRAMS))), st.integers(0, 10**6))
def test_truncated_telegram_is_never_a_value(i, cut_seed):
    tele = TELEGRAMS[i]
    cut = cut_seed % len(tele)
    res = SmlResult()
    b = bytearray(tele[:cut])
    assert not decode_frame(b, len(b), res)
    assert res.mask == 0
    # truncated, then the next complete telegram: only the complete one comes out
    values, _ = run_stream(tele[:cut] + TELEGRAMS[(i + 1) % len(TELEGRAMS)], [97])
    assert values == [EXPECTED[(i + 1) % len(TELEGRAMS)]]


@PROPS
@given(st.sampled_from(range(len(TELEGRAMS))), st.lists(st.integers(0, 10**6), min_size=1, max_size=3))
def test_one_to_three_bit_flips_are_always_rejected(i, seeds):
    # CRC-16 (x^16+x^12+x^5+1 has the factor x+1) catches every 1-3 bit error in frames this short.
    tele = bytearray(TELEGRAMS[i])
    positions = {s % (len(tele) * 8) for s in seeds}
    for p in positions:
        tele[p // 8] ^= 1 << (p % 8)
    res = SmlResult()
    assert not decode_frame(tele, len(tele), res, crc="x25")
    assert res.mask == 0


@PROPS
@given(st.lists(st.sampled_from(range(len(TELEGRAMS))), min_size=1, max_size=5), st.data())
def test_dropped_duplicated_flipped_bytes_never_yield_a_wrong_value(order, data):
    stream = bytearray()
    for i in order:
        stream += TELEGRAMS[i]
    for _ in range(data.draw(st.integers(1, 4))):
        op = data.draw(st.sampled_from(["drop", "dup", "flip", "insert"]))
        pos = data.draw(st.integers(0, len(stream) - 1))
        if op == "drop":
            del stream[pos]
        elif op == "dup":
            stream.insert(pos, stream[pos])
        elif op == "flip":
            stream[pos] ^= 1 << data.draw(st.integers(0, 7))
        else:
            stream.insert(pos, data.draw(st.integers(0, 255)))
    chunks = data.draw(st.lists(st.integers(1, 500), min_size=1, max_size=4))
    values, fr = run_stream(bytes(stream), chunks)
    for v in values:
        assert v in EXPECTED  # whatever came through is exactly what some meter sent
    assert len(values) <= len(order)


@PROPS
@given(st.sampled_from(range(len(TELEGRAMS))), st.integers(1, 800))
def test_split_at_every_offset_gives_the_same_telegrams(i, chunk):
    stream = b"\xff\x00garbage" + TELEGRAMS[i] + D0_TELEGRAM + TELEGRAMS[(i + 3) % len(TELEGRAMS)]
    values, fr = run_stream(stream, [chunk])
    assert len(values) == 3
    assert values[0] == EXPECTED[i] and values[2] == EXPECTED[(i + 3) % len(TELEGRAMS)]
    assert values[1]["1.8.0"] == (271412830185, -5)


def test_split_at_every_single_offset_exhaustively():
    tele = TELEGRAMS[0]
    for cut in range(len(tele) + 1):
        fr = Framer(2048, "sml")
        fr.feed(tele[:cut])
        first = fr.next()
        if not first:
            fr.feed(tele[cut:])
            first = fr.next()
        assert first == SML, cut
        assert bytes(fr.telegram()) == tele


@PROPS
@given(st.lists(st.tuples(st.sampled_from(["1.8.0", "2.8.0", "16.7.0", "32.7.0", "36.7.0"]),
                          st.integers(1, 8), st.booleans(), st.integers(-128, 127), st.data()),
                min_size=1, max_size=12))
def test_encoder_round_trip_through_our_decoder(entries):
    units = {"1.8.0": 30, "2.8.0": 30, "16.7.0": 27, "32.7.0": 35, "36.7.0": 27}
    built = []
    want = {}
    for code, width, signed, scaler, data in entries:
        bits = 8 * width
        lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
        v = data.draw(st.integers(lo, hi))
        built.append(enc.entry(enc.obis_name(code), v, units[code], scaler, signed, width))
        want[code] = (v, scaler)  # the last entry of a code wins (all F=0xFF)
    tele = enc.transport(enc.sml_file(b"\x0a\x01SIM\x00\x00\x00\x00\x01", built))
    b = bytearray(tele)
    res = SmlResult()
    assert decode_frame(b, len(b), res), res.error
    assert res.values() == want
