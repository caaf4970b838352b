"""IEC 62056-21 (D0) text telegram decoder: same result object and units as the SML decoder.

Push telegrams without BCC carry no checksum: the decoder checks the parity bit when a 7E1 meter is read
through an 8N1 UART, and leaves a fingerprint of the field widths (result.shape) so that the pipeline can
hold a telegram whose layout differs from the previous one (a dropped or doubled character) until the
next telegram confirms it.
"""

from meter import obis

# D0 unit text -> (SML unit code of the base unit, exponent shift to the base unit).
_UNITS = {
    "kWh": (30, 3), "Wh": (30, 0), "kW": (27, 3), "W": (27, 0),
    "V": (35, 0), "A": (33, 0), "Hz": (44, 0),
}
E_TEXT = "bad character"
E_PARITY = "parity error"
E_BCC = "bcc mismatch"
E_FORMAT = "bad d0 telegram"


def _even_parity_ok(c):
    """True when the 8-bit character c has an even number of one bits (7E1 read through 8N1)."""
    c ^= c >> 4
    c ^= c >> 2
    c ^= c >> 1
    return c & 1 == 0


def _cde(code):
    """Packed C.D.E of an OBIS text such as "1-0:1.8.0*255" or "1.8.0", or -1 (A must be 1 when given)."""
    star = code.find("*")
    if star >= 0:
        code = code[:star]
    colon = code.find(":")
    if colon >= 0:
        head = code[:colon]
        code = code[colon + 1:]
        dash = head.find("-")
        a = head[:dash] if dash >= 0 else head
        if a != "1" and a != "0":
            return -1, False
        elec = a == "1"
    else:
        elec = True
    parts = code.split(".")
    if len(parts) < 3:
        return -1, False
    try:
        c = int(parts[0])
        d = int(parts[1])
        e = int(parts[2])
    except ValueError:
        return -1, False
    if not (0 <= c < 256 and 0 <= d < 256 and 0 <= e < 256):
        return -1, False
    return (c << 16) | (d << 8) | e, elec


def decode_d0(b, n, out):
    """Decode the D0 telegram b[0:n] ('/' ... '!' CR LF [ETX BCC]) into out; True on success."""
    out.clear()
    try:
        err = _decode(b, n, out)
    except (ValueError, IndexError, UnicodeError):
        err = E_FORMAT
    if err is not None:
        out.error = err
        out.mask = 0
        return False
    return True


def _decode(b, n, out):
    text = bytearray(n)
    high = False
    for i in range(n):
        c = b[i]
        if c & 0x80:
            high = True
        text[i] = c & 0x7F
    if high:
        # Read as 8N1 from a 7E1 meter: bit 7 is the parity bit, check it on every character.
        for i in range(n):
            if not _even_parity_ok(b[i]):
                return E_PARITY
    if text[0] != 0x2F:
        return E_FORMAT
    stx = text.find(b"\x02")
    end = n
    if stx >= 0:
        etx = text.find(b"\x03", stx)
        if etx < 0 or etx + 2 != n:
            return E_FORMAT
        bcc = 0
        for i in range(stx + 1, etx + 1):
            bcc ^= text[i]
        if bcc != text[etx + 1]:
            return E_BCC
        end = etx
    for i in range(n if stx < 0 else end):
        c = text[i]
        if (c < 0x20 or c > 0x7E) and c != 0x0D and c != 0x0A and c != 0x02:
            return E_TEXT
    s = bytes(text[:end]).decode()
    bang = s.rfind("!")
    if bang < 0:
        return E_FORMAT
    lines = s[:bang].replace("\x02", "\n").split("\n")
    slots = obis.SLOT
    units = obis.SML_UNIT
    sid = None
    sid_rank = 0
    for k in range(1, len(lines)):
        line = lines[k].strip()
        lp = line.find("(")
        if lp <= 0 or not line.endswith(")"):
            continue
        cde, elec = _cde(line[:lp])
        if cde < 0:
            continue
        rp = line.find(")", lp)
        val = line[lp + 1:rp]
        # Meter id: C=96,D=1 (device id) beats C=0,D=0 (meter number).
        if cde >> 8 == 0x6001 and sid_rank < 2:
            sid, sid_rank = val, 2
        elif cde == 0 and sid_rank < 1:
            sid, sid_rank = val, 1
        if not elec:
            continue
        i = slots.get(cde, -1)
        if i < 0:
            continue
        star = val.find("*")
        if star < 0:
            continue  # a value without unit is not taken as a measurement
        u = _UNITS.get(val[star + 1:])
        if u is None or u[0] != units[i]:
            out.unit_mismatch += 1
            continue
        num = val[:star]
        neg = num.startswith("-")
        digits = num[1:] if neg else num
        dot = digits.find(".")
        e = 0
        if dot >= 0:
            e = -(len(digits) - dot - 1)
            digits = digits[:dot] + digits[dot + 1:]
        if not digits or not digits.isdigit():
            return E_FORMAT
        m = int(digits)
        # Meters print fixed-width fields: a dropped or doubled character changes this fingerprint.
        out.shape = (out.shape * 31 + cde + (len(digits) << 24) + (-e << 20)) & 0x3FFFFFFF
        out.mant[i] = -m if neg else m
        out.exp[i] = e + u[1]
        out.mask |= 1 << i
    if sid:
        raw = sid.encode()
        k = min(len(raw), len(out.sid))
        for j in range(k):
            out.sid[j] = raw[j]
        out.sid_len = k
    if not out.mask:
        return E_FORMAT
    out.crc = "bcc" if stx >= 0 else None
    return None
