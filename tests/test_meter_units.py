"""OBIS table, exact decimals, median window, CRC check values, SML TL edge cases."""

import pytest

from meter import obis
from meter.crc import crc16_kermit, crc16_x25
from meter.decimal import cmp, kwh_str, parse, rescale, sub, to_str
from meter.median import Median
from meter.reading import Reading
from meter.sml import SmlResult, _skip, decode_messages


def test_crc_check_values():
    assert crc16_x25(b"123456789") == 0x906E
    assert crc16_kermit(b"123456789") == 0x2189
    assert crc16_x25(b"xx123456789yy", 2, 11) == 0x906E


def test_obis_table_is_complete_and_consistent():
    for code in ("1.8.0", "2.8.0", "16.7.0", "1.7.0", "15.7.0", "1.8.1", "1.8.2", "2.8.1", "2.8.2",
                 "36.7.0", "56.7.0", "76.7.0", "32.7.0", "52.7.0", "72.7.0", "31.7.0", "51.7.0", "71.7.0",
                 "14.7.0"):
        m = obis.lookup(code)
        assert m is not None, code
        assert m["label_de"] and m["label_en"] and m["key"]
        assert m["ha_state_class"] == ("total_increasing" if m["kind"] == "energy" else "measurement")
    assert obis.CODES[2] == "16.7.0"  # the decoder's DZG workaround relies on this slot
    assert len(set(r[1] for r in obis.ROWS)) == obis.N  # keys are unique
    e = obis.lookup("1.8.0")
    assert (e["unit"], e["base_unit"], e["sml_unit"], e["ha_device_class"], e["sunspec"]) == \
        ("kWh", "Wh", 30, "energy", "TotWhImp")
    assert obis.lookup("32.7.0")["unit"] == "V" and obis.kind("31.7.0") == "current"
    assert obis.label("16.7.0", "de") == "Wirkleistung" and obis.label("16.7.0", "en") == "Active power"
    assert obis.lookup("99.99.99") is None and obis.slot("99.99.99") == -1 and obis.unit("1.8.0") == "kWh"


def test_decimal_edges():
    assert to_str(123456789, -1) == "12345678.9"
    assert to_str(-1500, -1) == "-150.0"
    assert to_str(7, -3) == "0.007" and to_str(-7, -3) == "-0.007"
    assert to_str(12, 2) == "1200" and to_str(0, 5) == "0" and to_str(0, -2) == "0.00"
    assert to_str(12345, -3, places=1) == "12.3" and to_str(12355, -3, places=2) == "12.36"
    assert to_str(-12355, -3, places=2) == "-12.36" and to_str(5, 0, places=2) == "5.00"
    assert rescale(15, -1, 0) == (2, 0) and rescale(-15, -1, 0) == (-2, 0) and rescale(3, 0, -2) == (300, -2)
    assert sub(100, 0, 5, -1) == (995, -1) and cmp(1, 3, 999, 0) == 1 and cmp(1000, 0, 1, 3) == 0
    # a 9-digit kWh counter keeps every digit because it never is a float inside
    assert kwh_str(12345678901234, -4) == "1234567.8901234"
    assert kwh_str(44998962, -1) == "4499.8962" and to_str(-29912, -2) == "-299.12"
    assert parse("002714.12830185") == (271412830185, -8) and parse("+1") == (1, 0)
    for bad in ("", "1.2.3", "abc", "-", "1e5"):
        with pytest.raises(ValueError):
            parse(bad)


def test_median_windows():
    m = Median(3)
    assert [m.add(v, -1)[0] for v in (5, 1, 9, 2, 2)] == [5, 1, 5, 2, 2]
    assert m.add(7, 0) == (7, 0)  # a new exponent restarts the window
    off = Median(1)
    assert off.add(-4, 2) == (-4, 2)
    m9 = Median(9)
    out = [m9.add(v, 0)[0] for v in range(20, 0, -1)]
    assert out[-1] == 5 and len(m9._win) == 9


def test_reading_holds_exact_values():
    r = Reading(123, {"1.8.0": (44998962, -1)}, "0a01", "sml")
    assert r.get("1.8.0") == (44998962, -1) and r.get("2.8.0") is None
    assert r.ts_ms == 123 and r.server_id == "0a01" and r.source == "sml"


def test_skip_rejects_lengths_that_do_not_advance():
    assert _skip(b"\x00", 0, 1) == -1  # length 0 would loop forever
    assert _skip(b"\x01", 0, 1) == 1
    assert _skip(b"\x72\x62\x01\x01", 0, 4) == 4  # list of a uint8 and an empty optional
    assert _skip(b"\x83", 0, 1) == -1  # multi-byte TL cut short
    assert _skip(b"\x72\x62", 0, 2) == -1
    assert _skip(b"\x01", -1, 1) == -1  # a failure passed along stays a failure


def test_messages_must_end_exactly():
    res = SmlResult()
    # one close-response message: 76 txid group abort (72 6302 01 71 01) crc 00, then trailing junk
    msg = bytes.fromhex("76 01 62 00 62 00 72 63 0201 71 01 63 0000 00")
    assert decode_messages(bytearray(msg), 0, len(msg), res)
    assert not decode_messages(bytearray(msg + b"\x42"), 0, len(msg) + 1, res)
    assert not decode_messages(bytearray(msg[:-1]), 0, len(msg) - 1, res)
    assert not decode_messages(bytearray(b""), 0, 0, res)


def test_frame_envelope_is_checked_byte_by_byte():
    import binascii
    import os

    from meter.sml import E_FRAME, E_SHORT, decode_frame

    from tests import CAPTURES

    path = os.path.join(CAPTURES, "iskra-mt691-1.hex")
    good = binascii.unhexlify(open(path).read().strip())
    res = SmlResult()
    for pos in list(range(8)) + list(range(len(good) - 8, len(good) - 3)):
        b = bytearray(good)
        b[pos] ^= 0x40
        assert not decode_frame(b, len(b), res) and res.error == E_FRAME, pos
    assert not decode_frame(bytearray(good[:15]), 15, res) and res.error == E_SHORT
