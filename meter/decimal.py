"""Exact decimals (mantissa, exp10) and their conversion at the edge (float, str, kWh)."""


def to_float(m, e):
    """Float of m * 10**e for JSON/MQTT; via the exact string so the float is the nearest one."""
    return float(to_str(m, e))


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


def kwh_float(m, e):
    """kWh float of a Wh value, only for the edge (JSON, MQTT, Modbus float registers)."""
    return to_float(m, e - 3)


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
