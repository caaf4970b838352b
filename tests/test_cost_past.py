"""Past cost (issue 37 point 5): a day older than the quarter-hour ring is answered from its day record (energy
known, cost as booked, null where nothing was booked, null everywhere where nothing was recorded), previous months
and years (/api/v1/cost?month=YYYY-MM, ?year=YYYY) with their bad inputs, and the export revenue of a gap record
under time-varying prices."""

import json
from decimal import ROUND_HALF_UP, Decimal

import pytest

from core.app import App
from core.tz import days_from_civil
from services.history import store as hs
from services.history.store import HistoryStore
from services.tariff import routes as tr
from services.tariff.prices import PriceBook
from services.tariff.service import TariffService
from services.tariff.tariff import Tariff
from tests.test_history_service import Sim, berlin_midnight


@pytest.fixture(autouse=True)
def drive(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def cents(micro):
    return (Decimal(micro) / 10 ** 6).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)


def dec(v):
    return Decimal(str(v))


class Request:
    """What the cost route reads of a request (adafruit_httpserver keeps query values as lists)."""

    def __init__(self, **query):
        self.query_params = type("Q", (), {})()
        self.query_params._storage = {k: [v] for k, v in query.items()}


def get_cost(sim, svc, **query):
    """(status, body as JSON) of GET /api/v1/cost?query, the streamed body joined."""
    app = App(sim.bus, sim.settings, None)
    app.history = sim.h
    app.tariff = svc
    app.clock = sim.clock
    handler = [r for r in tr.routes(app) if r.path == "/api/v1/cost"][0].handler
    resp = handler(Request(**query))
    body = resp._body
    text = "".join(body()) if callable(body) else body
    return resp._status.code, json.loads(text)


def service(sim):
    svc = TariffService(None, sim.settings, sim.bus, sim.clock, history=sim.h)
    svc.start()
    return svc


def small_ring_sim(start, values, hr_cap=200):
    """A history whose quarter-hour ring holds about two days (200 slots): the third day back is beyond it."""
    sim = Sim(start, store=HistoryStore("history.bin", hr_cap=hr_cap))
    sim.settings.values.update(values)
    sim.h.tariff = Tariff(sim.settings)
    return sim


def lr_of(sim, day):
    return [r for r in sim.lr() if r[2] == day][0]


FIXED = {"tariff.mode": "fixed", "tariff.importPrice": "0.3012", "tariff.exportPrice": "0.0786",
         "tariff.baseFee": "9.95"}


# --- (a) a day beyond the quarter-hour ring ---

@pytest.mark.parametrize("ymd,hours", [((2026, 6, 21), 24), ((2026, 3, 29), 23), ((2026, 10, 25), 25)])
def test_a_day_beyond_the_quarter_hour_ring_is_answered_from_its_day_record(ymd, hours):
    day = days_from_civil(*ymd)
    sim = small_ring_sim(berlin_midnight(*ymd) - 86400, FIXED)    # from the day before: ymd is a whole day
    sim.run(5 * 86400 + 1800, step=36, import_w=1000, export_w=0)
    sim.h.flush()
    assert not [r for r in sim.hr() if r[2] == day]          # its quarter hours are gone
    rec = lr_of(sim, day)
    assert rec[8] == hours * 10000 and rec[5] & hs.F_IC      # 1 kW all day, priced when its quarters closed
    status, body = get_cost(sim, service(sim), date="%04d-%02d-%02d" % ymd)
    assert status == 200
    d = body["day"]
    assert dec(d["import_kwh"]) == hours                     # was 0.0 before: the quarter hours alone were read
    assert dec(d["import_cost"]) == cents(rec[10]) == (Decimal(hours) * Decimal("0.3012")).quantize(Decimal("0.01"))
    assert d["complete"] is True and dec(d["export_kwh"]) == 0
    assert body["items"] == [] and body["quarter_hours_kept"] is False
    # today, still in the ring: the day record and the quarter hours agree
    today = get_cost(sim, service(sim))[1]
    assert today["quarter_hours_kept"] is True and today["items"]
    assert sum(dec(i["import_kwh"]) for i in today["items"]) == dec(today["day"]["import_kwh"])
    assert today["day"] == today["today"]


def test_a_day_priced_by_no_tariff_has_its_energy_and_cost_null_and_a_day_without_record_is_all_null():
    start = berlin_midnight(2026, 6, 21)
    day = days_from_civil(2026, 6, 21)
    sim = small_ring_sim(start - 36, {"tariff.mode": "off"})    # the first reading at midnight
    sim.run(86400 + 36, step=36, import_w=500)
    sim.settings.values.update({"tariff.mode": "tou", "tariff.importPrice": "0.40"})
    sim.h.tariff.load()
    sim.run(3 * 86400, step=36, import_w=500)
    sim.h.flush()
    svc = service(sim)
    status, body = get_cost(sim, svc, date="2026-06-21")
    assert status == 200 and lr_of(sim, day)[8] == 120000 - 50        # the 36 s before the first reading
    assert dec(body["day"]["import_kwh"]) == Decimal("11.995") and body["day"]["import_cost"] is None
    assert body["day"]["net"] is None and body["day"]["complete"] is False
    # the day before the history began: nothing is known, not 0 kWh
    status, body = get_cost(sim, svc, date="2026-06-20")
    assert status == 200 and body["items"] == []
    assert body["day"] == {"import_kwh": None, "import_cost": None, "export_kwh": None, "export_revenue": None,
                           "net": None, "complete": False}


# --- (b) previous months and years ---

def year_end_sim():
    """From 2025-12-29 12:00 to 2026-01-02 12:00 (Berlin), 1 kW import, 200 W export from 0:00 to 6:00."""
    sim = small_ring_sim(berlin_midnight(2025, 12, 29) + 12 * 3600, FIXED)
    sim.run(12 * 3600, step=36, import_w=1000)
    for _ in range(3):
        sim.run(6 * 3600, step=36, import_w=1000, export_w=200)
        sim.run(18 * 3600, step=36, import_w=1000)
    sim.run(12 * 3600, step=36, import_w=1000)
    sim.h.flush()
    return sim


def test_in_january_decembers_cost_and_last_years_are_there():
    sim = year_end_sim()
    svc = service(sim)
    dec_days = [r for r in sim.lr() if days_from_civil(2025, 12, 1) <= r[2] < days_from_civil(2026, 1, 1)]
    assert len(dec_days) == 3
    status, body = get_cost(sim, svc, month="2025-12")
    assert status == 200
    assert body["period"] == "2025-12" and body["resolution"] == "day" and body["mode"] == "fixed"
    assert [i["date"] for i in body["items"]] == ["2025-12-29", "2025-12-30", "2025-12-31"]
    assert [i["timestamp"] for i in body["items"]] == [r[1] for r in dec_days]
    for item, r in zip(body["items"], dec_days):
        assert dec(item["import_kwh"]) == Decimal(r[8]) / 10000
        assert dec(item["import_cost"]) == cents(r[10])
        assert dec(item["export_revenue"]) == cents(r[11])
        if r[2] > dec_days[0][2]:
            assert r[8] == 240000 and r[9] == 12000 and r[11] == 12000 * 78600 // 10000
        assert "base_fee" not in item
    total = body["total"]
    assert dec(total["import_kwh"]) == Decimal(sum(r[8] for r in dec_days)) / 10000
    assert dec(total["import_cost"]) == cents(sum(r[10] for r in dec_days))
    assert dec(total["export_kwh"]) == Decimal("2.4")
    assert dec(total["net"]) == cents(sum(r[10] - r[11] for r in dec_days))
    assert dec(total["base_fee"]) == Decimal("9.95") and total["complete"] is True

    status, year = get_cost(sim, svc, year="2025")
    assert status == 200 and year["period"] == "2025" and year["resolution"] == "month"
    assert len(year["items"]) == 1 and year["items"][0]["month"] == "2025-12"
    month_item = dict(year["items"][0])
    del month_item["month"]
    assert month_item == total and year["total"] == total
    # the current year and month: the same sums as the main answer's
    main = get_cost(sim, svc)[1]
    status, this_year = get_cost(sim, svc, year="2026")
    assert status == 200 and this_year["total"] == main["year"]
    assert [i["month"] for i in this_year["items"]] == ["2026-01"]
    status, this_month = get_cost(sim, svc, month="2026-01")
    assert this_month["total"] == main["month"] and len(this_month["items"]) == 2


def test_a_tariff_switched_off_later_leaves_what_was_booked_and_drops_the_base_fee():
    sim = year_end_sim()
    svc = service(sim)
    status, body = get_cost(sim, svc, month="2026-01")
    assert status == 200 and dec(body["total"]["base_fee"]) == Decimal("9.95")
    sim.settings.values["tariff.mode"] = "off"
    sim.h.tariff.load()
    svc.tariff.load()
    status, body = get_cost(sim, svc, month="2025-12")
    assert status == 200 and body["mode"] == "off"
    assert dec(body["total"]["base_fee"]) == 0 and body["total"]["import_cost"] is not None   # booked stays booked


BAD = [
    ({"month": "2025-13"}, "no such month"),
    ({"month": "2025-00"}, "no such month"),
    ({"month": "2025-1"}, "YYYY-MM"),
    ({"month": "25-12"}, "YYYY-MM"),
    ({"month": "2025/12"}, "YYYY-MM"),
    ({"month": "2025-1x"}, "YYYY-MM"),
    ({"month": "\u0662\u0660\u0662\u0665-12"}, "YYYY-MM"),
    ({"month": ""}, "YYYY-MM"),
    ({"month": "1969-12"}, "out of range"),
    ({"month": "2026-02"}, "in the future"),
    ({"month": "2027-01"}, "in the future"),
    ({"month": "2025-11"}, "no history before 2025-12-29"),
    ({"year": "2024"}, "no history before 2025-12-29"),
    ({"year": "1970"}, "no history before 2025-12-29"),
    ({"year": "2027"}, "in the future"),
    ({"year": "26"}, "YYYY"),
    ({"year": "2026 "}, "YYYY"),
    ({"year": "-2026"}, "YYYY"),
    ({"year": ""}, "YYYY"),
    ({"year": "2106"}, "out of range"),
    ({"month": "2025-12", "year": "2025"}, "one of date, month, year"),
    ({"date": "2025-12-30", "month": "2025-12"}, "one of date, month, year"),
    ({"month": "2025-12", "resolution": "hour"}, "date only"),
]


def test_bad_months_and_years_are_400_with_a_clear_error():
    sim = year_end_sim()
    svc = service(sim)
    for query, message in BAD:
        status, body = get_cost(sim, svc, **query)
        assert status == 400 and message in body["error"], (query, body)


def test_without_any_history_only_the_current_month_and_year_answer():
    sim = small_ring_sim(berlin_midnight(2026, 1, 15) + 60, FIXED)   # no reading yet
    svc = service(sim)
    assert sim.h.first_day() is None
    status, body = get_cost(sim, svc, month="2025-12")
    assert status == 400 and "no history recorded yet" in body["error"]
    status, body = get_cost(sim, svc, month="2026-01")
    assert status == 200 and body["items"] == [] and body["total"]["import_kwh"] is None
    assert "base_fee" not in body["total"]
    status, body = get_cost(sim, svc, year="2026")
    assert status == 200 and body["items"] == [] and body["total"]["import_cost"] is None


def test_the_oldest_day_is_found_in_a_wrapped_day_ring_with_two_slot_reads():
    sim = Sim(berlin_midnight(2026, 6, 1), store=HistoryStore("history.bin", hr_cap=50, lr_cap=5))
    sim.run(8 * 86400, step=300, import_w=100)
    sim.h.flush()
    days = [r[2] for r in sim.store.records(hs.LR)]
    assert len(days) == 5 and sim.store.lr.head != 0              # wrapped
    assert sim.h.first_day() == days[0] == days_from_civil(2026, 6, 4)
    opened = []
    real = sim.store.opener

    def counting(path, mode):
        opened.append(path)
        return real(path, mode)

    sim.store.opener = counting
    assert sim.store.oldest(hs.LR)[2] == days[0] and len(opened) == 1


def test_the_period_answers_stream_a_flash_batch_at_a_time():
    sim = year_end_sim()
    svc = service(sim)
    chunks = list(tr.period_chunks(sim.h, svc, days_from_civil(2026, 1, 2), days_from_civil(2025, 1, 1),
                                   days_from_civil(2026, 1, 1), True))
    assert chunks.count("") >= hs.LR_CAP // hs.READ_BATCH and all(len(c) < 2000 for c in chunks)
    assert json.loads(chunks[-1])["period"] == "2025"


# --- (c) a gap record's export revenue under time-varying prices ---

@pytest.mark.parametrize("mode", ["tou", "dynamic"])
def test_a_gap_record_books_its_export_revenue_in_every_mode(mode):
    start = berlin_midnight(2026, 6, 21)
    sim = Sim(start)
    book = PriceBook(sim.h._day_start)
    day = days_from_civil(2026, 6, 21)
    book.merge([(start, 86400, 100000)], day, day, lambda t: sim.clock.local(t) // 86400)
    sim.settings.values.update({"tariff.mode": mode, "tariff.importPrice": "0.40", "tariff.exportPrice": "0.0786",
                                "tariff.surcharge": "0.15", "tariff.vatPercent": "19"})
    sim.h.tariff = Tariff(sim.settings, book)
    sim.run(3600, import_w=300, export_w=1200)
    sim.run(3600, import_w=300, export_w=1200, meter=False)     # an hour without readings: a gap
    sim.run(1800, import_w=300, export_w=1200)
    gaps = [r for r in sim.hr() if r[5] & hs.F_GAP]
    assert len(gaps) == 1
    g = gaps[0]
    assert g[9] > 0 and g[5] & hs.F_EC and g[11] == (g[9] * 78600 + 5000) // 10000
    assert not g[5] & hs.F_IC and g[10] == 0                     # its import: nobody knows its quarter hours
    body = json.loads(tr.cost_body(sim.h, service(sim), day, day, "hour"))
    assert dec(body["day"]["export_revenue"]) == cents(sum(r[11] for r in sim.hr()))
    assert body["day"]["complete"] is False                      # the gap's import has no price


def test_the_answers_have_the_fields_docs_openapi_promises():
    import os

    import yaml

    with open(os.path.join(os.path.dirname(__file__), "..", "docs", "openapi.yaml"), encoding="utf-8") as f:
        schemas = yaml.safe_load(f)["components"]["schemas"]
    sums = schemas["CostSums"]
    sim = year_end_sim()
    svc = service(sim)
    for query, name in (({"month": "2025-12"}, "CostPeriod"), ({"year": "2026"}, "CostPeriod"),
                        ({"date": "2025-11-30"}, "Cost"), ({}, "Cost")):
        status, body = get_cost(sim, svc, **query)
        assert status == 200 and set(schemas[name]["required"]) <= set(body) <= set(schemas[name]["properties"])
        totals = [body["total"]] if name == "CostPeriod" else [body[k] for k in ("today", "month", "year", "day")]
        for s in totals + body["items"]:
            assert set(sums["required"]) <= set(s)
            extra = set(s) - set(sums["properties"])
            assert extra <= {"date", "timestamp", "month", "start"}, extra
