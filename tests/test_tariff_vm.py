"""The tariff's pure parts inside a real MicroPython VM give what CPython gives: exact money text, the streaming
price reader of both formats (split into odd chunks), the booked cost of a quarter hour, the peaks."""

import json

from core.money import cents_text, cost, decimal_text, parse_decimal, quote_money_numbers
from services.tariff.prices import PriceBook, PriceParser
from tests.price_server import AWATTAR, ENERGY_CHARTS, HERE
from tools.mpvm import MicroVM

CODE = """
from core.money import cents_text, cost, decimal_text, parse_decimal, quote_money_numbers
from services.tariff.prices import PriceBook, PriceParser
print("@M", parse_decimal("-0.3012", 6), decimal_text(301200, 6), decimal_text(-5, 2), cents_text(75300),
      cents_text(-5000), cost(2403, 301200), quote_money_numbers('{"price": -0.01, "x": "price"}'))
for name, step in (("/input/ec.json", 7), ("/input/aw.json", 13)):
    p = PriceParser()
    with open(name, "rb") as f:
        data = f.read()
    for i in range(0, len(data), step):
        p.write(data[i:i + step])
    rows = p.finish()
    book = PriceBook(lambda d: d * 86400)
    book.merge(rows, -10 ** 6, 10 ** 6, lambda t: t // 86400)
    text = book.text().replace("\\n", "|")[:300]
    print("@R", len(rows), sum(r[2] for r in rows if r[2] is not None), len(book.days), text)
"""


def _expect():
    out = ["@M %s %s %s %s %s %s %s" % (parse_decimal("-0.3012", 6), decimal_text(301200, 6), decimal_text(-5, 2),
                                        cents_text(75300), cents_text(-5000), cost(2403, 301200),
                                        quote_money_numbers('{"price": -0.01, "x": "price"}'))]
    for name, step in ((ENERGY_CHARTS, 7), (AWATTAR, 13)):
        p = PriceParser()
        data = open("%s/%s" % (HERE, name), "rb").read()
        for i in range(0, len(data), step):
            p.write(data[i:i + step])
        rows = p.finish()
        book = PriceBook(lambda d: d * 86400)
        book.merge(rows, -10 ** 6, 10 ** 6, lambda t: t // 86400)
        out.append("@R %d %d %d %s" % (len(rows), sum(r[2] for r in rows if r[2] is not None), len(book.days),
                                       book.text().replace("\n", "|")[:300]))
    return out


def test_money_and_price_reading_are_identical_in_the_vm():
    files = [("%s/%s" % (HERE, ENERGY_CHARTS), "ec.json"), ("%s/%s" % (HERE, AWATTAR), "aw.json")]
    with MicroVM(packages=("core", "meter", "services"), extra_files=files) as vm:
        out, _fuel = vm.run(CODE)
    lines = [ln for ln in out.splitlines() if ln.startswith("@")]
    assert lines == _expect()
    assert json.loads(lines[0].split(" ", 7)[7]) == {"price": "-0.01", "x": "price"}
