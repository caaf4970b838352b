"""SunSpec register image at 40000: 'SunS', model 1, meter model 203 (int + SF) or 213 (float), end marker."""

import struct

from micropython import const

from meter.decimal import f32_bits, rescale, to_str

BASE = const(40000)           # protocol address of 'SunS' (pysunspec2, evcc and SMA scan here first)
_COMMON = const(2)            # register offset of model 1 (after 'SunS')
_COMMON_L = const(66)
_METER = const(70)            # register offset of the meter model: 2 + 2 + 66
_INT16_NI = const(0x8000)     # SunSpec "not implemented" of int16 and sunssf
_F32_NI = const(0x7FC00000)   # quiet NaN: "not implemented" of float32
_U32_NI = 0xFFFFFFFF          # bitfield32 (Evt) "not implemented"; not const: a big int on small ports
_ACC32_MAX = 0xFFFFFFFF       # acc32 range; 0 means "not implemented"
_INT16_MAX = const(32767)     # -32768 is reserved for "not implemented"
_SF_MAX = const(10)           # SunSpec scale factors are -10..10

# Meter counters in Germany show at most six integer kWh digits: 999999.9 kWh < 10**9 Wh.
METER_WH_RANGE = 10 ** 9

MODEL_LEN = {203: 105, 213: 124}

# Meter points: (name, source, unit, sf group, offset in 203, offset in 213). Offsets count from the
# model's ID register (pysunspec2 model_203.json / model_213.json). source: a short OBIS code, or a
# derivation: "sumA" (sum of the phase currents), "avgV" (mean phase voltage), "W" (16.7.0, else
# 1.7.0 - 2.7.0). Positive power is import from the grid, as OBIS 16.7.0 counts it.
POINTS = (
    ("A", "sumA", "A", 0, 2, 2),
    ("AphA", "31.7.0", "A", 0, 3, 4),
    ("AphB", "51.7.0", "A", 0, 4, 6),
    ("AphC", "71.7.0", "A", 0, 5, 8),
    ("PhV", "avgV", "V", 1, 7, 10),
    ("PhVphA", "32.7.0", "V", 1, 8, 12),
    ("PhVphB", "52.7.0", "V", 1, 9, 14),
    ("PhVphC", "72.7.0", "V", 1, 10, 16),
    ("Hz", "14.7.0", "Hz", 2, 16, 26),
    ("W", "W", "W", 3, 18, 28),
    ("WphA", "36.7.0", "W", 3, 19, 30),
    ("WphB", "56.7.0", "W", 3, 20, 32),
    ("WphC", "76.7.0", "W", 3, 21, 34),
    ("TotWhExp", "2.8.0", "Wh", 4, 38, 60),
    ("TotWhImp", "1.8.0", "Wh", 4, 46, 68),
)
_NPOINTS = const(15)
# Scale-factor groups of model 203: (name, register offset, preferred SF). The preferred SF is the
# finest resolution worth sending; a group moves to a coarser SF only when a value does not fit.
SF_GROUPS = (
    ("A_SF", 6, -2),
    ("V_SF", 15, -1),
    ("Hz_SF", 17, -2),
    ("W_SF", 22, 0),
    ("TotWh_SF", 54, 0),
)
_GROUP_ENERGY = const(4)
# Model 203 points that stay "not implemented" for good: (offset, registers, kind) with kind 0 = int16
# and sunssf, 1 = acc32, 2 = bitfield32. PPV..PhVphCA, VA, VAR, PF, per-phase and apparent/reactive
# energies, Evt (the meter sends no event flags).
_NI_203 = ((11, 4, 0), (23, 15, 0), (40, 6, 1), (48, 6, 1), (55, 16, 1), (71, 1, 0), (72, 32, 1),
           (104, 1, 0), (105, 2, 2))

# What the status listing names as the source of a derived point.
_DERIVED_OBIS = {"sumA": "31.7.0+51.7.0+71.7.0", "avgV": "(32.7.0+52.7.0+72.7.0)/3", "W": "1.7.0-2.7.0"}
_PHASES_A = ("31.7.0", "51.7.0", "71.7.0")
_PHASES_V = ("32.7.0", "52.7.0", "72.7.0")


def energy_sf(ct_tenths):
    """Smallest TotWh_SF >= 0 that holds a full meter counter (10**9 Wh) times the ctRatio (in tenths) in an
    acc32; integers only."""
    top = METER_WH_RANGE * ct_tenths          # ten times the largest total in Wh
    sf = 0
    while top > _ACC32_MAX * 10 * 10 ** sf and sf < _SF_MAX:
        sf += 1
    return sf


def _put_str(buf, reg, nregs, text):
    """A SunSpec string: ASCII, NUL-padded to nregs registers, cut to fit."""
    data = text.encode()[:nregs * 2]
    off = reg * 2
    for i in range(nregs * 2):
        buf[off + i] = data[i] if i < len(data) else 0


def _sum(values, codes):
    """Exact sum (m, e) of the given codes, or None unless all are present."""
    m = 0
    e = 0
    for c in codes:
        v = values.get(c)
        if v is None:
            return None
        if v[1] < e:
            m = m * 10 ** (e - v[1])
            e = v[1]
        m += v[0] * 10 ** (v[1] - e)
    return m, e


def source_value(values, source):
    """(mantissa, exp10, derived) of a point's source in Reading.values, or None when the meter lacks it."""
    if source == "sumA":
        v = _sum(values, _PHASES_A)
        return None if v is None else (v[0], v[1], True)
    if source == "avgV":
        v = _sum(values, _PHASES_V)
        if v is None:
            return None
        # mean = sum / 3, kept exact enough: three more decimal places before rounding at the SF
        m, e = rescale(v[0], v[1], v[1] - 3)
        return (m + 1) // 3 if m >= 0 else -((-m + 1) // 3), e, True
    if source == "W":
        v = values.get("16.7.0")
        if v is not None:
            return v[0], v[1], False
        imp = values.get("1.7.0")
        exp = values.get("2.7.0")
        if imp is None or exp is None:
            return None
        v = _sum({"a": imp, "b": (-exp[0], exp[1])}, ("a", "b"))
        return v[0], v[1], True
    v = values.get(source)
    return None if v is None else (v[0], v[1], False)


class SunSpecMap:
    """The register image: one preallocated bytearray; update(reading) rewrites it, serving is a slice copy."""

    def __init__(self, model=203, manufacturer="Meter Plus", model_name="Meter Plus IR", options="",
                 version="", serial="", unit_id=1, energy_sf_min=0):
        if model not in MODEL_LEN:
            raise ValueError("SunSpec meter model must be 203 or 213")
        self.model = model
        self.nregs = _METER + 2 + MODEL_LEN[model] + 2
        self.image = bytearray(self.nregs * 2)
        self.energy_sf_min = energy_sf_min
        self.source = None        # the Reading the image shows (None: stale or none yet)
        self.valid = 0            # bitmask over POINTS: which points hold a value
        self.derived = 0          # bitmask over POINTS: which values are derived from other codes
        self.exact = [None] * _NPOINTS   # model 213: the exact decimal (m, e) each float32 register was made from
        self.overflow = 0         # points of the current image left "not implemented": even SF 10 cannot hold them
        self.overflows = 0        # the same, summed over all updates
        self.updates = 0
        img = self.image
        img[0:4] = b"SunS"
        struct.pack_into(">HH", img, _COMMON * 2, 1, _COMMON_L)
        _put_str(img, _COMMON + 2, 16, manufacturer)
        _put_str(img, _COMMON + 18, 16, model_name)
        _put_str(img, _COMMON + 34, 8, options)
        _put_str(img, _COMMON + 42, 8, version)
        _put_str(img, _COMMON + 50, 16, serial)
        struct.pack_into(">HH", img, (_COMMON + 66) * 2, unit_id, _INT16_NI)  # DA, Pad
        struct.pack_into(">HH", img, _METER * 2, model, MODEL_LEN[model])
        struct.pack_into(">HH", img, (self.nregs - 2) * 2, 0xFFFF, 0)
        if model == 203:
            for off, n, kind in _NI_203:
                at = (_METER + off) * 2
                for i in range(n if kind == 0 else n // 2):
                    if kind == 0:
                        struct.pack_into(">H", img, at + 2 * i, _INT16_NI)
                    else:
                        struct.pack_into(">I", img, at + 4 * i, 0 if kind == 1 else _U32_NI)
        else:
            for off in range(2, 124, 2):
                struct.pack_into(">I", img, (_METER + off) * 2, _F32_NI)
            struct.pack_into(">I", img, (_METER + 124) * 2, _U32_NI)
        self.sf = [0] * len(SF_GROUPS)
        self.update(None)

    def update(self, reading):
        """Rewrite the meter points from a Reading; None (stale meter) makes every point "not implemented"."""
        self.source = reading
        self.updates += 1
        values = reading.values if reading is not None else {}
        got = [None] * _NPOINTS
        valid = 0
        derived = 0
        for i in range(_NPOINTS):
            v = source_value(values, POINTS[i][1])
            if v is not None:
                got[i] = v
                valid |= 1 << i
                if v[2]:
                    derived |= 1 << i
        if self.model == 203:
            valid = self._pack_203(got, valid)
        else:
            self._pack_213(got)
        self.valid = valid
        self.derived = derived & valid
        self.overflows += self.overflow

    def _pack_203(self, got, valid):
        """Integers with a scale factor per group; a value that fits nowhere stays "not implemented"."""
        img = self.image
        self.overflow = 0
        for g in range(len(SF_GROUPS)):
            name, sf_off, sf = SF_GROUPS[g]
            if g == _GROUP_ENERGY and self.energy_sf_min > sf:
                sf = self.energy_sf_min
            # coarsen until every value of the group fits, so no register ever wraps into a lie
            while sf < _SF_MAX:
                fits = True
                for i in range(_NPOINTS):
                    if POINTS[i][3] == g and got[i] is not None:
                        r = rescale(got[i][0], got[i][1], sf)[0]
                        # a negative counter cannot be cured by a coarser SF: it stays invalid below
                        if r > _ACC32_MAX if g == _GROUP_ENERGY else (r < -_INT16_MAX or r > _INT16_MAX):
                            fits = False
                            break
                if fits:
                    break
                sf += 1
            self.sf[g] = sf
            struct.pack_into(">h", img, (_METER + sf_off) * 2, sf)
            for i in range(_NPOINTS):
                p = POINTS[i]
                if p[3] != g:
                    continue
                at = (_METER + p[4]) * 2
                r = None
                if got[i] is not None:
                    r = rescale(got[i][0], got[i][1], sf)[0]
                    bad = (r < 0 or r > _ACC32_MAX) if g == _GROUP_ENERGY else (r < -_INT16_MAX or r > _INT16_MAX)
                    if bad:
                        self.overflow += 1  # a negative counter, or a value beyond even SF 10
                        valid &= ~(1 << i)
                        r = None
                if g == _GROUP_ENERGY:
                    struct.pack_into(">I", img, at, 0 if r is None else r)
                    if r == 0:
                        valid &= ~(1 << i)  # acc32 0 reads as "not implemented" on every SunSpec client
                else:
                    struct.pack_into(">H", img, at, _INT16_NI if r is None else r & 0xFFFF)
        return valid

    def _pack_213(self, got):
        """float32 values in base units; counters above 2**24 Wh lose their last digits (float32 has 24 bits)."""
        img = self.image
        for i in range(_NPOINTS):
            at = (_METER + POINTS[i][5]) * 2
            v = got[i]
            self.exact[i] = None if v is None else (v[0], v[1])
            # From the exact decimal with integers: a float made on the device (30 bits) would be off.
            struct.pack_into(">I", img, at, _F32_NI if v is None else f32_bits(v[0], v[1]))

    def offset(self, address, count):
        """Byte offset of registers address..address+count-1 in the image, or -1 when outside the map."""
        rel = address - BASE
        if rel < 0 or rel + count > self.nregs:
            return -1
        return rel * 2

    def registers(self):
        """The status listing (aio-wattwaechter ModbusRegisterInfo): what the registers hold right now; value is
        the exact decimal (m, e) the register stands for, or None (registers_json writes it as a JSON number)."""
        img = self.image
        out = []
        for i in range(_NPOINTS):
            name, source, unit, g, off203, off213 = POINTS[i]
            ok = bool(self.valid & (1 << i))
            obis = _DERIVED_OBIS.get(source, source)
            if source == "W" and (self.source is None or "16.7.0" in self.source.values):
                obis = "16.7.0"
            if self.model == 203:
                reg = BASE + _METER + off203
                sf_reg = BASE + _METER + SF_GROUPS[g][1]
                sf = struct.unpack_from(">h", img, (sf_reg - BASE) * 2)[0]
                if g == _GROUP_ENERGY:
                    raw = struct.unpack_from(">I", img, (reg - BASE) * 2)[0]
                else:
                    raw = struct.unpack_from(">h", img, (reg - BASE) * 2)[0]
                value = (raw, sf) if ok else None
                row = {"register": reg, "name": name, "obis": obis, "value": value, "unit": unit, "valid": ok,
                       "raw": raw, "scale_factor": sf, "scale_register": sf_reg}
            else:
                reg = BASE + _METER + off213
                raw = struct.unpack_from(">I", img, (reg - BASE) * 2)[0]
                value = self.exact[i] if ok else None
                row = {"register": reg, "name": name, "obis": obis, "value": value, "unit": unit, "valid": ok,
                       "raw": raw, "scale_factor": None, "scale_register": None}
            row["derived"] = bool(self.derived & (1 << i))
            out.append(row)
        return out


_ROW_JSON = ('{"register":%d,"name":"%s","obis":"%s","value":%s,"unit":"%s","valid":%s,"raw":%d,'
             '"scale_factor":%s,"scale_register":%s,"derived":%s}')


def _js(flag):
    return "true" if flag else "false"


def registers_json(rows):
    """The rows of registers() as a JSON array text: keys in a fixed order, values as exact decimal numbers."""
    out = []
    for r in rows:
        v = r["value"]
        out.append(_ROW_JSON % (r["register"], r["name"], r["obis"], "null" if v is None else to_str(v[0], v[1]),
                                r["unit"], _js(r["valid"]), r["raw"],
                                "null" if r["scale_factor"] is None else str(r["scale_factor"]),
                                "null" if r["scale_register"] is None else str(r["scale_register"]),
                                _js(r["derived"])))
    return "[" + ",".join(out) + "]"
