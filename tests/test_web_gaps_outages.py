"""The web interface (headless Chromium) for gaps and outages: a day with a gap draws no tall bar but the gap's
energy spread over it and lists the gap; the System page's outage table in German and English, with unknown times
and an empty journal; installing an update asks first, and a dismissed question sends nothing."""

import json
import os

import pytest

from tests.test_web_ui import CHROMIUM, _page, browser, fast, shots  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="chromium missing (make test installs it)")]

DAY = "2026-06-21"
T0 = 1_782_000_000 - 2 * 3600          # 2026-06-21 00:00 Berlin summer time (UTC+2)


def _day_with_gap():
    """A day of 40 quarter hours from 00:00, then the device off 10:00-11:59; the 12:00 record closes the gap."""
    items = []
    for q in list(range(40)) + [48, 49, 50]:
        t = T0 + 900 * q
        it = {"date": "%sT%02d:%02d" % (DAY, q // 4, q % 4 * 15), "timestamp": t, "import_total_kWh": 100 + q,
              "export_total_kWh": 5.0, "import_kW": 0.25, "export_kW": 0.0, "power_W": 1000}
        if q == 48:
            it["import_kW"] = 2.25                  # 9 quarter hours of energy: 8 missing + its own
            it["gap_s"] = 8 * 900
        items.append(it)
    return {"start": DAY, "days": 1, "items": items, "count": len(items), "import_total_kWh": 12.75,
            "export_total_kWh": 0.0}


def test_a_gap_is_drawn_as_a_gap_not_a_tall_bar(browser, fast, shots):  # noqa: F811
    answer = _day_with_gap()
    page = _page(browser)
    page.route("**/api/v1/history/highRes*", lambda route: route.fulfill(
        status=200, content_type="application/json", body=json.dumps(answer)))
    page.goto(fast.url + "/#/history")
    page.fill("input[name=date]", DAY)
    page.locator("form").first.get_by_role("button", name="Anzeigen").click()
    box = page.locator("[data-test=gaps]")
    box.wait_for()
    assert json.loads(box.get_attribute("data-gaps")) == [[T0 + 900 * 48, 7200]]
    imp = json.loads(box.get_attribute("data-import"))
    spread = json.loads(box.get_attribute("data-spread"))
    assert len(imp) == 40 + 8 + 3                      # the 8 missing quarter hours have slots of their own
    assert max(v for v in imp if v is not None) == 250   # no 2,250 Wh bar
    assert imp[40:49] == [None] * 9 and spread[40:49] == [250] * 9
    text = box.inner_text()
    assert "1 Lücke" in text and "10:00–12:00" in text and "2 Std. 0 Min. ohne Daten" in text
    page.screenshot(path=os.path.join(shots, "history-gap-1280.png"), full_page=True)
    page.set_viewport_size({"width": 390, "height": 844})
    page.screenshot(path=os.path.join(shots, "history-gap-390.png"), full_page=True)
    assert page.errors == []
    page.context.close()


OUTAGES = {"outages": [
    {"down": 1795530720, "up": 1795536000, "duration_s": 5280, "reason": "power", "detail": "POWER_ON"},
    {"down": 0, "up": 1795400000, "duration_s": None, "reason": "watchdog", "detail": "WATCHDOG"},
    {"down": 1795300000, "up": 0, "duration_s": None, "reason": "rollback", "detail": "WATCHDOG"},
    {"down": 1795200000, "up": 1795200040, "duration_s": 40, "reason": "restart", "detail": "api"},
], "capacity": 64}


@pytest.mark.parametrize("lang,expect", [
    ("de", ["Stromausfall", "1 Std. 28 Min.", "unbekannt", "Update zurückgenommen", "Neustart (Weboberfläche/API)",
            "40 s"]),
    ("en", ["Power cut", "1 h 28 min", "unknown", "Update rolled back", "Restart (web interface/API)", "40 s"])])
def test_the_outage_table_in_both_languages(browser, fast, shots, lang, expect):  # noqa: F811
    page = _page(browser)
    page.add_init_script("localStorage.setItem('mp.lang', %r)" % lang)   # the footer's switch, kept in the browser
    page.route("**/api/v1/system/outages", lambda route: route.fulfill(
        status=200, content_type="application/json", body=json.dumps(OUTAGES)))
    page.goto(fast.url + "/#/system")
    table = page.locator("[data-test=outages] table")
    page.wait_for_function("document.documentElement.lang === %r" % lang)   # the page re-renders in it
    table.locator("tbody tr").nth(3).wait_for()
    assert table.locator("tbody tr").count() == 4 and table.locator("th").count() == 4
    text = table.inner_text()
    for word in expect:
        assert word in text, word
    page.screenshot(path=os.path.join(shots, "system-outages-%s.png" % lang), full_page=True)
    assert page.errors == []
    page.context.close()


def test_an_empty_journal_says_so_and_the_real_one_lists_this_start(browser, fast):  # noqa: F811
    page = _page(browser)
    page.route("**/api/v1/system/outages", lambda route: route.fulfill(
        status=200, content_type="application/json", body='{"outages":[],"capacity":64}'))
    page.goto(fast.url + "/#/system")
    page.get_by_text("Noch keine Einträge.").wait_for()
    page.unroute("**/api/v1/system/outages")
    page.reload()
    row = page.locator("[data-test=outages] tbody tr").first
    row.wait_for()
    assert "Erster Start (kein Ausfall)" in row.inner_text()   # a fresh drive's first start is no power cut (issue 28)
    page.context.close()


def test_installing_an_update_asks_first_and_no_sends_nothing(browser, fast):  # noqa: F811
    page = _page(browser)
    sent = []
    page.on("request", lambda r: sent.append(r.url) if "/ota/start" in r.url else None)
    page.goto(fast.url + "/#/system")
    page.locator("[data-test=outages]").wait_for()
    asked = []
    page.once("dialog", lambda d: (asked.append(d.message), d.dismiss()))
    page.get_by_role("button", name="Update starten").click()
    page.wait_for_timeout(300)
    assert asked == ["Update jetzt installieren? Das Gerät startet dabei neu."] and sent == []
    page.context.close()
