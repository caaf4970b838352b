"""SML encoder round trips through smllib (independent) and our decoder: widths, signs, long TLs, escapes."""

import pytest
from smllib import SmlStreamReader

from meter import sml_encode as enc
from meter.sml import SmlResult, decode_frame

SID = bytes.fromhex("0a01454d480000000042")


def smllib_values(frame_bytes):
    r = SmlStreamReader()
    r.add(frame_bytes)
    frame = r.get_frame()
    out = {}
    for msg in frame.parse_frame():
        for e in getattr(msg.message_body, "val_list", None) or ():
            out[str.__str__(e.obis)] = (e.value, e.scaler, e.unit)
    return out


def ours(frame_bytes, dzg=False):
    b = bytearray(frame_bytes)
    res = SmlResult()
    assert decode_frame(b, len(b), res, dzg), res.error
    return res


WIDTH_CASES = []
for _w in range(1, 9):
    for _signed in (True, False):
        bits = 8 * _w
        if _signed:
            WIDTH_CASES += [(_w, True, -(1 << (bits - 1))), (_w, True, (1 << (bits - 1)) - 1), (_w, True, -1),
                            (_w, True, 0)]
        else:
            WIDTH_CASES += [(_w, False, (1 << bits) - 1), (_w, False, 1 << (bits - 1)), (_w, False, 0)]


@pytest.mark.parametrize("width,signed,value", WIDTH_CASES)
def test_every_integer_width_round_trips(width, signed, value):
    code = "16.7.0" if signed else "1.8.0"
    unit = 27 if signed else 30
    tele = enc.transport(enc.sml_file(SID, [enc.entry(enc.obis_name(code), value, unit, -2, signed, width)]))
    tl = (0x50 if signed else 0x60) | (width + 1)
    assert bytes((tl,)) in tele
    ref = smllib_values(tele)["0100" + enc.obis_name(code)[2:].hex()]
    assert ref == (value, -2, unit)
    assert ours(tele).values()[code] == (value, -2)


def test_unsigned_with_high_bit_is_not_sign_extended():
    tele = enc.transport(enc.sml_file(SID, [enc.entry(enc.obis_name("1.8.0"), 0xFFFFFFFFFFFFFFFF, 30, 0, False, 8)]))
    assert ours(tele).values()["1.8.0"] == (0xFFFFFFFFFFFFFFFF, 0)
    assert smllib_values(tele)["0100010800ff"][0] == 0xFFFFFFFFFFFFFFFF


def test_multi_byte_tl_long_octets_and_long_lists():
    long_octet = bytes(range(200))
    entries = [enc.entry(enc.obis_name("96.50.1"), long_octet)]
    entries += [enc.entry(enc.obis_name("36.7.0"), i, 27, 0) for i in range(20)]
    entries.append(enc.entry(enc.obis_name("1.8.0"), 4711, 30, -1, False))
    tele = enc.transport(enc.sml_file(SID, entries))
    assert enc.tl(enc.OCTET, 200) == b"\x8c\x0a"  # 200 + 2 TL bytes = 0xCA
    assert enc.tl(enc.LIST, 22) == b"\xf1\x06"
    assert b"\xf1\x06" in tele
    assert ours(tele).values()["1.8.0"] == (4711, -1)
    assert smllib_values(tele)["0100010800ff"] == (4711, -1, 30)


def test_tl_encoding_examples_from_real_meters():
    assert enc.tl(enc.OCTET, 48) == b"\x83\x02"  # the 48-byte public key of the captures
    assert enc.tl(enc.LIST, 20) == b"\xf1\x04"  # Holley's value list
    assert enc.tl(enc.LIST, 7) == b"\x77"
    assert enc.tl(enc.OCTET, 14) == b"\x0f"
    assert enc.tl(enc.OCTET, 15) == b"\x81\x01"


@pytest.mark.parametrize("value", [0x1B1B1B1B, 0x1B1B1B1B1B1B1B1B])
def test_escape_sequences_inside_the_data(value):
    # place the value so that its 1b1b1b1b lands on the 4-byte grid of the transport
    escaped = 0
    for pad in range(1, 5):  # every placement relative to the grid
        entries = [enc.entry(enc.obis_name("96.50.1"), b"p" * pad),
                   enc.entry(enc.obis_name("1.8.0"), value, 30, -1, False, 8 if value > 0xFFFFFFFF else 4)]
        payload = enc.sml_file(SID, entries)
        tele = enc.transport(payload)
        if len(tele) > len(payload) + (-len(payload)) % 4 + 16:
            escaped += 1  # an escape was doubled on the grid
        assert ours(tele).values()["1.8.0"] == (value, -1)
        assert smllib_values(tele)["0100010800ff"] == (value, -1, 30)
    assert escaped


def test_negative_values_and_scalers():
    entries = [enc.entry(enc.obis_name("16.7.0"), -177, 27, -1, True, 4),
               enc.entry(enc.obis_name("2.8.0"), 3, 30, 4, False),
               enc.entry(enc.obis_name("32.7.0"), 2301, 35, -1, False)]
    tele = enc.transport(enc.sml_file(SID, entries))
    v = ours(tele).values()
    assert v == {"16.7.0": (-177, -1), "2.8.0": (3, 4), "32.7.0": (2301, -1)}
    ref = smllib_values(tele)
    assert ref["0100100700ff"] == (-177, -1, 27) and ref["0100020800ff"] == (3, 4, 30)


def test_value_in_an_unexpected_unit_is_not_taken():
    entries = [enc.entry(enc.obis_name("1.8.0"), 5, 27, 0, False)]  # energy in W: wrong
    res = ours(enc.transport(enc.sml_file(SID, entries)))
    assert res.values() == {} and res.unit_mismatch == 1


def test_f_byte_other_than_ff_and_ff_precedence():
    prev = enc.entry(enc.obis_name("1.8.0", f=0x01), 111, 30, 0, False)  # a billing-period value
    cur = enc.entry(enc.obis_name("1.8.0"), 222, 30, 0, False)
    assert ours(enc.transport(enc.sml_file(SID, [prev]))).values()["1.8.0"] == (111, 0)
    assert ours(enc.transport(enc.sml_file(SID, [prev, cur]))).values()["1.8.0"] == (222, 0)
    assert ours(enc.transport(enc.sml_file(SID, [cur, prev]))).values()["1.8.0"] == (222, 0)


def test_holley_style_bare_valtime_is_skipped():
    bare = enc.integer(0x02DBA23D, False, 4)
    listed = enc.lst([enc.integer(1, False, 1), enc.integer(0x05E748D7, False, 4)])
    entries = [enc.entry(enc.obis_name("1.8.0"), 1, 30, 0, False, val_time=bare),
               enc.entry(enc.obis_name("2.8.0"), 2, 30, 0, False, val_time=listed, status=0x1C0104)]
    tele = enc.transport(enc.sml_file(SID, entries))
    assert ours(tele).values() == {"1.8.0": (1, 0), "2.8.0": (2, 0)}


def test_dzg_workaround_only_for_short_signed_power():
    neg16 = enc.entry(enc.obis_name("16.7.0"), -29912, 27, -2, True, 2)
    tele = enc.transport(enc.sml_file(SID, [neg16]))
    assert ours(tele).values()["16.7.0"] == (-29912, -2)
    assert ours(tele, dzg=True).values()["16.7.0"] == (35624, -2)
    neg32 = enc.transport(enc.sml_file(SID, [enc.entry(enc.obis_name("16.7.0"), -126061, 27, -2, True, 4)]))
    assert ours(neg32, dzg=True).values()["16.7.0"] == (-126061, -2)


def test_encoder_rejects_values_that_do_not_fit():
    with pytest.raises(ValueError):
        enc.integer(256, False, 1)
    with pytest.raises(ValueError):
        enc.integer(-1, False)
    with pytest.raises(ValueError):
        enc.integer(1 << 64, False)
