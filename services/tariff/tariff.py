"""The price in force: fixed, time-of-use windows or day-ahead market prices with the household's markups, from the
settings (exact decimals, read into micro-units per kWh once per change) and a PriceBook. Pure."""

from core.money import cost, div_round, parse_decimal
from services.history import store as hs

OFF = "off"
FIXED = "fixed"
TOU = "tou"
DYNAMIC = "dynamic"


def _micro(text, places=6):
    n = parse_decimal(text if isinstance(text, str) else str(text), places)
    return 0 if n is None else n


def _mins(text):
    return 1440 if text == "24:00" else int(text[:2]) * 60 + int(text[3:])


class Tariff:
    """settings: has get(); book: services.tariff.prices.PriceBook or None (dynamic)."""

    def __init__(self, settings, book=None):
        self.settings = settings
        self.book = book
        self.load()

    def load(self):
        g = self.settings.get
        self.mode = g("tariff.mode", OFF)
        self.currency = g("tariff.currency", "EUR")
        self.import_price = _micro(g("tariff.importPrice", "0"))
        self.export_price = _micro(g("tariff.exportPrice", "0"))
        self.surcharge = _micro(g("tariff.surcharge", "0"))
        self.vat_bp = _micro(g("tariff.vatPercent", "0"), 2)          # percent in 1/100 %
        self.base_fee = _micro(g("tariff.baseFee", "0"))               # micro-units per month
        self.windows = []
        for w in g("tariff.tou", []) or []:
            mask = 0
            for d in w["days"]:
                mask |= 1 << (d - 1)
            self.windows.append((mask, _mins(w["from"]), _mins(w["to"]), _micro(w["price"])))

    @property
    def on(self):
        return self.mode in (FIXED, TOU, DYNAMIC)

    def market(self, t):
        """The market price (µ/kWh) of the quarter hour at UTC t, or None."""
        return self.book.price(t) if self.book is not None else None

    def with_markups(self, market):
        """Dynamic import price: (market + surcharge) plus VAT, rounded to the micro-unit."""
        return div_round((market + self.surcharge) * (10000 + self.vat_bp), 10000)

    def import_at(self, t, off_min):
        """Import price (µ/kWh) in force for the quarter hour at UTC t (local offset off_min), or None (unknown)."""
        mode = self.mode
        if mode == FIXED:
            return self.import_price
        if mode == TOU:
            local = t + off_min * 60
            wd = (local // 86400 + 3) % 7          # ISO weekday - 1 (1970-01-01 was a Thursday)
            m = local % 86400 // 60
            for mask, a, b, p in self.windows:
                if a < b:
                    if mask & (1 << wd) and a <= m < b:
                        return p
                elif (m >= a and mask & (1 << wd)) or (m < b and mask & (1 << ((wd + 6) % 7))):
                    return p   # crosses midnight: its days are the days it begins on
            return self.import_price
        if mode == DYNAMIC:
            mk = self.market(t)
            return None if mk is None else self.with_markups(mk)
        return None

    def export_at(self, t, off_min):
        """Feed-in compensation (µ/kWh): fixed in every mode; None when off."""
        return self.export_price if self.on else None

    def book_quarter(self, rec):
        """(ic, ec, flags) to book with a HighRes record (seq, t, day, power, off, flags, a, b, c, d): the cost of
        its energies at the prices in force. The import of a record whose energy spans a gap (F_GAP) is priced only
        with a fixed price: under time-varying prices nobody knows which quarter hours that energy fell in. Its
        export is always priced: the feed-in compensation is fixed in every mode."""
        flags = 0
        ic = ec = 0
        if not self.on:
            return 0, 0, 0
        p = None if rec[5] & hs.F_GAP and self.mode != FIXED else self.import_at(rec[1], rec[4])
        if p is not None:
            ic = cost(rec[8], p)
            flags |= hs.F_IC
        p = self.export_at(rec[1], rec[4])
        if p is not None and not rec[5] & hs.F_NO_EXPORT:
            ec = cost(rec[9], p)
            flags |= hs.F_EC
        if not -0x80000000 <= ic <= 0x7FFFFFFF:
            ic = 0
            flags &= ~hs.F_IC     # beyond the record's field (2147 currency units a quarter hour): unknown
        if not -0x80000000 <= ec <= 0x7FFFFFFF:
            ec = 0
            flags &= ~hs.F_EC
        return ic, ec, flags
