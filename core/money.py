"""Money as integers: exact decimal text <-> micro-units (1e-6 of the currency), cost of an energy, cent rounding.

No float is ever made here: CircuitPython's floats keep ~7 digits in 30 bits, so 0.3012 EUR/kWh read through one
could book a different cent. Prices are micro-units per kWh (0.3012 EUR/kWh = 301200), energies 0.1 Wh (the
history's unit), costs micro-units."""

from micropython import const

MICRO = const(1000000)
DWH_PER_KWH = const(10000)   # 0.1 Wh steps in a kWh
# Keys of the settings document whose JSON numbers are read as exact decimals from the request text (never through
# the JSON module's float): tariff.importPrice, exportPrice, surcharge, baseFee, vatPercent and each tou window's price.
MONEY_KEYS = ("importPrice", "exportPrice", "surcharge", "baseFee", "vatPercent", "price")


def parse_decimal(text, places):
    """Integer text * 10**places of a plain decimal ("-0.3012", "12", "1.5"; no exponent, no +, at most places
    decimals, ASCII digits); None when the text is not one."""
    if not isinstance(text, str) or not text or len(text) > 24:
        return None
    neg = text[0] == "-"
    body = text[1:] if neg else text
    whole, dot, frac = body.partition(".")
    if not whole or (dot and not frac) or len(frac) > places:
        return None
    for ch in whole + frac:
        if not "0" <= ch <= "9":
            return None
    n = int(whole) * 10 ** places + (int(frac) * 10 ** (places - len(frac)) if frac else 0)
    return -n if neg else n


def decimal_text(n, places):
    """Shortest exact decimal text of n * 10**-places ("0.3012", "-5", "19")."""
    neg = n < 0
    if neg:
        n = -n
    whole, frac = divmod(n, 10 ** places)
    s = str(whole)
    if frac:
        f = str(frac)
        f = "0" * (places - len(f)) + f
        s = s + "." + f.rstrip("0")
    return "-" + s if neg and n else s


def div_round(a, b):
    """a / b rounded half away from zero (b > 0), integers only."""
    if a < 0:
        return -((-a + b // 2) // b)
    return (a + b // 2) // b


def cost(dwh, price):
    """Micro-units of dwh (0.1 Wh) at price (micro-units per kWh), rounded half away from zero."""
    return div_round(dwh * price, DWH_PER_KWH)


def cents_text(micro):
    """Money text rounded to the cent, half away from zero: 75300 -> "0.08", -5000 -> "-0.01"."""
    c = div_round(micro, 10000)
    neg = c < 0
    if neg:
        c = -c
    return "%s%d.%02d" % ("-" if neg else "", c // 100, c % 100)


def price_text(micro):
    """A price per kWh as exact decimal text with up to six places."""
    return decimal_text(micro, 6)


def quote_money_numbers(raw, keys=MONEY_KEYS):
    """JSON text with the numbers after the given object keys turned into strings ("price": 0.3012 ->
    "price": "0.3012"), so the JSON module never makes a float of them; strings are walked with their escapes,
    so a key's name inside a string value is left alone. raw: bytes or str; returns str."""
    if isinstance(raw, (bytes, bytearray, memoryview)):
        raw = bytes(raw).decode()
    out = []
    i = 0
    n = len(raw)
    last = None      # the string token just closed, while only blanks follow it
    start = 0
    while i < n:
        ch = raw[i]
        if ch == '"':
            j = i + 1
            while j < n and raw[j] != '"':
                j += 2 if raw[j] == "\\" else 1
            last = raw[i + 1:j]
            i = j + 1
            continue
        if ch == ":" and last is not None and last in keys:
            k = i + 1
            while k < n and raw[k] in " \t\r\n":
                k += 1
            e = k
            while e < n and raw[e] in "-+.0123456789eE":
                e += 1
            if e > k:
                out.append(raw[start:k])
                out.append('"%s"' % raw[k:e])
                start = e
                i = e
                last = None
                continue
        if ch not in " \t\r\n":
            last = None
        i += 1
    out.append(raw[start:])
    return "".join(out)
