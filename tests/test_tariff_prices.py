"""Day-ahead prices (issue 29 points 1 and 5): both public formats from a local stand-in (recorded-format answers
with a DST day and negative prices), fetched without blocking over http and https (certificate checked), kept on
the flash; every bad answer and fault gets a clear state and changes nothing."""

import json
import time
import tracemalloc
from decimal import ROUND_HALF_UP, Decimal

import pytest
import socketpool

from core.durable_file import read_text, stored
from core.bus import Bus
from core.tz import days_from_civil, local_day_start_utc
from services.tariff import routes as tr
from services.tariff.prices import MISSING, PriceBook, PriceError, PriceParser
from services.tariff.service import TariffService
from tests.history_fakes import FakeClock, FakeSettings
from tests.price_server import AWATTAR, ENERGY_CHARTS, PriceServer, capture
from tests.test_history_service import Sim

OCT24 = days_from_civil(2026, 10, 24)
OCT25 = days_from_civil(2026, 10, 25)     # 25 hours in Berlin
MAR29 = days_from_civil(2026, 3, 29)      # 23 hours in Berlin


@pytest.fixture(autouse=True)
def drive(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def day_start(day, clock=FakeClock(0)):
    from core.tz import civil_from_days
    return local_day_start_utc(clock.rule, *civil_from_days(day))


def parse(body, chunk=None):
    p = PriceParser()
    if chunk is None:
        p.write(body)
    else:
        for i in range(0, len(body), chunk):
            p.write(body[i:i + chunk])
    return p.finish()


def booked(rows, first, last):
    clock = FakeClock(0)
    book = PriceBook(day_start)
    book.merge(rows, first, last, lambda t: clock.local(t) // 86400)
    return book


def test_energy_charts_answer_fills_a_25_hour_day_with_100_quarter_hours_and_negative_prices():
    body = capture(ENERGY_CHARTS)
    rows = parse(body)
    assert rows == parse(body, chunk=7) == parse(body, chunk=1)      # any split of the stream reads the same
    doc = json.loads(body)
    assert len(rows) == len(doc["unix_seconds"]) == 196
    book = booked(rows, OCT24, OCT25)
    assert len(book.day_prices(OCT24)) == 96 and len(book.day_prices(OCT25)) == 100
    assert book.complete(OCT24) and book.complete(OCT25)
    for t, p in zip(doc["unix_seconds"], doc["price"]):
        assert Decimal(book.price(t)) == (Decimal(str(p)) * 1000).quantize(Decimal(1), ROUND_HALF_UP)
    assert min(doc["price"]) < 0 and min(book.day_prices(OCT25)) < 0


def test_awattar_hourly_answer_fills_a_23_hour_day_with_92_quarter_hours():
    rows = parse(capture(AWATTAR), chunk=13)
    assert len(rows) == 47 and all(r[1] == 3600 for r in rows)
    book = booked(rows, MAR29, MAR29 + 1)
    assert len(book.day_prices(MAR29)) == 92 and book.complete(MAR29) and book.complete(MAR29 + 1)
    doc = json.loads(capture(AWATTAR))
    first = doc["data"][12]
    for k in range(4):
        assert book.price(first["start_timestamp"] // 1000 + 900 * k) == round(first["marketprice"] * 1000)
    assert first["marketprice"] < 0


def ec(ts, prices, unit="EUR / MWh"):
    return json.dumps({"unix_seconds": ts, "price": prices, "unit": unit}).encode()


T0 = day_start(OCT24)


@pytest.mark.parametrize("body,why", [
    (b"<!DOCTYPE html><html><body>Bad gateway</body></html>", "HTML"),
    (ec([T0, T0 + 900], [1, 2], unit="EUR / kWh"), "unit"),
    (ec([T0, T0 + 900], [1, 2], unit="ct/kWh"), "unit"),
    (ec([T0, T0], [1, 2]), "two prices"),                                   # duplicate
    (ec([T0 + 900, T0], [1, 2]), "two prices"),                             # out of order
    (ec([T0, T0 + 900], [1]), "timestamps but"),
    (ec([T0 + 17, T0 + 917], [1, 2]), "quarter hour"),
    (ec([T0, T0 + 600], [1, 2]), "every 600 s"),
    (ec([T0, T0 + 900], [1, 10001]), "outside"),                            # extreme
    (ec([T0, T0 + 900], [1, "12"]), "must be a number"),
    (ec(list(range(T0, T0 + 900 * 10000, 900)), [1] * 10000), "more than 400"),
    (b'{"unix_seconds":[%d],"price":[1],"unit":"EUR / MWh"' % T0, "ends before"),
    (b'{"foo": 1}', "no prices"),
    (b'[1, 2]', "not a JSON object"),
    (b'{"data":[{"start_timestamp":%d000,"end_timestamp":%d000,"marketprice":5,"unit":"Eur/kWh"}]}' % (T0, T0 + 3600),
     "unit"),
    (b'{"data":[{"start_timestamp":%d000,"end_timestamp":%d000,"marketprice":5,"unit":"Eur/MWh"},'
     b'{"start_timestamp":%d000,"end_timestamp":%d000,"marketprice":6,"unit":"Eur/MWh"}]}'
     % (T0, T0 + 3600, T0 + 1800, T0 + 5400), "two prices"),                   # overlapping hours
    (b'{"data":[{"start_timestamp":%d000,"marketprice":5,"unit":"Eur/MWh"}]}' % T0, "lacks"),
])
def test_bad_answers_are_refused_with_a_reason(body, why):
    with pytest.raises(PriceError) as ei:
        parse(body, chunk=64)
    assert why in str(ei.value)


def test_gaps_and_null_prices_stay_unknown_and_negative_and_extreme_prices_are_taken():
    rows = parse(ec([T0, T0 + 900, T0 + 2700, T0 + 3600], [-500, None, 4000, 0.004]))
    book = booked(rows, OCT24, OCT24)
    d = book.day_prices(OCT24)
    assert list(d[:6]) == [-500000, MISSING, MISSING, 4000000, 4, MISSING]
    assert book.price(T0 + 900) is None and not book.complete(OCT24)


def test_ten_thousand_entries_are_refused_while_they_stream_without_holding_them():
    body = ec(list(range(T0, T0 + 900 * 10000, 900)), [12.34] * 10000)
    tracemalloc.start()
    p = PriceParser()
    with pytest.raises(PriceError):
        for i in range(0, len(body), 512):
            p.write(body[i:i + 512])
    _cur, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert p.bytes < len(body) // 10          # stopped at the 401st entry, not at the end
    assert peak < 64 * 1024


# --- the service against the stand-in ---

class Env:
    def __init__(self, url, utc, ssl_factory=None, history=None, extra=None):
        self.clock = history.clock if history is not None else FakeClock(utc)
        self.settings = history.settings if history is not None else FakeSettings()
        self.settings.values.update({"tariff.mode": "dynamic", "tariff.priceUrl": url, "tariff.surcharge": "0.1532",
                                     "tariff.vatPercent": "19", "tariff.exportPrice": "0.0786"})
        self.settings.values.update(extra or {})
        self.bus = history.bus if history is not None else Bus()
        self.svc = TariffService(socketpool.SocketPool(None), self.settings, self.bus, self.clock,
                                 history=history.h if history is not None else None, ssl_factory=ssl_factory)
        self.svc.start()
        self.ms = 0
        self.polls = 0

    def fetch(self, limit_s=20):
        """Poll until the fetch ends; every poll reads at most one buffer of the answer (the loop never waits)."""
        end = time.monotonic() + limit_s
        self.svc.poll(self.ms)
        while self.svc.fetch_state == "fetching" and time.monotonic() < end:
            before = self.svc._parser.bytes if self.svc._parser is not None else 0
            self.ms += 20
            self.svc.poll(self.ms)
            self.polls += 1
            if self.svc._parser is not None:
                assert self.svc._parser.bytes - before <= TariffService.BUF
            time.sleep(0.002)
        return self.svc.fetch_state


def at_local(day, hh, mm=0, clock=FakeClock(0)):
    """UTC second of a local wall time (also on a 23- or 25-hour day)."""
    t = day_start(day) + hh * 3600 + mm * 60
    return t + day * 86400 + hh * 3600 + mm * 60 - clock.local(t)


def test_the_service_fetches_today_and_tomorrow_keeps_them_on_the_flash_and_reads_them_back():
    srv = PriceServer()
    try:
        e = Env(srv.energy_charts_url, at_local(OCT24, 14))
        assert e.fetch() == "ok" and e.polls > 3
        assert srv.requests == ["/price?bzn=DE-LU&start=2026-10-24&end=2026-10-25"]
        assert e.svc.book.complete(OCT24) and e.svc.book.complete(OCT25)
        assert stored("tariff/prices.txt")              # in whatever form the durable store keeps it
        # a restart: the prices come from the flash; both days complete, so no fetch until tomorrow 13:30
        e2 = Env(srv.energy_charts_url, at_local(OCT24, 15))
        assert e2.svc.book.complete(OCT25) and len(e2.svc.book.day_prices(OCT25)) == 100
        e2.svc.poll(0)
        assert e2.svc.fetch_state == "idle" and len(srv.requests) == 1
        assert e2.svc._next_utc == at_local(OCT25, 13, 30)
    finally:
        srv.close()


def test_awattar_url_with_millisecond_placeholders():
    srv = PriceServer(capture(AWATTAR))
    try:
        e = Env(srv.awattar_url, at_local(MAR29, 14))
        assert e.fetch() == "ok"
        a, b = day_start(MAR29), day_start(MAR29 + 2)
        assert srv.requests == ["/v1/marketdata?start=%d000&end=%d000" % (a, b)]
        assert e.svc.book.complete(MAR29) and len(e.svc.book.day_prices(MAR29)) == 92
    finally:
        srv.close()


@pytest.mark.parametrize("fault", ["html", "close", "500", "down", "stall", "unit"])
def test_a_failing_price_server_is_reported_and_the_prices_kept(fault):
    srv = PriceServer()
    try:
        e = Env(srv.energy_charts_url, at_local(OCT24, 14))
        assert e.fetch() == "ok"
        kept = e.svc.book.text()
        on_flash = read_text("tariff/prices.txt", lambda t: t)
        e.clock.utc = at_local(OCT25, 14)           # tomorrow's fetch
        srv.fault = fault if fault not in ("down", "unit") else None
        if fault == "unit":
            srv.body = capture(ENERGY_CHARTS).replace(b"EUR / MWh", b"EUR / kWh")
        if fault == "down":
            srv.close()
        e.svc._next_utc = 0
        if fault == "stall":
            from services.ota import http_get
            http_get.HttpGet.stall_ms = 300
        try:
            assert e.fetch() == "failed"
        finally:
            if fault == "stall":
                http_get.HttpGet.stall_ms = 15000
        from core.module import WARN
        assert e.svc.fetch_error and e.svc.state == WARN
        e.svc.book.prune(OCT24)
        assert e.svc.book.day_prices(OCT24) is not None
        assert read_text("tariff/prices.txt", lambda t: t) == on_flash
        assert kept.startswith("P1")
        assert e.svc._next_utc == e.clock.utc + TariffService.RETRY_S[0]
    finally:
        if fault != "down":
            srv.close()


def test_https_with_the_certificate_checked(tmp_path):
    from tests.mqtt_peers import device_ssl, make_ca

    certs = make_ca(str(tmp_path / "ca"))
    pem = open(certs["ca.crt"]).read()
    srv = PriceServer(tls_certs=certs)

    def trusted():
        ctx = device_ssl().create_default_context()
        ctx.load_verify_locations(cadata=pem)
        return ctx

    try:
        e = Env(srv.energy_charts_url, at_local(OCT24, 14), ssl_factory=lambda: device_ssl().create_default_context())
        assert srv.energy_charts_url.startswith("https://")
        assert e.fetch() == "failed" and "TLS" in e.svc.fetch_error     # not trusted: nothing taken
        assert e.svc.book.day_prices(OCT24) is None
        e2 = Env(srv.energy_charts_url, at_local(OCT24, 14), ssl_factory=trusted)
        assert e2.fetch() == "ok" and e2.svc.book.complete(OCT25)
    finally:
        srv.close()


@pytest.mark.parametrize("capture_name,day", [(ENERGY_CHARTS, OCT25), (AWATTAR, MAR29)])
def test_dynamic_cost_of_every_quarter_hour_of_a_dst_day_is_energy_times_price_to_the_cent(capture_name, day):
    srv = PriceServer(capture(capture_name))
    sim = Sim(day_start(day) - 600)
    try:
        url = srv.energy_charts_url if capture_name == ENERGY_CHARTS else srv.awattar_url
        e = Env(url, None, history=sim)
        assert e.fetch() == "ok"
        hours = (day_start(day + 1) - day_start(day)) // 3600
        sim.run(600 + hours * 3600 + 600, import_w=1500, export_w=0)
        recs = [r for r in sim.hr() if r[2] == day]
        assert len(recs) == hours * 4                           # 100 or 92 quarter hours
        body = json.loads(tr.cost_body(sim.h, e.svc, day, day, "quarter"))
        assert len(body["items"]) == hours * 4
        for r, item in zip(recs, body["items"]):
            market = Decimal(e.svc.book.price(r[1])) / 10 ** 6
            price = ((market + Decimal("0.1532")) * Decimal("1.19")).quantize(Decimal("0.000001"), ROUND_HALF_UP)
            kwh = Decimal(str(item["import_kwh"]))
            assert kwh == Decimal(r[8]) / 10000
            assert Decimal(str(item["import_cost"])) == (kwh * price).quantize(Decimal("0.01"), ROUND_HALF_UP)
        assert any(e.svc.book.price(r[1]) < 0 for r in recs)     # negative market prices were booked too
        # /api/v1/tariff: the next 36 h and the cheapest 3-hour window of the day, computed by hand
        t = json.loads(tr.tariff_body(e.svc, day_start(day), 3))
        assert len(t["prices"]) == 144
        prices = [e.svc.tariff.import_at(day_start(day) + 900 * i, 0) for i in range(hours * 4)]
        sums = [sum(prices[i:i + 12]) for i in range(len(prices) - 11)]
        best = sums.index(min(sums))
        assert t["cheapest"]["today"]["timestamp"] == day_start(day) + 900 * best
    finally:
        srv.close()
