"""The pure SunSpec register image: layout against pysunspec2's model definitions, values, scale factors, staleness."""

import json
import os
import struct
from decimal import Decimal

import pytest
import sunspec2.modbus.client as ss_client

from meter.reading import Reading
from services.modbus.sunspec_map import BASE, POINTS, SF_GROUPS, SunSpecMap, energy_sf, registers_json
from tools.mpvm import MicroVM

MODELS_DIR = os.path.join(os.path.dirname(ss_client.__file__), "..", "models", "json")

FULL = {
    "1.8.0": (123456789, -1),      # 12 345 678.9 Wh
    "2.8.0": (4321000, -1),        # 432 100.0 Wh
    "16.7.0": (-1234, 0),          # feeding in 1234 W
    "36.7.0": (-500, 0), "56.7.0": (-400, 0), "76.7.0": (-334, 0),
    "32.7.0": (2301, -1), "52.7.0": (2302, -1), "72.7.0": (2299, -1),
    "31.7.0": (123, -2), "51.7.0": (1, 0), "71.7.0": (50, -2),
    "14.7.0": (4998, -2),
}


def model_points(model_id):
    """{name: (offset from the model's ID register, type, size)} from pysunspec2's JSON definition."""
    with open(os.path.join(MODELS_DIR, "model_%d.json" % model_id)) as f:
        group = json.load(f)["group"]
    out = {}
    off = 0
    for p in group["points"]:
        out[p["name"]] = (off, p["type"], p["size"])
        off += p["size"]
    return out, off


def regs(m, address, count):
    """Registers address..address+count-1 of the image as big-endian bytes."""
    off = m.offset(address, count)
    assert off >= 0
    return bytes(m.image[off:off + 2 * count])


class ImageDevice(ss_client.SunSpecModbusClientDevice):
    """pysunspec2's own scanner and decoder reading straight from the image (no sockets)."""

    def __init__(self, m):
        ss_client.SunSpecModbusClientDevice.__init__(self)
        self._m = m

    def connect(self):
        pass

    def disconnect(self):
        pass

    def read(self, addr, count):
        off = self._m.offset(addr, count)
        if off < 0:
            raise ss_client.SunSpecModbusClientError("illegal address")
        return bytes(self._m.image[off:off + 2 * count])


def scan(m):
    dev = ImageDevice(m)
    dev.scan()
    return dev


@pytest.mark.parametrize("model", [203, 213])
def test_layout_matches_pysunspec2_definitions(model):
    m = SunSpecMap(model, serial="024d50000001", version="0.1.0")
    common, common_len = model_points(1)
    meter, meter_len = model_points(model)
    assert regs(m, BASE, 2) == b"SunS"
    assert struct.unpack(">HH", regs(m, BASE + 2, 2)) == (1, common_len - 2) == (1, 66)
    meter_at = BASE + 2 + common_len
    assert struct.unpack(">HH", regs(m, meter_at, 2)) == (model, meter_len - 2)
    assert meter_len - 2 == {203: 105, 213: 124}[model]
    end = meter_at + meter_len
    assert struct.unpack(">HH", regs(m, end, 2)) == (0xFFFF, 0)
    assert m.nregs == end + 2 - BASE
    for name, _src, _unit, _group, off203, off213 in POINTS:
        assert meter[name][0] == (off203 if model == 203 else off213), name
    if model == 203:
        for name, off, _pref in SF_GROUPS:
            assert meter[name] == (off, "sunssf", 1)
        assert meter["TotWhImp"][1] == "acc32" and meter["TotWhExp"][1] == "acc32"


def test_pysunspec2_decodes_model_1_and_203():
    m = SunSpecMap(203, serial="024d50000001", version="0.1.0")
    m.update(Reading(1000, dict(FULL)))
    dev = scan(m)
    common = dev.common[0]
    assert common.Mn.cvalue == "Meter Plus"
    assert common.SN.cvalue == "024d50000001"
    assert common.Vr.cvalue == "0.1.0"
    assert common.DA.cvalue == 1
    meter = dev.models[203][0]
    assert meter.W.cvalue == -1234
    assert (meter.WphA.cvalue, meter.WphB.cvalue, meter.WphC.cvalue) == (-500, -400, -334)
    assert meter.TotWhImp.cvalue == 12345679        # 12 345 678.9 Wh at TotWh_SF 0, rounded half up
    assert meter.TotWhExp.cvalue == 432100
    assert meter.PhVphA.cvalue == pytest.approx(230.1)
    assert meter.PhV.cvalue == pytest.approx(230.1)  # (230.1 + 230.2 + 229.9) / 3 = 230.0667 -> 230.1
    assert meter.AphB.cvalue == pytest.approx(1.0)
    assert meter.A.cvalue == pytest.approx(2.73)
    assert meter.Hz.cvalue == pytest.approx(49.98)
    # points the meter cannot provide are "not implemented" (pysunspec2 decodes them as None)
    for name in ("VA", "VAR", "PF", "PPV", "TotVAhImp", "TotVArhImpQ1", "TotWhImpPhA", "Evt"):
        assert getattr(meter, name).cvalue is None, name


def test_pysunspec2_decodes_model_213_floats():
    m = SunSpecMap(213)
    m.update(Reading(1000, dict(FULL)))
    meter = scan(m).models[213][0]
    assert meter.W.cvalue == -1234.0
    assert meter.TotWhImp.cvalue == pytest.approx(12345678.9, abs=1.0)   # float32: 24-bit mantissa
    assert meter.TotWhExp.cvalue == 432100.0
    assert meter.Hz.cvalue == pytest.approx(49.98, abs=1e-4)
    assert meter.VA.cvalue is None and meter.PF.cvalue is None


def test_stale_meter_makes_every_value_not_implemented():
    m = SunSpecMap(203)
    m.update(Reading(1000, dict(FULL)))
    m.update(None)
    meter = scan(m).models[203][0]
    for name, *_ in POINTS:
        assert getattr(meter, name).cvalue is None, name
    assert all(not r["valid"] and r["value"] is None for r in m.registers())
    m213 = SunSpecMap(213)
    m213.update(Reading(1, dict(FULL)))
    m213.update(None)
    meter = scan(m213).models[213][0]
    assert meter.W.cvalue is None and meter.TotWhImp.cvalue is None


def test_missing_phases_stay_not_implemented_and_nothing_is_derived_from_a_part():
    m = SunSpecMap(203)
    m.update(Reading(1, {"1.8.0": (5, 0), "16.7.0": (7, 0), "31.7.0": (1, 0)}))
    meter = scan(m).models[203][0]
    assert meter.AphA.cvalue == 1
    assert meter.A.cvalue is None            # a sum of one phase would be a lie
    assert meter.PhV.cvalue is None and meter.WphA.cvalue is None and meter.Hz.cvalue is None
    assert meter.TotWhExp.cvalue is None     # not sent by this meter


def test_power_from_import_and_export_power_is_marked_derived():
    m = SunSpecMap(203)
    m.update(Reading(1, {"1.7.0": (0, 0), "2.7.0": (8001, -1)}))
    assert scan(m).models[203][0].W.cvalue == -800     # -800.1 W rounded at W_SF 0
    row = [r for r in m.registers() if r["name"] == "W"][0]
    assert row["derived"] and row["obis"] == "1.7.0-2.7.0" and row["raw"] == -800
    m.update(Reading(2, {"1.7.0": (5, 0)}))              # export power missing: W unknown
    assert scan(m).models[203][0].W.cvalue is None


def test_power_beyond_int16_moves_the_scale_factor_never_wraps():
    m = SunSpecMap(203)
    m.update(Reading(1, {"16.7.0": (43500, 0), "36.7.0": (14500, 0)}))
    meter = scan(m).models[203][0]
    assert meter.W_SF.cvalue == 1
    assert meter.W.cvalue == 43500 and meter.WphA.cvalue == 14500
    m.update(Reading(2, {"16.7.0": (-32767, 0)}))
    assert scan(m).models[203][0].W_SF.cvalue == 0      # back to 1 W as soon as it fits


def test_energy_scale_factor_follows_ct_ratio():
    assert energy_sf(10) == 0         # ctRatio 1: 999 999.9 kWh = 10**9 Wh fits an acc32 (4.29e9) in Wh
    assert energy_sf(40) == 0
    assert energy_sf(42) == 0         # 4.2e9 Wh still fits
    assert energy_sf(43) == 1
    assert energy_sf(50) == 1
    assert energy_sf(429) == 1
    assert energy_sf(430) == 2
    assert energy_sf(100000) == 4     # ctRatio 10000
    m = SunSpecMap(203, energy_sf_min=energy_sf(1000))
    m.update(Reading(1, {"1.8.0": (123456789, -1), "2.8.0": (0, 0)}))   # 12 345 678.9 Wh
    meter = scan(m).models[203][0]
    assert meter.TotWh_SF.cvalue == 2
    assert meter.TotWhImp.cvalue == 12345700          # 123457 x 100 Wh
    assert meter.TotWhExp.cvalue is None              # acc32 0 is SunSpec's "not implemented"
    row = [r for r in m.registers() if r["name"] == "TotWhImp"][0]
    assert (row["raw"], row["scale_factor"], row["scale_register"]) == (123457, 2, 40124)


def test_counter_beyond_acc32_coarsens_instead_of_wrapping():
    m = SunSpecMap(203)
    m.update(Reading(1, {"1.8.0": (5 * 10 ** 9, 0)}))   # above 2**32 Wh at SF 0
    meter = scan(m).models[203][0]
    assert meter.TotWh_SF.cvalue == 1
    assert meter.TotWhImp.cvalue == 5 * 10 ** 9
    m.update(Reading(2, {"1.8.0": (-1, 0)}))             # a negative counter has no acc32 form
    assert scan(m).models[203][0].TotWhImp.cvalue is None
    assert m.overflow == 1 and m.overflows == 1


def test_status_rows_describe_the_registers():
    m = SunSpecMap(203)
    m.update(Reading(1, dict(FULL)))
    rows = {r["name"]: r for r in m.registers()}
    assert set(rows) == {p[0] for p in POINTS}
    w = rows["W"]
    assert w == {"register": 40088, "name": "W", "obis": "16.7.0", "value": (-1234, 0), "unit": "W", "valid": True,
                 "raw": -1234, "scale_factor": 0, "scale_register": 40092, "derived": False}
    assert rows["TotWhImp"]["register"] == 40116 and rows["TotWhImp"]["value"] == (12345679, 0)
    assert rows["Hz"]["value"] == (4998, -2) and rows["Hz"]["scale_register"] == 40087
    doc = json.loads(registers_json(m.registers()), parse_float=Decimal)
    by_name = {r["name"]: r for r in doc}
    assert by_name["Hz"]["value"] == Decimal("49.98") and by_name["W"]["value"] == -1234
    assert list(doc[0]) == ["register", "name", "obis", "value", "unit", "valid", "raw", "scale_factor",
                            "scale_register", "derived"]
    rows213 = {r["name"]: r for r in SunSpecMap(213).registers()}
    assert rows213["W"]["register"] == 40098 and rows213["W"]["scale_factor"] is None


def test_offset_bounds():
    m = SunSpecMap(203)
    assert m.offset(BASE, 179) == 0
    assert m.offset(BASE + 178, 1) == 356
    assert m.offset(BASE + 178, 2) == -1
    assert m.offset(BASE - 1, 1) == -1
    assert m.offset(0, 1) == -1


def test_unknown_model_is_rejected():
    with pytest.raises(ValueError):
        SunSpecMap(201)


def test_same_image_inside_micropython():
    """The map builds the very same bytes in MicroPython 1.27 as in CPython."""
    values = dict(FULL)
    values["1.8.0"] = (5 * 10 ** 9, 0)
    code = (
        "from services.modbus.sunspec_map import SunSpecMap\n"
        "from meter.reading import Reading\n"
        "import binascii\n"
        "for model in (203, 213):\n"
        "    m = SunSpecMap(model, serial='024d50000001', version='0.1.0', energy_sf_min=1)\n"
        "    m.update(Reading(1, %r))\n"
        "    print(binascii.hexlify(m.image).decode())\n"
        "    m.update(None)\n"
        "    print(binascii.hexlify(m.image).decode())\n" % values
    )
    with MicroVM(packages=("core", "meter", "services")) as vm:
        out, _fuel = vm.run(code)
    lines = out.split()
    expect = []
    for model in (203, 213):
        m = SunSpecMap(model, serial="024d50000001", version="0.1.0", energy_sf_min=1)
        m.update(Reading(1, values))
        expect.append(bytes(m.image).hex())
        m.update(None)
        expect.append(bytes(m.image).hex())
    assert lines == expect
