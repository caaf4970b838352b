"""History endpoints over real HTTP (the firmware's HttpApi on the socketpool stand-in), read by aio-wattwaechter."""

import asyncio
import json

import pytest
import requests
from adafruit_ticks import ticks_ms
from aio_wattwaechter import Wattwaechter
from aio_wattwaechter.exceptions import WattwaechterBadRequestError
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from core.app import App
from core.log import Log
from core.tz import days_from_civil
from services.history import routes as routes_history
from tests.history_fakes import reading
from tests.inproc import api_in_thread
from tests.test_history_service import Sim, berlin_midnight

DAY1 = days_from_civil(2026, 10, 24)   # the day before the autumn DST change
DAY2 = days_from_civil(2026, 10, 25)   # 100 quarter hours


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    import os

    old = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("drive"))
    sim = Sim(berlin_midnight(2026, 10, 24) - 5)
    sim.run(2 * 86400 + 5 * 3600, step=30)         # two whole days and 5 h of the third, partly flushed
    sim.settings.values.update({"language.active": "en"})
    app = App(sim.bus, sim.settings, Log(capacity=16))
    app.clock = sim.clock
    app.history = sim.h
    app.mem_free = lambda: 1_000_000
    with api_in_thread(app, [routes_history]) as port:
        yield sim, "http://127.0.0.1:%d" % port, port
    os.chdir(old)


def client_call(port, fn):
    async def go():
        async with Wattwaechter("127.0.0.1:%d" % port) as c:
            return await fn(c)
    return asyncio.run(go())


def test_high_res_through_the_published_client(served):
    sim, _url, port = served
    hist = client_call(port, lambda c: c.history_high_res("2026-10-25"))
    assert hist.start == "2026-10-25" and hist.days == 1
    assert len(hist.items) == 100
    recs = [r for r in sim.hr() if r[2] == DAY2]
    first = hist.items[0]
    assert first.date == "2026-10-25T00:00" and first.timestamp == recs[0][1]
    assert first.import_total_kwh == pytest.approx(recs[0][6] / 10000)
    assert first.import_kw == pytest.approx(0.225) and first.power_w == 900.0
    assert [i.date[11:] for i in hist.items].count("02:15") == 2       # the repeated hour of the DST change
    assert hist.import_total_kwh == pytest.approx(sum(r[8] for r in recs) / 10000)


def test_low_res_through_the_published_client_includes_today_so_far(served):
    sim, _url, port = served
    hist = client_call(port, lambda c: c.history_low_res("2026-10-23", 5))
    assert [i.date for i in hist.items] == ["2026-10-24", "2026-10-25", "2026-10-26"]
    day2 = hist.items[1]
    assert day2.import_kwh == pytest.approx(25 * 0.9, abs=0.001)       # 25 h at 900 W
    assert day2.import_total_kwh == pytest.approx(hist.items[0].import_total_kwh + hist.items[0].import_kwh)
    assert day2.timestamp == berlin_midnight(2026, 10, 25)
    assert hist.import_total_kwh == pytest.approx(sum(i.import_kwh for i in hist.items))


def test_latest_through_the_published_client_and_204_when_stale(served):
    sim, _url, port = served
    sim.bus.publish("reading", reading(123456789, 42, 777, ts_ms=ticks_ms()))
    data = client_call(port, lambda c: c.meter_data())
    assert data.total_consumption == 12345.6789 and data.total_feed_in == 0.0042 and data.power == 777
    assert data.get("1.8.0").unit == "kWh" and data.get("1.8.0").name == "Import total"
    assert data.get("16.7.0").unit == "W"
    assert abs(data.timestamp - sim.clock.utc) <= 1
    assert data.datetime_str.startswith("2026-10-26T")
    sim.settings.values["language.active"] = "de"
    assert client_call(port, lambda c: c.meter_data()).get("1.8.0").name == "Bezug gesamt"
    sim.settings.values["language.active"] = "en"
    sim.bus.publish("reading", None)
    assert client_call(port, lambda c: c.meter_data()) is None
    assert requests.get(served[1] + "/api/v1/history/latest", timeout=5).status_code == 204


def test_latest_does_not_serve_a_reading_left_on_the_bus_for_days(served):
    """A dead pipeline leaves its last reading: 2**28 ms later its stamp looks like the future, not like now."""
    sim, url, _port = served
    sim.bus.publish("reading", reading(123456789, 42, 777, ts_ms=(ticks_ms() - (1 << 28) - 1000) % (1 << 29)))
    try:
        assert requests.get(url + "/api/v1/history/latest", timeout=5).status_code == 204
    finally:
        sim.bus.publish("reading", None)


def test_large_answers_are_chunked_not_sized(served):
    _sim, url, _port = served
    r = requests.get(url + "/api/v1/history/lowRes", params={"start": "2026-01-01", "days": "366"}, timeout=10)
    assert r.status_code == 200 and r.headers.get("Transfer-Encoding") == "chunked"
    assert "Content-Length" not in r.headers
    assert len(r.json()["items"]) == 3
    r = requests.get(url + "/api/v1/history/highRes", params={"date": "2026-10-24"}, timeout=10)
    assert r.headers.get("Transfer-Encoding") == "chunked" and len(r.json()["items"]) == 96


def test_a_range_without_records_is_200_with_no_items(served):
    _sim, url, port = served
    r = requests.get(url + "/api/v1/history/highRes?date=2025-01-01", timeout=5)
    assert r.status_code == 200 and r.json()["items"] == [] and r.json()["import_total_kWh"] == 0
    assert client_call(port, lambda c: c.history_low_res("2030-01-01", 31)).items == []


BAD_HIGH = ["", "date=", "date=2026-1-05", "date=2026/10/24", "date=20261024", "date=2026-10-24T00:00",
            "date=2026-02-29", "date=2024-02-30", "date=2026-13-01", "date=2026-00-10", "date=2026-04-31",
            "date=2026-10-00", "date=1969-12-31", "date=2106-01-01", "date=abcd-ef-gh", "date=+026-10-24",
            "date=2026-10-2%20", "day=2026-10-24"]
BAD_LOW = ["", "start=2026-10-24", "days=3", "start=2026-10-24&days=", "start=2026-10-24&days=0",
           "start=2026-10-24&days=367", "start=2026-10-24&days=-1", "start=2026-10-24&days=1.5",
           "start=2026-10-24&days=abc", "start=2026-10-24&days=%203", "start=2026-10-24&days=1e2",
           "start=2026-10-24&days=99999999999999999999", "start=2026-02-30&days=3", "start=24.10.2026&days=3"]


@pytest.mark.parametrize("query", BAD_HIGH)
def test_bad_high_res_queries_are_400_with_an_error(served, query):
    r = requests.get(served[1] + "/api/v1/history/highRes?" + query, timeout=5)
    assert r.status_code == 400 and isinstance(r.json()["error"], str) and r.json()["error"]


@pytest.mark.parametrize("query", BAD_LOW)
def test_bad_low_res_queries_are_400_with_an_error(served, query):
    r = requests.get(served[1] + "/api/v1/history/lowRes?" + query, timeout=5)
    assert r.status_code == 400 and r.json()["error"]


def test_the_client_sees_400_as_bad_request(served):
    with pytest.raises(WattwaechterBadRequestError):
        client_call(served[2], lambda c: c.history_high_res("2026-02-29"))
    with pytest.raises(WattwaechterBadRequestError):
        client_call(served[2], lambda c: c.history_low_res("2026-10-24", 0))


def test_days_bounds_are_inclusive(served):
    for n in ("1", "366", "0366"):
        r = requests.get(served[1] + "/api/v1/history/lowRes?start=2026-10-24&days=" + n, timeout=5)
        assert r.status_code == 200


@hsettings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(alphabet="0123456789-+ ./:TZabc", max_size=12))
def test_any_date_text_is_answered_200_or_400_never_an_error(served, text):
    r = requests.get(served[1] + "/api/v1/history/highRes", params={"date": text}, timeout=5)
    valid = True
    try:
        import datetime

        d = datetime.date.fromisoformat(text)
        valid = len(text) == 10 and 1970 <= d.year <= 2105
    except ValueError:
        valid = False
    assert r.status_code == (200 if valid else 400), (text, r.status_code, r.text)
    json.loads(r.text)
