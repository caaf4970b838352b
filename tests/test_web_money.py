"""The money view (issue 29 point 4) in headless Chromium under the page's own Content-Security-Policy, against the
whole firmware with a dynamic tariff from the local price stand-in: web/money.js is fetched only when the view
opens, the totals, the day's hourly cost bars, the price curve with the cheapest windows and the peaks show what
the API booked; the dashboard shows the price now and today's cost."""

import json
import os
import re

import pytest

from host.ntp_server import scaled_clock, start_ntp_server
from tests.hostproc import meter_time_args
from tests.price_server import PriceServer
from tests.test_api_harness import start_host
from tests.test_tariff_host import EPOCH0
from tests.test_web_ui import WEB_MARKS, _page, browser, rounded_as_shown  # noqa: F401  (fixtures)

pytestmark = WEB_MARKS
SHOTS = os.environ.get("MONEY_SHOT")   # a path: a screenshot of the view for a person to look at


@pytest.fixture(scope="module")
def priced(tmp_path_factory):
    srv = PriceServer()
    sim = scaled_clock(300.0, EPOCH0)
    h, p, stop_ntp = start_ntp_server(clock=sim)
    settings = {"history": {"flushMinutes": 1},
                "tariff": {"mode": "dynamic", "surcharge": "0.1532", "vatPercent": "19", "exportPrice": "0.0786",
                           "priceUrl": srv.energy_charts_url}}
    host = start_host(tmp_path_factory, "web-money", settings=settings,
                      args=["--speed", "300", "--ntp", "%s:%d" % (h, p)] + meter_time_args(EPOCH0))
    try:
        host.wait_for(lambda: (lambda r: r[0] == 200 and r[1]["fetch"]["state"] == "ok")(
            host.get("/api/v1/tariff")), timeout=60)
        host.wait_for(lambda: (lambda r: r[0] == 200 and r[1]["today"]["import_cost"] is not None)(
            host.get("/api/v1/cost")), timeout=90)
        yield host
    finally:
        host.stop()
        stop_ntp()
        srv.close()


def _de(value, digits):
    """A number as the German page writes it (below 1,000: no grouping)."""
    return ("%.*f" % (digits, rounded_as_shown(value, digits))).replace(".", ",")


def test_the_money_view_loads_its_own_file_and_shows_what_was_booked(browser, priced):  # noqa: F811
    page = _page(browser, csp=True)
    asked = []
    page.on("request", lambda r: asked.append(r.url))
    console = []
    page.on("console", lambda m: console.append(m.text))
    page.goto(priced.url + "/")
    row = page.locator("[data-test=money-row]")
    row.wait_for(timeout=20000)
    # German numbers on the German page (decimal comma): the price to 1/100 ct and today's cost to the cent
    assert re.search(r"Preis jetzt -?\d+,\d{4} EUR/kWh · Kosten heute (–|-?\d+,\d\d EUR)", row.inner_text()), \
        row.inner_text()
    assert not [u for u in asked if u.endswith("/money.js")]            # not loaded for the dashboard
    with page.expect_response(lambda r: r.url == priced.url + "/api/v1/cost", timeout=20000) as got:
        page.get_by_role("link", name="Kosten").first.click()
    seen = got.value.json()
    page.wait_for_selector("[data-test=money][data-ready='1']", timeout=20000)
    # every hour's bar says the cost the answer gave for that hour (the sum of its booked quarter hours)
    titles = page.locator("[data-test=m-bar] title").all_text_contents()
    assert len(titles) == len(seen["items"]) >= 1
    for text, item in zip(titles, seen["items"]):
        want = "ohne Preis" if item["import_cost"] is None else _de(item["import_cost"], 2) + " EUR"
        assert text == "%s: %s, %s kWh" % (item["start"][11:], want, _de(item["import_kwh"], 3)), (text, item)
    assert [u for u in asked if u.endswith("/money.js")] == [priced.url + "/money.js"]
    assert not [c for c in console if "Content Security Policy" in c], console
    # the page's totals are the API's (read right after the page's own requests)
    cost = priced.get("/api/v1/cost")[1]
    tariff = priced.get("/api/v1/tariff")[1]
    today = page.locator("[data-test=m-today] [data-test=m-cost]").inner_text()
    assert today.endswith(" EUR")
    assert re.fullmatch(r"-?\d+,\d\d EUR", today), today
    # a quarter hour may close between
    assert abs(float(today.split()[0].replace(",", ".")) - cost["today"]["import_cost"]) < 0.05
    bars = page.locator("[data-test=m-bar]")
    assert bars.count() >= 1
    assert page.locator("[data-test=m-curve] path").count() == 1
    assert page.locator("[data-test=m-window]").count() == sum(1 for k in ("today", "tomorrow")
                                                               if tariff["cheapest"][k] is not None) >= 1
    assert page.locator("[data-test=m-peak]").count() >= 1
    assert "W" in page.locator("[data-test=m-peak]").first.inner_text()
    # another window length asks again
    with page.expect_request("**/api/v1/tariff?from=today&hours=3", timeout=10000):
        page.locator("[data-test=m-hours]").select_option("3")
    if SHOTS:
        page.screenshot(path=SHOTS, full_page=True)
    # the tariff form: a bad price is refused by name and nothing changes; a good one is stored exactly
    page.locator("[data-test=t-mode]").select_option("fixed")
    page.locator("[data-test=t-importPrice]").fill("0.12345678")
    page.locator("form[data-test=t-form] button[type=submit]").click()
    page.locator("[data-test=t-msg].ferr").get_by_text("tariff.importPrice").wait_for(timeout=10000)
    assert priced.get("/api/v1/settings")[1]["tariff"]["mode"] == "dynamic"
    page.locator("[data-test=t-importPrice]").fill("0.3012")
    page.locator("form[data-test=t-form] button[type=submit]").click()
    page.locator("[data-test=m-price]").get_by_text("0,3012 EUR/kWh").wait_for(timeout=10000)
    doc = priced.get("/api/v1/settings")[1]["tariff"]
    assert doc["mode"] == "fixed" and doc["importPrice"] == 0.3012 and doc["surcharge"] == 0.1532
    assert page.errors == []
    json.dumps(cost)
    page.context.close()
