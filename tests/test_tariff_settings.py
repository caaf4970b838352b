"""Tariff settings (issue 29 point 1): modes, money as exact decimals from the request text, time-of-use windows,
bad input refused by name with nothing stored; the GET document shows money as JSON numbers."""

import json

import pytest

from core.money import cents_text, cost, parse_decimal, quote_money_numbers
from core.settings import Settings, SettingsError
from services.api.settings_job import settings_json


def make(tmp_path):
    return Settings(str(tmp_path / "settings.json"), zone_ok=lambda z: True)


def post(s, raw):
    """What POST /api/v1/settings does with a body: money numbers handed over as their text."""
    return s.update(json.loads(quote_money_numbers(raw)))


def test_tariff_is_off_by_default_with_eur():
    s = Settings()
    assert s.get("tariff.mode") == "off" and s.get("tariff.currency") == "EUR"


def test_fixed_prices_are_kept_as_exact_decimals_and_shown_as_json_numbers(tmp_path):
    s = make(tmp_path)
    changed = post(s, '{"tariff": {"mode": "fixed", "importPrice": 0.3012, "exportPrice": 0.0786, '
                      '"baseFee": 12.5, "currency": "EUR"}}')
    assert changed == ["tariff.baseFee", "tariff.exportPrice", "tariff.importPrice", "tariff.mode"]
    assert s.get("tariff.importPrice") == "0.3012" and s.get("tariff.exportPrice") == "0.0786"
    text = settings_json(s.public())
    doc = json.loads(text)
    assert '"importPrice":0.3012' in text and '"baseFee":12.5' in text
    assert doc["tariff"]["mode"] == "fixed" and doc["mqtt"]["port"] == 1883
    # stored and read back by the next start
    again = make(tmp_path)
    assert again.get("tariff.importPrice") == "0.3012" and again.load_errors == 0


def test_a_number_is_read_from_its_text_never_through_a_float():
    # 0.1 + 0.2 style: what a float would make of many digits never reaches the check
    raw = '{"tariff":{"importPrice": 99.999999, "tou":[{"days":[1],"from":"00:00","to":"06:00","price":-0.000001}]},' \
          ' "device_name": "\\"price\\": 1"}'
    out = json.loads(quote_money_numbers(raw))
    assert out["tariff"]["importPrice"] == "99.999999"
    assert out["tariff"]["tou"][0]["price"] == "-0.000001"
    assert out["device_name"] == '"price": 1'       # a key's name inside a string is left alone
    assert parse_decimal("99.999999", 6) == 99999999


def test_time_of_use_windows(tmp_path):
    s = make(tmp_path)
    post(s, '{"tariff": {"mode": "tou", "importPrice": 0.35, "tou": ['
            '{"days": [5, 1, 2, 3, 4], "from": "22:00", "to": "06:00", "price": 0.22},'
            '{"days": [6, 7], "from": "00:00", "to": "24:00", "price": 0.25}]}}')
    tou = s.get("tariff.tou")
    assert tou[0] == {"days": [1, 2, 3, 4, 5], "from": "22:00", "to": "06:00", "price": "0.22"}
    assert '"price":0.25' in settings_json(s.public())


@pytest.mark.parametrize("patch,key", [
    ({"mode": "cheap"}, "tariff.mode"),
    ({"mode": 1}, "tariff.mode"),
    ({"importPrice": "0.1234567"}, "tariff.importPrice"),       # more than six decimals
    ({"importPrice": "1e-3"}, "tariff.importPrice"),
    ({"importPrice": "101"}, "tariff.importPrice"),
    ({"importPrice": True}, "tariff.importPrice"),
    ({"importPrice": None}, "tariff.importPrice"),
    ({"currency": "eur"}, "tariff.currency"),
    ({"currency": "EURO"}, "tariff.currency"),
    ({"vatPercent": "19.123"}, "tariff.vatPercent"),
    ({"baseFee": "1.001"}, "tariff.baseFee"),
    ({"priceUrl": "ftp://x/"}, "tariff.priceUrl"),
    ({"tou": {"days": [1]}}, "tariff.tou"),
    ({"tou": [{"days": [1], "from": "00:00", "to": "06:00", "price": "0.2"}] * 9}, "tariff.tou"),
    ({"tou": [{"days": [0], "from": "00:00", "to": "06:00", "price": "0.2"}]}, "tariff.tou"),
    ({"tou": [{"days": [1, 1], "from": "00:00", "to": "06:00", "price": "0.2"}]}, "tariff.tou"),
    ({"tou": [{"days": [1], "from": "24:00", "to": "06:00", "price": "0.2"}]}, "tariff.tou"),
    ({"tou": [{"days": [1], "from": "06:00", "to": "06:00", "price": "0.2"}]}, "tariff.tou"),
    ({"tou": [{"days": [1], "from": "6:00", "to": "07:00", "price": "0.2"}]}, "tariff.tou"),
    ({"tou": [{"days": [1], "from": "06:00", "to": "07:00"}]}, "tariff.tou"),
    ({"tou": [{"days": [1], "from": "06:00", "to": "07:00", "price": "x", "extra": 1}]}, "tariff.tou"),
])
def test_bad_tariff_input_is_refused_by_name_and_nothing_changes(tmp_path, patch, key):
    s = make(tmp_path)
    post(s, '{"tariff": {"mode": "fixed", "importPrice": 0.3}}')
    before = json.dumps(s.doc, sort_keys=True)
    with pytest.raises(SettingsError) as ei:
        s.update({"tariff": patch})
    assert list(ei.value.fields) == [key]
    assert json.dumps(s.doc, sort_keys=True) == before


def test_cost_arithmetic_is_integer_and_rounds_half_away_from_zero():
    assert cost(2500, 301200) == 75300              # 0.25 kWh at 0.3012 = 0.0753
    assert cents_text(75300) == "0.08" and cents_text(-5000) == "-0.01" and cents_text(4999) == "0.00"
    assert cost(-1000, 5) == -1 and cost(1000, -5) == -1 and cost(1000, 5) == 1   # half away from zero
