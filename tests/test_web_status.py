"""The status strip (issue 20 point 3), in Chromium: meter, WiFi, MQTT, Modbus, clock and a found update at a
glance on every page, in words, from the one /system/info the shell polls every 20 s."""

import pytest

from tests.test_api_harness import host_fixture
from tests.test_web_ui import WEB_MARKS, _page, _today, browser, rounded_as_shown  # noqa: F401  (browser: the module's Chromium fixture)

pytestmark = WEB_MARKS
device = host_fixture("web-status", reading=True)   # the first test expects the meter chip live


def _chip(page, name):
    chip = page.locator("[data-test=st-%s]" % name)
    chip.wait_for()
    return chip.inner_text(), chip.get_attribute("class")


@pytest.mark.parametrize("route", ["dashboard", "history", "settings", "security", "system"])
def test_the_strip_is_on_every_page(browser, device, route):  # noqa: F811
    page = _page(browser)
    page.goto(device.url + "/#/" + route)
    page.locator("[data-test=status-strip]").wait_for()
    text, cls = _chip(page, "meter")
    assert text.startswith("Zähler") and "live" in text and "ok" in cls
    page.context.close()


def test_the_strip_says_what_changed_in_words(browser, device):  # noqa: F811
    page = _page(browser)
    page.goto(device.url + "/")
    text, cls = _chip(page, "wifi")
    assert text.startswith("Zugangspunkt") and "192.168.4.1" in text and "warn" in cls   # no WiFi set up yet
    assert _chip(page, "mqtt")[0] == "MQTT aus" and _chip(page, "modbus")[0] == "Modbus aus"
    assert _chip(page, "clock")[0] == "Uhr gestellt"
    assert page.locator("[data-test=st-update]").count() == 0

    assert device.post("/api/v1/settings", {"wifi": {"primary": {"ssid": "HostNetwork", "password": "host-password"}},
                                            "modbus": {"enable": True}})[0] == 200
    device.control("meter", "off")
    try:
        def settled():
            page.reload()
            page.locator("[data-test=status-strip]").wait_for()
            wifi, modbus, meter = _chip(page, "wifi")[0], _chip(page, "modbus")[0], _chip(page, "meter")
            return "HostNetwork" in wifi and "an (" in modbus and "keine Daten seit" in meter[0] and meter

        meter = device.wait_for(settled, timeout=60, interval=1)
        assert "warn" in meter[1]
        wifi = _chip(page, "wifi")[0]
        assert wifi.startswith("WLAN") and "dBm" in wifi and "127.0.0.1" in wifi
    finally:
        device.control("meter", None)
    page.context.close()


def test_one_info_request_per_20_s_serves_the_strip_and_the_dashboard(browser, device):  # noqa: F811
    page = _page(browser)
    asked = []
    # Answers, not attempts: a GET the device sheds at the network while both slots answer (under load, as a
    # page opening fires several at once) is asked again by the page and must not count as a second poll.
    page.on("response", lambda r: asked.append(r.url) if "/system/info" in r.url and r.status == 200 else None)
    page.goto(device.url + "/")
    page.locator("[data-test=st-meter]").wait_for()
    page.wait_for_timeout(21000)
    assert len(asked) == 2                                          # at the start and 20 s later, not twice each
    row = page.locator("main tr", has_text="Telegramme")           # the dashboard's meter health, same answer
    assert row.locator("td").nth(1).inner_text().isdigit()
    page.context.close()


fast = host_fixture("web-today", args=("--speed", "900"))   # a quarter hour of history per second


def _num_de(text):
    return float(text.split()[-2].replace(".", "").replace(",", ".").replace("−", "-"))


def test_the_dashboard_shows_todays_import_export_and_balance(browser, fast):  # noqa: F811 (issue 20 point 5)
    # A closed quarter hour today, and not the day's last ones (a device day lasts 96 s at --speed 900): the host
    # starts its simulated day a moment before the first reading, so "today" may still be empty at first.
    fast.wait_for(lambda: 1 <= fast.get("/api/v1/history/highRes?date=" + _today(fast))[1]["count"] <= 88,
                  timeout=120)
    page = _page(browser)
    with page.expect_response(lambda r: "/history/highRes?date=" in r.url) as resp:
        page.goto(fast.url + "/")
    day = resp.value.json()
    assert day["count"] >= 1
    card = page.locator("[data-test=today]")
    card.wait_for()
    imp, exp = day["import_total_kWh"], day["export_total_kWh"]
    assert _num_de(card.locator("[data-test=today-import]").inner_text()) == rounded_as_shown(imp, 3)
    assert _num_de(card.locator("[data-test=today-export]").inner_text()) == rounded_as_shown(exp, 3)
    balance = card.locator("[data-test=balance]").inner_text()
    assert _num_de(balance) == rounded_as_shown(imp - exp, 3)    # signed: − when more was exported
    said = {"mehr bezogen": imp > exp, "mehr eingespeist": imp < exp, "gleich": imp == exp}
    assert {words: words in card.inner_text() for words in said} == said
    page.context.close()
