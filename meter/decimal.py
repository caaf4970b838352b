"""Exact decimals (mantissa, exp10) and their conversion at the edge (str, kWh, IEEE-754 float32 bits).

No float is ever made here: CircuitPython on the ESP32-S3 keeps floats in 30 bits, so a value that passed through
one would come out several float32 steps off (the wire formats get their digits from integers only)."""

class Exact:
    """An exact decimal m * 10**e for a JSON writer that prints it as a number (to_str), never through a float."""

    __slots__ = ("m", "e")

    def __init__(self, m, e):
        self.m = m
        self.e = e

    def __str__(self):
        return to_str(self.m, self.e)

    def __eq__(self, other):
        return isinstance(other, Exact) and cmp(self.m, self.e, other.m, other.e) == 0


_F32_INF = 0x7F800000
_HIDDEN = 1 << 23


def _bit_length(n):
    """Bits of a non-negative int (MicroPython's int has no bit_length())."""
    b = 0
    while n >> (b + 16):
        b += 16
    while n >> b:
        b += 1
    return b


def f32_bits(m, e):
    """IEEE-754 binary32 bits of m * 10**e, rounded to nearest, ties to even, with integers only (what
    struct.pack(">f", Decimal) would give with exact arithmetic): subnormals, and infinity beyond the range."""
    sign = 0x80000000 if m < 0 else 0
    n = -m if m < 0 else m
    if n == 0:
        return 0
    d = 1
    if e >= 0:
        n = n * 10 ** e
    else:
        d = 10 ** (-e)
    # value = n / d = q * 2**-s with q of 24 bits: start from the bit lengths, then correct by one step
    s = 24 - (_bit_length(n) - _bit_length(d))
    while True:
        num = n << s if s >= 0 else n
        den = d if s >= 0 else d << (-s)
        q = num // den
        if q >= 1 << 24:
            s -= 1
        elif q < _HIDDEN:
            s += 1
        else:
            break
    exp = 23 - s                        # value in [2**exp, 2**(exp + 1))
    if exp > 127:
        return sign | _F32_INF
    if exp < -126:                      # subnormal: a fixed scale of 2**-149
        s = 149
        num = n << s
        den = d
        q = num // den
    r = num - q * den
    if 2 * r > den or (2 * r == den and q & 1):
        q += 1
    if exp < -126:
        return sign | q                 # q == 2**23 after rounding is the smallest normal: the same bits
    if q == 1 << 24:
        q >>= 1
        exp += 1
        if exp > 127:
            return sign | _F32_INF
    return sign | ((exp + 127) << 23) | (q - _HIDDEN)


def to_str(m, e, places=None):
    """Exact decimal string of m * 10**e; places fixes the digits after the point (rounds half up)."""
    if places is not None:
        m, e = rescale(m, e, -places)
    neg = m < 0
    if neg:
        m = -m
    s = str(m)
    if e >= 0:
        if m:
            s = s + "0" * e
    else:
        k = -e
        if len(s) <= k:
            s = "0" * (k - len(s) + 1) + s
        s = s[:-k] + "." + s[-k:]
    return "-" + s if neg else s


def rescale(m, e, e_new):
    """(m', e_new) equal to m * 10**e, rounded half away from zero when digits are dropped."""
    if e_new <= e:
        return m * 10 ** (e - e_new), e_new
    d = 10 ** (e_new - e)
    q = (abs(m) + d // 2) // d
    return (-q if m < 0 else q), e_new


def sub(m1, e1, m2, e2):
    """Exact (m1 * 10**e1) - (m2 * 10**e2) as (m, e)."""
    if e1 == e2:
        return m1 - m2, e1
    if e1 < e2:
        return m1 - m2 * 10 ** (e2 - e1), e1
    return m1 * 10 ** (e1 - e2) - m2, e2


def cmp(m1, e1, m2, e2):
    """-1, 0 or 1 comparing two exact decimals."""
    d = sub(m1, e1, m2, e2)[0]
    return (d > 0) - (d < 0)


def wh_to_kwh(m, e):
    """Wh as (m, e) -> kWh as (m, e): an exponent shift, exact."""
    return m, e - 3


def kwh_str(m, e, places=None):
    """Exact kWh string of a Wh value."""
    return to_str(m, e - 3, places)


def parse(text):
    """(m, e) of a decimal text such as "-000211.26"; raises ValueError on anything else."""
    s = text.strip()
    if not s:
        raise ValueError("empty number")
    neg = s[0] == "-"
    if neg or s[0] == "+":
        s = s[1:]
    dot = s.find(".")
    if dot >= 0:
        digits = s[:dot] + s[dot + 1:]
        e = -(len(s) - dot - 1)
    else:
        digits = s
        e = 0
    if not digits or not digits.isdigit():
        raise ValueError("not a decimal number")
    m = int(digits)
    return (-m if neg else m), e


def parse_ct(value):
    """ctRatio setting (1..10000, step 0.1) as integer tenths, or None when invalid."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, int):
        return value * 10 if 1 <= value <= 10000 else None
    # A JSON number with a fraction arrives as a float: CircuitPython's carries ~7 digits, so 9999.9 * 10 may come
    # out as 99998.99; steps are 1 apart, and the rounded tenths are exact from here on.
    tenths = int(round(value * 10))
    if abs(value * 10 - tenths) > 0.05 or not 10 <= tenths <= 100000:
        return None
    return tenths
