"""The history people want (issue 20 point 5), in headless Chromium against the host runtime: the dashboard's live
chart of the last minutes of power from the readings it polled anyway (gaps, never a repeated value), zoom that
says how to use it and can be reset, and month and year totals summed from one lowRes answer."""

import json
import re

from tests.test_web_ui import WEB_MARKS, _page, _today, browser, fast, fetch_through, live, shots  # noqa: F401  (fixtures)

pytestmark = WEB_MARKS


def _last(page):
    return json.loads(page.locator("[data-test=live]").get_attribute("data-last"))


def _wait_on(page, predicate, timeout_s=30):
    """Wait for a Python-side condition while the page's own events keep being handled."""
    for _ in range(int(timeout_s * 10)):
        if predicate():
            return
        page.wait_for_timeout(100)
    raise AssertionError("condition not met in %d s" % timeout_s)


def test_the_live_chart_draws_the_polled_readings_and_a_gap_when_none_came(browser, live):  # noqa: F811
    page = _page(browser)
    answers = []

    def note(route):
        resp = fetch_through(route)
        if resp.status == 200:
            answers.append(resp.json()["16.7.0"]["value"])
        route.fulfill(response=resp)

    requests = []
    page.on("request", lambda r: requests.append(r.url) if "/api/v1/" in r.url else None)
    page.route("**/api/v1/history/latest", note)
    page.goto(live.url + "/")
    page.locator("[data-test=live] canvas").wait_for(timeout=20000)     # two readings: a line to draw
    _wait_on(page, lambda: len(answers) >= 4)
    page.wait_for_timeout(300)
    shown = _last(page)[-2:]
    assert shown == answers[-2:], (shown, answers)                     # after the device's recent power: the polls
    # One request of its own when it opens (the device's recent power, issue 28), no poll of its own.
    assert [u for u in requests if "/history/" in u and "latest" not in u and "highRes" not in u] == [
        live.url + "/api/v1/history/recent"]

    # The meter goes silent (204): the chart breaks instead of repeating the last value.
    page.unroute("**/api/v1/history/latest")
    page.route("**/api/v1/history/latest", lambda route: route.fulfill(status=204))
    page.wait_for_function("JSON.parse(document.querySelector('[data-test=live]').dataset.last).slice(-1)[0] === null",
                           timeout=15000)
    assert page.errors == []
    page.context.close()


def test_zoom_says_how_and_can_be_reset(browser, fast):  # noqa: F811
    fast.wait_for(lambda: fast.get("/api/v1/history/highRes?date=" + _today(fast))[1]["count"] >= 6, timeout=120)
    page = _page(browser)
    page.goto(fast.url + "/#/history")
    chart = page.locator("figure.chart").first
    chart.wait_for(timeout=60000)
    hint = page.locator("p.zoom").first
    assert "ziehen" in hint.inner_text()
    box = chart.locator(".u-over").bounding_box()
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] * 0.3, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.5, y, steps=8)
    page.mouse.up()
    reset = page.locator("[data-test=zoom-reset]").first
    reset.wait_for()
    reset.click()
    page.locator("p.zoom").first.get_by_text("ziehen").wait_for()
    assert page.locator("[data-test=zoom-reset]").count() == 0
    page.context.close()


def _year(items):
    return {"start": items[0]["date"], "days": len(items), "items": items, "count": len(items),
            "import_total_kWh": round(sum(i["import_kWh"] for i in items), 3),
            "export_total_kWh": round(sum(i["export_kWh"] for i in items), 3)}


def test_month_and_year_totals_sum_the_days_of_one_request(browser, fast, shots):  # noqa: F811
    page = _page(browser)
    asked = []

    def year(route):
        url = route.request.url
        asked.append(url)
        y = re.search(r"start=(\d{4})-01-01", url).group(1)
        days = [("%s-01-30" % y, 1.25, 0.5), ("%s-01-31" % y, 2.5, 0.25), ("%s-02-01" % y, 4.0, 3.0),
                ("%d-01-01" % (int(y) + 1), 100.0, 100.0)]        # a day of the next year: not this year's
        items = [{"date": d, "timestamp": 0, "import_kWh": i, "export_kWh": e, "import_total_kWh": 0,
                  "export_total_kWh": 0} for d, i, e in days]
        route.fulfill(status=200, content_type="application/json", body=json.dumps(_year(items)))

    page.route(re.compile(r".*/api/v1/history/lowRes\?start=\d{4}-01-01.*"), year)
    page.goto(fast.url + "/#/history")
    page.locator("[data-test=range-summary]").wait_for(timeout=60000)
    assert asked == []                                       # asked for only when opened
    page.locator("[data-test=totals-box] summary").click()
    table = page.locator("[data-test=totals]")
    table.wait_for()
    assert len(asked) == 1
    jan = table.locator("[data-test$='-01']").inner_text()
    feb = table.locator("[data-test$='-02']").inner_text()
    total = table.locator("[data-test=year]").inner_text()
    assert "Januar" in jan and "3,8" in jan and "0,8" in jan and "3,0" in jan       # 3.75 in, 0.75 out, +3.0
    assert "Februar" in feb and "4,0" in feb and "3,0" in feb and "1,0" in feb
    assert "7,8" in total and "3,8" in total and "4,0" in total                     # 7.75, 3.75, 4.0
    this_year = int(re.search(r"start=(\d{4})", asked[0]).group(1))
    page.locator('select[name="year"]').select_option(str(this_year - 1))
    page.wait_for_function("document.querySelector('[data-test=year]') && "
                           "document.querySelector('[data-test=year]').textContent.includes('%d')" % (this_year - 1))
    assert "start=%d-01-01&days=366" % (this_year - 1) in asked[-1]
    page.screenshot(path=shots + "/history-totals.png", full_page=True)
    assert page.errors == []
    page.context.close()
