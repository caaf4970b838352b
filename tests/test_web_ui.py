"""The web interface in headless Chromium (Debian's /usr/bin/chromium driven by Playwright) against the host runtime:
dashboard = /history/latest, stale = unknown, history charts and CSV (DST days too), every settings form, the
spec's confirmations, token rotation and authentication, 429 back-off, two tabs, phone width, keyboard, language.

Screenshots go to $WEBUI_SHOTS (or a temporary folder): look at them after a change of the interface."""

import csv
import http.client
import io
import json
import os
import re
import time
import urllib.request
from datetime import datetime, timedelta, timezone
from decimal import ROUND_HALF_UP, Decimal
from zoneinfo import ZoneInfo

import pytest

from tests.test_api_harness import start_host

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]

# Every browser test module: slow (starts the host runtime), and skipped where no Chromium is installed.
WEB_MARKS = [pytest.mark.slow,
             pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="chromium missing (make test installs it)")]
pytestmark = WEB_MARKS
sync_api = pytest.importorskip("playwright.sync_api")


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory):
    d = os.environ.get("WEBUI_SHOTS") or str(tmp_path_factory.mktemp("shots"))
    os.makedirs(d, exist_ok=True)
    return d


@pytest.fixture(scope="module")
def fast(tmp_path_factory):
    """A device whose clock runs 900 times faster: a quarter hour of history per second."""
    h = start_host(tmp_path_factory, "web-fast", args=("--speed", "900"))
    yield h
    h.stop()


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    """A device in real time, for the live dashboard: at --speed 900 the meter's 10 s staleness is ~11 ms of real
    time, so a loaded machine would show "unknown" where these tests expect a live value."""
    h = start_host(tmp_path_factory, "web-live")
    h.wait_reading()        # the page's first poll gets a reading, not the 204 of a meter not heard yet
    yield h
    h.stop()


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    h = start_host(tmp_path_factory, "web-settings")
    yield h
    h.stop()


def _page(browser, width=1200, height=900, csp=False):
    """A fresh page. Playwright's wait_for_function(string) evaluates a string, which the page's own
    Content-Security-Policy forbids (no 'unsafe-eval'): these interface tests bypass it; the policy itself is
    tested with csp=True (tests/test_web_security_headers.py)."""
    ctx = browser.new_context(viewport={"width": width, "height": height}, accept_downloads=True, locale="de-DE",
                              bypass_csp=not csp)
    page = ctx.new_page()
    page.errors = []
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    return page


def fetch_through(route, tries=3):
    """route.fetch() as the page's own GET would: the device sheds a newcomer while both of its connection slots
    are answering (a page opening fires several requests at once), and a dropped GET is asked again (api.js)."""
    for attempt in range(tries):
        try:
            return route.fetch()
        except sync_api.Error:
            if attempt == tries - 1:
                raise
            time.sleep(0.3 * (attempt + 1))


def _no_external(page, host):
    """Every request the page made went to the device."""
    seen = []
    page.on("request", lambda r: seen.append(r.url))
    return lambda: [u for u in seen if not u.startswith(host.url + "/") and not u.startswith("blob:")]


def _num_de(text):
    """A number as the German page writes it (12.345,679) -> float."""
    return float(re.search(r"-?[\d.]+(,\d+)?", text).group(0).replace(".", "").replace(",", "."))


def rounded_as_shown(value, digits):
    """A number rounded the way the page's toLocaleString shows it: its shortest decimal, halves away from zero."""
    # Python's round() works on the binary value (0.0895 is 0.08949999..., so round gives 0.089); Chromium's number
    # format rounds the shortest decimal that reads back as the same double (0.0895 -> 0,090).
    return float(Decimal(repr(value)).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP))


def test_the_tests_round_numbers_as_chromium_shows_them(browser):
    # Halves whose double lies just below them (0.0895, 1.0005) and a difference of two doubles: the page's
    # num() rounds these up; Python's round() would give 0.089 and fail a test at random (seen in CI).
    values = [0.0895, 1.0005, 2.675, 0.1 - 0.0895, 1234.5675, 0.0005, -0.0895, 12.3]
    page = browser.new_page()
    shown = page.evaluate("""(vs) => vs.map((v) => v.toLocaleString('en-US',
        { minimumFractionDigits: 3, maximumFractionDigits: 3, useGrouping: false }))""", values)
    page.close()
    assert [float(s) for s in shown] == [rounded_as_shown(v, 3) for v in values]
    assert rounded_as_shown(0.0895, 3) != round(0.0895, 3)       # the case the helper is for


# --- dashboard ---

def test_dashboard_shows_the_values_of_history_latest(browser, live, shots):
    page = _page(browser)
    external = _no_external(page, live)
    answers = []

    def freeze(route):
        """Pass the device's first reading through, then answer every later poll with that same reading.

        The page polls every 4 s; were later polls passed through, one could land between the reading kept here
        and the checks below and show a newer value (a 1 Wh step of 2.8.0 did, once, in CI)."""
        if answers:
            route.fulfill(**answers[0][1])
            return
        resp = fetch_through(route)
        if resp.status == 200:  # a device just started can answer 204 (no fresh reading) first
            answers.append((resp.json(), dict(status=200, headers=resp.headers, body=resp.body())))
        route.fulfill(response=resp)

    page.route("**/api/v1/history/latest", freeze)
    page.goto(live.url + "/")
    page.wait_for_function("document.querySelector('[data-test=power] .big').textContent.includes('W')")
    latest = answers[0][0]
    power = latest["16.7.0"]["value"]
    shown = _num_de(page.locator("[data-test=power] .small").inner_text())
    assert shown == power
    assert _num_de(page.locator("[data-test=power] .big").inner_text()) == abs(power)
    direction = page.locator("[data-test=power] .dir").inner_text()
    assert ("Einspeisung" in direction) == (power < 0) and ("Bezug" in direction) == (power > 0)
    imp = _num_de(page.locator("[data-test=import] .big").inner_text())
    exp = _num_de(page.locator("[data-test=export] .big").inner_text())
    assert imp == rounded_as_shown(latest["1.8.0"]["value"], 3)
    assert exp == rounded_as_shown(latest["2.8.0"]["value"], 3)
    for key in ("32.7.0", "14.7.0"):
        assert page.get_by_text(latest[key]["name"], exact=True).count() == 1
    # the protocol from /system/info (refreshed every 20 s: a device just started may not have named it yet)
    page.get_by_text("sml", exact=True).wait_for(timeout=25000)
    assert page.get_by_text("sml", exact=True).count() == 1
    page.screenshot(path=os.path.join(shots, "dashboard-desktop.png"), full_page=True)
    assert external() == []
    assert page.errors == []
    page.context.close()


def test_a_page_shown_again_while_a_poll_waits_starts_no_second_chain(browser, live):
    """The page turning visible while its /system/info request is still out (a slow device, a tab brought to the
    front) must not start a second chain of polls beside the first: two requests per 20 s, forever."""
    page = _page(browser)
    # Every /system/info answer arrives 1.5 s late; the requests the page starts are counted.
    page.add_init_script("""
        window.infoAsked = 0;
        const realFetch = window.fetch;
        window.fetch = (url, opts) => {
          if (String(url).includes('/system/info')) {
            window.infoAsked += 1;
            return new Promise((ok) => setTimeout(ok, 1500)).then(() => realFetch(url, opts));
          }
          return realFetch(url, opts);
        };""")
    page.goto(live.url + "/")
    page.wait_for_function("window.infoAsked === 1")
    for _ in range(3):    # shown again, three times, while the first answer is on its way
        page.evaluate("document.dispatchEvent(new Event('visibilitychange'))")
        page.wait_for_timeout(200)
    page.wait_for_timeout(3000)   # the answer is in; the next poll is due 20 s later
    assert page.evaluate("window.infoAsked") == 1
    assert page.errors == []
    page.context.close()


def test_dashboard_polls_within_the_rate_budget(browser, live):
    page = _page(browser)
    page.goto(live.url + "/")
    page.wait_for_timeout(25000)
    # When the page started each request, from its own clock (Python sees events late on a loaded machine), and
    # what came back: 0 when the device shed the connection (both slots answering as the page opens and fires its
    # first requests at once), which api() asks again 300 ms later: the same poll, not a second one.
    tried = page.evaluate("performance.getEntriesByType('resource').filter((e) => e.name.includes('/api/v1/'))"
                          ".map((e) => [e.startTime / 1000, e.name, e.responseStatus])")
    started = [(t, u) for t, u, status in tried if status]
    for t, u, status in tried:
        if not status:   # a shed attempt is asked again within a second
            assert any(u2 == u and t < t2 <= t + 1.5 for t2, u2 in started), tried
    latest = [t for t, u in started if "/history/latest" in u]
    info = [t for t, u in started if "/system/info" in u]
    # The next poll is due 4 s (info 20 s) after the last answer, so gaps are at least that and not much more.
    assert all(4.0 <= b - a <= 6.0 for a, b in zip(latest, latest[1:])), latest
    assert all(20.0 <= b - a <= 22.0 for a, b in zip(info, info[1:])), info
    assert len(latest) >= 5 and len(info) >= 2, started
    # Any 10 s: at most 3 latest, 1 info, and what the start asked once (settings, today, the recent power for the
    # 15-minute chart): two tabs stay well inside the device's 25.
    busiest = max(sum(t <= u < t + 10 for u, _ in started) for t, _ in started)
    assert busiest <= 7, started
    assert sum("/history/recent" in u for _, u in started) == 1, started
    page.context.close()


# --- history ---

def _today(host):
    """The device's local date from a reading. At --speed 900 the meter's 10 s staleness window is ~11 ms of real
    time, so on a loaded machine latest may briefly answer 204 (no fresh reading): ask again until it has one."""
    return host.wait_for(lambda: (lambda r: r[0] == 200 and r[1]["datetime"][:10])(host.get("/api/v1/history/latest")),
                         timeout=30)


def test_history_day_and_range_render_as_charts_and_download_as_csv(browser, fast, shots):
    # 6 to 80 of the day's 96 quarter hours: charts to draw, and 16 s of real time before the device's midnight
    fast.wait_for(lambda: 6 <= fast.get("/api/v1/history/highRes?date=" + _today(fast))[1]["count"] <= 80,
                  timeout=120)
    page = _page(browser)
    with page.expect_response(lambda r: "/history/highRes" in r.url) as resp:
        page.goto(fast.url + "/#/history")
    day = resp.value.url.split("date=")[1]  # the page's own today: at --speed 900 a device day lasts 96 s
    items = resp.value.json()["items"]
    assert len(items) >= 6
    summary = page.locator("[data-test=day-summary]")
    summary.wait_for()
    assert summary.inner_text().startswith("%d Viertelstunden" % len(items))
    page.locator("[data-test=range-summary]").wait_for()
    assert page.locator(".chart canvas").count() == 3  # power, quarter-hour energy, daily energy (uPlot canvases)
    assert page.locator(".chart .u-legend").first.inner_text().find("Leistung") >= 0
    page.screenshot(path=os.path.join(shots, "history-desktop.png"), full_page=True)

    with page.expect_download() as dl:
        page.locator("form").first.get_by_role("button", name="CSV herunterladen").click()
    # The German interface writes CSV for German Excel: ';' and decimal commas.
    rows = list(csv.reader(io.StringIO(open(dl.value.path()).read()), delimiter=";"))
    assert rows[0] == ["date", "timestamp", "power_W", "import_kWh", "export_kWh", "import_total_kWh",
                       "export_total_kWh", "gap_s"]
    assert len(rows) == 1 + len(items)
    assert rows[1][0] == items[0]["date"] and int(rows[1][1]) == items[0]["timestamp"]
    assert float(rows[1][4].replace(",", ".")) == pytest.approx(items[0]["export_kW"])
    assert "." not in rows[1][5] and "," in rows[1][5]           # the total with a decimal comma
    page.locator("input[name=excel]").uncheck()                  # the choice: comma-separated, decimal points
    with page.expect_download() as dl:
        page.locator("form").first.get_by_role("button", name="CSV herunterladen").click()
    plain = list(csv.reader(io.StringIO(open(dl.value.path()).read())))
    assert plain[0][:3] == ["date", "timestamp", "power_W"] and "." in plain[1][5]
    assert float(plain[1][5]) == pytest.approx(items[0]["import_total_kWh"])
    page.locator("input[name=excel]").check()

    # Another day through the date picker: the page asks for that date.
    with page.expect_response(lambda r: "/history/highRes?date=2026-01-02" in r.url):
        page.fill("input[name=date]", "2026-01-02")
        page.locator("form").first.get_by_role("button", name="Anzeigen").click()
    page.get_by_text("Keine Daten für diesen Zeitraum").first.wait_for()
    with page.expect_download() as dl:
        page.locator("form").nth(1).get_by_role("button", name="CSV herunterladen").click()
    rows = list(csv.reader(io.StringIO(open(dl.value.path()).read()), delimiter=";"))
    assert rows[0][:4] == ["date", "timestamp", "import_kWh", "export_kWh"] and rows[-1][0] == day
    assert page.errors == []


def _dst_day(date):
    """A synthetic highRes answer for a local day of Europe/Berlin, one item per real quarter hour."""
    zone = ZoneInfo("Europe/Berlin")
    y, m, d = map(int, date.split("-"))
    start = datetime(y, m, d, tzinfo=zone).astimezone(timezone.utc)
    end = (datetime(y, m, d, tzinfo=zone) + timedelta(days=1)).astimezone(timezone.utc)
    items = []
    t = start
    while t < end:
        local = t.astimezone(zone)
        items.append({"date": local.strftime("%Y-%m-%dT%H:%M"), "timestamp": int(t.timestamp()),
                      "import_total_kWh": 100.0, "export_total_kWh": 0.0, "import_kW": 0.1, "export_kW": 0.0,
                      "power_W": 400})
        t += timedelta(minutes=15)
    return {"start": date, "days": 1, "items": items, "count": len(items), "import_total_kWh": 0.1 * len(items),
            "export_total_kWh": 0.0}


@pytest.mark.parametrize("date,count,note", [("2026-10-25", 100, "Sommerzeitende"),
                                             ("2026-03-29", 92, "Sommerzeitbeginn")])
def test_dst_days_show_their_92_or_100_quarter_hours(browser, fast, shots, date, count, note):
    answer = _dst_day(date)
    assert answer["count"] == count
    page = _page(browser)
    page.route("**/api/v1/history/highRes*", lambda route: route.fulfill(
        status=200, content_type="application/json", body=json.dumps(answer)))
    page.goto(fast.url + "/#/history")
    page.locator("[data-test=day-summary]").wait_for()
    page.fill("input[name=date]", date)
    page.locator("form").first.get_by_role("button", name="Anzeigen").click()
    page.wait_for_function("document.querySelector('[data-test=day-summary]').textContent.startsWith('%d ')" % count)
    assert note in page.locator("[data-test=day-summary]").inner_text()
    with page.expect_download() as dl:
        page.locator("form").first.get_by_role("button", name="CSV herunterladen").click()
    rows = list(csv.reader(io.StringIO(open(dl.value.path()).read()), delimiter=";"))[1:]
    assert len(rows) == count
    stamps = [int(r[1]) for r in rows]
    assert stamps == sorted(stamps) and len(set(stamps)) == count      # real time runs on through the switch
    locals_ = [r[0][11:] for r in rows]
    if count == 100:
        assert locals_.count("02:00") == 2 and locals_.count("02:45") == 2   # the repeated autumn hour
    else:
        assert "02:00" not in locals_ and "03:00" in locals_                 # the skipped spring hour
    page.screenshot(path=os.path.join(shots, "history-dst-%d.png" % count), full_page=True)
    assert page.errors == []


# --- settings ---

# section id -> (field key, valid input, expected stored value, a value the device rejects)
FORMS = {
    "general": ("device_name", "Keller", "Keller", "x" * 40),
    "meter": ("ctRatio", "2,5", 2.5, 0.05),
    "wifiPrimary": ("wifi.primary.dns", "192.168.1.1", "192.168.1.1", "300.1.1.1"),
    "wifiSecondary": ("wifi.secondary.gateway", "10.0.0.1", "10.0.0.1", "10.0.0"),
    "ap": ("accessPoint.ssid", "Meter-Keller", "Meter-Keller", "x" * 40),
    "mqtt": ("mqtt.sendInterval", "30", 30, 5000),
    "modbus": ("modbus.port", "1502", 1502, 70000),
    "cloud": ("cloudIotEnabled", True, True, "yes"),
}


# The device's reason (English) as the German page words it on the field (issue 28 point 4).
GERMAN = {"general": "höchstens 31 Zeichen", "meter": "1 bis 10000 in Schritten von 0,1",
          "wifiPrimary": "IPv4-Adresse wie 192.168.1.10", "wifiSecondary": "IPv4-Adresse wie 192.168.1.10",
          "ap": "höchstens 32 Bytes", "mqtt": "ganze Zahl 1 bis 3600", "modbus": "ganze Zahl 1 bis 65535",
          "cloud": "ja oder nein"}


STATIC = {"wifiPrimary": {"ip": "192.168.1.50", "subnet": "255.255.255.0", "gateway": "192.168.1.1"},
          "wifiSecondary": {"ip": "10.0.0.50", "subnet": "255.255.255.0", "gateway": "10.0.0.1"}}


def _get_setting(host, key):
    node = host.get("/api/v1/settings")[1]
    for part in key.split("."):
        node = node[part]
    return node


def _fill(form, key, value):
    field = form.locator('[name="%s"]' % key)
    if isinstance(value, bool):
        field.set_checked(value)
    else:
        field.fill(value)


def _settings_page(browser, host, width=1200, section="general"):
    """The settings page opened at one section (#/settings/<section>), its time zones loaded."""
    page = _page(browser, width)
    page.goto(host.url + "/#/settings/" + section)
    page.locator("#s-" + section).wait_for()
    page.wait_for_function("document.querySelectorAll('#f-timezone option').length > 100")  # zones loaded
    return page


def _tab(page, section):
    """Open another section of the settings page by its tab; its form, now shown."""
    page.locator("[data-test=tab-%s]" % section).click()
    form = page.locator("#s-" + section)
    form.wait_for()
    return form


@pytest.mark.parametrize("section", list(FORMS))
def test_each_settings_form_saves_and_shows_the_devices_field_error(browser, plain, section):
    key, good, stored, bad = FORMS[section]
    page = _settings_page(browser, plain, section=section)
    form = page.locator("#s-" + section)
    if section in STATIC:       # the address fields show (and are needed) only with static IP ticked
        prefix = key.rsplit(".", 1)[0] + "."
        form.locator('[name="%sstatic_ip"]' % prefix).check()
        for k, v in STATIC[section].items():
            if prefix + k != key:
                _fill(form, prefix + k, v)
    before = plain.get("/api/v1/settings")[1]

    # A value the device refuses (sent past the page's own check): its reason shows next to the field, in German.
    def corrupt(route):
        if route.request.method == "POST":
            body = json.loads(route.request.post_data)
            body[key] = bad
            route.continue_(post_data=json.dumps(body))
        else:
            route.continue_()

    page.route("**/api/v1/settings", corrupt)
    _fill(form, key, good)
    with page.expect_response(lambda r: r.request.method == "POST" and "/api/v1/settings" in r.url) as resp:
        form.get_by_role("button", name="Speichern", exact=True).click()
    assert resp.value.status == 400
    reason = resp.value.json()["fields"][key]
    err = form.locator("#f-%s-err" % key.replace(".", "-"))
    err.wait_for()
    assert err.inner_text() == GERMAN[section] != reason
    assert form.locator('[name="%s"]' % key).get_attribute("aria-invalid") == "true"
    assert plain.get("/api/v1/settings")[1] == before           # nothing changed

    # The same form saved for real.
    page.unroute("**/api/v1/settings")
    with page.expect_response(lambda r: r.request.method == "POST" and "/api/v1/settings" in r.url) as resp:
        form.get_by_role("button", name="Speichern", exact=True).click()
    assert resp.value.status == 200, resp.value.text()
    form.locator(".msg.ok").wait_for()
    assert _get_setting(plain, key) == stored
    if "." in key:
        assert key not in form.locator(".msg.ok").inner_text()        # keys are named in words, not raw
    if section.startswith("wifi") or section == "ap":
        assert "Neustart" in form.locator(".msg.ok").inner_text()
        assert form.get_by_role("button", name="Jetzt neu starten").count() == 1
    if section in STATIC:       # back to DHCP with no address stored, as the other tests expect
        prefix = key.rsplit(".", 1)[0] + "."
        back = {prefix + k: "" for k in ("ip", "subnet", "gateway", "dns")}
        back[prefix + "static_ip"] = False
        assert plain.post("/api/v1/settings", back)[0] == 200
    assert page.errors == []
    page.context.close()


def test_sections_save_on_their_own_and_keep_the_other_edits(browser, plain, shots):
    """One section at a time behind tabs (linkable); saving one keeps unsaved edits elsewhere (marked on their tab)
    and its own message; the static address shows only with static IP; the AP section says whether the AP runs."""
    page = _settings_page(browser, plain)
    assert page.locator("form.section:visible").count() == 1
    name = _get_setting(plain, "device_name")
    page.locator('#s-general [name="device_name"]').fill(name + " neu")
    page.locator("[data-test=tab-general]").get_by_label("ungespeicherte Änderungen").wait_for()
    meter = _tab(page, "meter")
    assert page.locator("#s-general").is_hidden() and page.url.endswith("#/settings/meter")
    meter.locator('[name="ctRatio"]').fill("3")
    meter.get_by_role("button", name="Speichern", exact=True).click()
    meter.locator(".msg.ok").wait_for()
    assert "Wandlerfaktor" in meter.locator(".msg.ok").inner_text()         # applied now, in words
    assert _get_setting(plain, "ctRatio") == 3 and _get_setting(plain, "device_name") == name
    general = _tab(page, "general")
    assert general.locator('[name="device_name"]').input_value() == name + " neu"   # the edit survived the reload
    page.go_back()
    page.locator("#s-meter .msg.ok").wait_for()                               # back: the meter, its message kept
    general = _tab(page, "general")
    general.get_by_role("button", name="Speichern", exact=True).click()
    general.locator(".msg.ok").wait_for()
    assert _get_setting(plain, "device_name") == name + " neu"
    # The dot goes once the device's document is reloaded (a moment after the message).
    page.locator("[data-test=tab-general]").get_by_label("ungespeicherte Änderungen").wait_for(state="detached")

    wifi = _tab(page, "wifiPrimary")
    assert wifi.locator('[name="wifi.primary.ip"]').count() == 0             # static IP off: no address fields
    wifi.locator('[name="wifi.primary.static_ip"]').check()
    for k in ("ip", "subnet", "gateway", "dns"):
        wifi.locator('[name="wifi.primary.%s"]' % k).wait_for()
    ap = _tab(page, "ap")
    assert "läuft gerade" in ap.locator("[data-test=ap-now]").inner_text()  # the fresh drive's AP is up
    assert "Dauerhaft an" in ap.inner_text()
    page.screenshot(path=os.path.join(shots, "settings-tabs.png"), full_page=True)
    assert plain.post("/api/v1/settings", {"device_name": name, "ctRatio": 1})[0] == 200
    assert page.errors == []
    page.context.close()


def test_the_page_checks_the_rules_before_sending(browser, plain):
    page = _settings_page(browser, plain)
    posts = []
    page.on("request", lambda r: posts.append(r.url) if r.method == "POST" else None)
    form = page.locator("#s-general")
    cases = [("device_name", "y" * 32, "höchstens 31 Zeichen")]
    for key, value, text in cases:
        form.locator('[name="%s"]' % key).fill(value)
        form.get_by_role("button", name="Speichern", exact=True).click()
        assert text in form.locator("#f-%s-err" % key.replace(".", "-")).inner_text()
    meter = _tab(page, "meter")
    for value in ("0,5", "2,55", "abc", "10001"):
        meter.locator('[name="ctRatio"]').fill(value)
        meter.get_by_role("button", name="Speichern", exact=True).click()
        assert "0,1" in meter.locator("#f-ctRatio-err").inner_text()
    assert meter.locator('[name="medianFilterSize"] option').all_inner_texts() == ["Aus", "3", "5", "7", "9"]
    wifi = _tab(page, "wifiPrimary")
    wifi.locator('[name="wifi.primary.password"]').fill("x" * 64)
    wifi.locator('[name="wifi.primary.static_ip"]').check()
    wifi.get_by_role("button", name="Speichern", exact=True).click()
    assert "63" in wifi.locator("#f-wifi-primary-password-err").inner_text()
    assert wifi.locator("#f-wifi-primary-ip-err").inner_text() == "erforderlich"
    ap = _tab(page, "ap")
    ap.locator('[name="accessPoint.password"]').fill("short")
    ap.get_by_role("button", name="Speichern", exact=True).click()
    assert "8" in ap.locator("#f-accessPoint-password-err").inner_text()
    assert posts == []                           # nothing was sent
    assert page.errors == []
    page.context.close()


def test_ssid_change_is_tried_not_stored_blind(browser, plain):
    """A new SSID is tried before it is stored (issue 37; it was a blind save after a question): an empty password
    for another network means an open one, and a network not in range stores nothing. (A profile switched off is
    saved as it is: it is not used.)"""
    page = _settings_page(browser, plain, section="wifiPrimary")
    asked = []
    page.on("dialog", lambda d: (asked.append(d.message), d.dismiss()))
    form = page.locator("#s-wifiPrimary")
    form.locator('[name="wifi.primary.ssid"]').fill("Nachbar")
    form.get_by_role("button", name="Speichern", exact=True).click()
    form.get_by_text("Kein Netz „Nachbar“ in Reichweite. Nichts wurde gespeichert.").wait_for(timeout=20000)
    assert asked == []
    assert _get_setting(plain, "wifi.primary.ssid") != "Nachbar"
    page.context.close()


def test_a_scanned_network_can_be_picked_for_the_ssid(browser, plain, shots):
    """The setup page lists the networks the device's radio scanned (/system/wifi_scan) and fills the SSID."""
    page = _settings_page(browser, plain, section="wifiPrimary")
    form = page.locator("#s-wifiPrimary")
    form.locator('[data-test="scan"]').click()
    nets = form.locator("ul.nets li")
    nets.first.wait_for()
    assert nets.all_inner_texts()[0].startswith("HostNetwork")       # strongest first (host air: -48 dBm)
    assert any(t.startswith("Neighbour") for t in nets.all_inner_texts())
    form.get_by_role("button", name="Neighbour").click()
    assert form.locator('[name="wifi.primary.ssid"]').input_value() == "Neighbour"
    page.set_viewport_size({"width": 360, "height": 800})
    form.screenshot(path=os.path.join(shots, "settings-scan-360.png"))
    page.context.close()


def test_ap_protection_without_password_asks_first(browser, plain):
    assert not _get_setting(plain, "accessPoint.password_set")
    page = _settings_page(browser, plain, section="ap")
    asked = []
    answers = [False, True]
    page.on("dialog", lambda d: (asked.append(d.message), d.accept() if answers.pop(0) else d.dismiss()))
    form = page.locator("#s-ap")
    form.locator('[name="accessPoint.password_enable"]').check()
    with page.expect_event("dialog"):
        form.get_by_role("button", name="Speichern", exact=True).click()
    assert len(asked) == 1 and "ohne Passwort" in asked[0]
    assert _get_setting(plain, "accessPoint.password_enable") is False
    form.get_by_role("button", name="Speichern", exact=True).click()
    form.locator(".msg.ok").wait_for()
    assert _get_setting(plain, "accessPoint.password_enable") is True
    # With a password there is nothing to confirm.
    form.locator('[name="accessPoint.password"]').fill("geheim123")
    with page.expect_response(lambda r: r.request.method == "POST" and "/api/v1/settings" in r.url) as resp:
        form.get_by_role("button", name="Speichern", exact=True).click()
    assert resp.value.status == 200
    assert len(asked) == 2 and _get_setting(plain, "accessPoint.password_set") is True
    page.context.close()


def test_mqtt_ca_upload_and_delete(browser, plain, certs):
    page = _settings_page(browser, plain, section="mqtt")
    box = page.locator("#s-mqtt")
    box.locator("[data-test=ca]").get_by_text("Kein eigenes Zertifikat").wait_for()
    box.locator("input[type=file]").set_input_files(certs["ca.crt"])
    page.wait_for_function("document.querySelector('#f-ca').value.includes('BEGIN CERTIFICATE')")
    box.get_by_role("button", name="Hochladen").click()
    box.locator("[data-test=ca]").get_by_text("Eigenes Zertifikat gespeichert").wait_for()
    assert plain.get("/api/v1/mqtt/ca")[1]["has_custom_cert"] is True
    box.get_by_role("button", name="Löschen").click()
    box.locator("[data-test=ca]").get_by_text("Kein eigenes Zertifikat").wait_for()
    assert plain.get("/api/v1/mqtt/ca")[1]["has_custom_cert"] is False
    page.context.close()


def test_language_follows_the_browser_not_the_device(browser, plain, shots):
    """The interface speaks the browser's language; the switch in the footer is kept in this browser; the device's
    language.active (the language of the API's and MQTT's values) changes nobody's interface."""
    ctx = browser.new_context(viewport={"width": 1200, "height": 900}, locale="en-US", bypass_csp=True)
    page = ctx.new_page()
    page.goto(plain.url + "/#/settings")
    page.get_by_role("link", name="Settings").wait_for()
    assert page.locator("html").get_attribute("lang") == "en"
    assert _get_setting(plain, "language.active") == "de"            # the device's setting says German
    page.locator("[data-test=lang]").click()                            # "Deutsch"
    page.get_by_role("link", name="Einstellungen").wait_for()
    assert page.locator("html").get_attribute("lang") == "de"
    page.reload()
    page.get_by_role("link", name="Einstellungen").wait_for()          # kept in this browser

    # The device's language set to English from this German interface: this interface stays German, and so does
    # a German browser's; the API's names follow the setting.
    form = page.locator("#s-general")
    form.locator("#f-timezone option").nth(100).wait_for(state="attached")
    form.locator('[name="language.active"]').select_option("en")
    form.get_by_role("button", name="Speichern", exact=True).click()
    form.locator(".msg.ok").wait_for()
    assert _get_setting(plain, "language.active") == "en"
    page.wait_for_timeout(500)
    assert page.locator("html").get_attribute("lang") == "de"
    german = _page(browser)
    german.goto(plain.url + "/")
    german.get_by_role("link", name="Einstellungen").wait_for()
    page.screenshot(path=os.path.join(shots, "settings-de-device-en.png"), full_page=True)
    form.locator('[name="language.active"]').select_option("de")
    form.get_by_role("button", name="Speichern", exact=True).click()
    form.locator(".msg.ok").wait_for()
    ctx.close()
    german.context.close()


# --- security ---

@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    h = start_host(tmp_path_factory, "web-auth")
    yield h
    h.stop()


def test_token_rotation_then_authentication_on(browser, secured, shots, tmp_path):
    """The humane login: create the pair (copy, file, remember), switch authentication on only then; a new browser
    is told a wrong token plainly, signs in from the token file, and the edit that needed the WRITE token is sent
    after the token is given, without typing it again."""
    ctx = browser.new_context(viewport={"width": 1200, "height": 900}, accept_downloads=True, locale="de-DE",
                              bypass_csp=True)
    ctx.grant_permissions(["clipboard-read", "clipboard-write"], origin=secured.url)
    page = ctx.new_page()
    page.errors = []
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    page.goto(secured.url + "/#/security")
    # No pair yet: the switch is not offered, the page says what comes first.
    page.locator("[data-test=pair-first]").wait_for()
    assert page.get_by_role("button", name="Einschalten").is_disabled()

    page.get_by_role("button", name="Neue Tokens erzeugen").first.click()
    pending = page.locator("[data-test=pending]")
    pending.wait_for()
    read_token = page.locator("[data-test=token-read]").inner_text()
    write_token = page.locator("[data-test=token-write]").inner_text()
    assert re.fullmatch("[0-9a-f]{64}", read_token) and re.fullmatch("[0-9a-f]{64}", write_token)
    first = int(re.search(r"\d+", page.locator("[data-test=countdown]").inner_text()).group(0))
    page.wait_for_timeout(1600)
    later = int(re.search(r"\d+", page.locator("[data-test=countdown]").inner_text()).group(0))
    assert 55 <= first <= 60 and later < first
    page.get_by_role("button", name="Kopieren: WRITE-Token").click()
    page.get_by_role("button", name="Kopiert: WRITE-Token").wait_for()
    assert page.evaluate("navigator.clipboard.readText()") == write_token
    with page.expect_download() as dl:
        page.locator("[data-test=token-file]").click()
    token_file = str(tmp_path / "meterplus-tokens.txt")
    dl.value.save_as(token_file)
    text = open(token_file, encoding="utf-8").read()
    assert "READ: " + read_token in text and "WRITE: " + write_token in text
    page.get_by_label("In diesem Browser merken").check()
    page.screenshot(path=os.path.join(shots, "security-pending.png"), full_page=True)
    page.get_by_role("button", name="Tokens bestätigen").click()
    page.get_by_text("Neue Tokens aktiv").wait_for()
    assert pending.count() == 0

    page.once("dialog", lambda d: d.accept())           # asked first, with the way back (issue 28 point 2)
    page.get_by_role("button", name="Einschalten").click()
    page.get_by_text("Anmeldung ist eingeschaltet.").wait_for()
    assert secured.get("/api/v1/settings")[0] == 401
    assert secured.get("/")[0] == 200                    # the page itself loads without a token
    assert page.evaluate("localStorage.getItem('mp.token')") == write_token     # remembered, as asked
    assert page.evaluate("sessionStorage.getItem('mp.token')") is None
    again = ctx.new_page()                               # another tab of this browser: no prompt
    again.goto(secured.url + "/#/settings")
    again.locator('#s-general [name="device_name"]').wait_for()
    assert again.locator("#tok-in").count() == 0
    again.close()

    # Another browser: asked on the first 401; a wrong token is called wrong; kept for the session only.
    other = _page(browser)
    other.goto(secured.url + "/")
    other.locator("#tok-in").wait_for()
    other.fill("#tok-in", "0" * 64)
    other.get_by_role("button", name="Anmelden").click()
    other.get_by_text("Falsches Token").wait_for()
    other.fill("#tok-in", read_token)
    other.get_by_role("button", name="Anmelden").click()
    other.wait_for_function("document.querySelector('[data-test=power] .big').textContent.includes('W')")
    other.screenshot(path=os.path.join(shots, "dashboard-read-token.png"), full_page=True)
    # A READ token cannot save: 403 asks for the WRITE token; the READ one again is told apart; the token file
    # signs in and the edit is sent as it was.
    other.goto(secured.url + "/#/settings")
    other.locator('#s-general [name="device_name"]').wait_for()
    other.locator('#s-general [name="device_name"]').fill("Mit Token")
    other.locator("#s-general").get_by_role("button", name="Speichern", exact=True).click()
    other.get_by_text("Diese Aktion braucht das WRITE-Token.").wait_for()
    other.fill("#tok-in", read_token)
    other.get_by_role("button", name="Anmelden").click()
    other.get_by_text("Das ist das READ-Token").wait_for()
    other.locator("[data-test=tok-file]").set_input_files(token_file)
    other.get_by_role("button", name="Anmelden").click()
    other.locator("#s-general .msg.ok").wait_for()
    assert other.locator('#s-general [name="device_name"]').input_value() == "Mit Token"
    assert secured.get("/api/v1/settings", headers={"Authorization": "Bearer " + read_token})[1]["device_name"] == \
        "Mit Token"
    assert other.evaluate("sessionStorage.getItem('mp.token')") == write_token
    assert other.evaluate("localStorage.getItem('mp.token')") is None

    # Authentication off again from the page.
    page.get_by_role("button", name="Ausschalten").click()
    page.get_by_text("Anmeldung ist ausgeschaltet").first.wait_for()
    assert secured.get("/api/v1/settings")[0] == 200
    assert page.errors == [] and other.errors == []
    ctx.close()
    other.context.close()


def test_copy_works_where_the_clipboard_api_does_not(browser, plain):
    """http://<device address> is no secure context, so navigator.clipboard is not offered there: the copy button
    falls back to a selected field and execCommand('copy'). (127.0.0.1 is a secure context: it is taken away.)"""
    ctx = browser.new_context(locale="de-DE", bypass_csp=True)
    ctx.grant_permissions(["clipboard-read", "clipboard-write"], origin=plain.url)
    ctx.add_init_script("Object.defineProperty(window, 'isSecureContext', {value: false});")
    page = ctx.new_page()
    page.goto(plain.url + "/#/security")
    page.get_by_role("button", name="Neue Tokens erzeugen").first.click()
    read_token = page.locator("[data-test=token-read]").inner_text()
    page.get_by_role("button", name="Kopieren: READ-Token").click()
    page.get_by_role("button", name="Kopiert: READ-Token").wait_for()
    assert page.evaluate("navigator.clipboard.readText()") == read_token
    ctx.close()


# --- rate limit, two tabs ---

def _wait_on_page(page, predicate, timeout_s, what):
    """Wait until predicate() holds on what the page's event handlers collected. Playwright's sync API hands events
    to Python handlers only while a Playwright call runs, so the wait must be one (wait_for_timeout), not sleep."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, what
        page.wait_for_timeout(200)


@pytest.fixture(scope="module")
def limited(tmp_path_factory):
    """The device's real limit: 25 requests in 10 s for all clients together."""
    h = start_host(tmp_path_factory, "web-limit", rate_limit=25)
    yield h
    h.stop()


def test_the_pages_own_429_reloads_itself_at_the_same_view(browser, limited):
    """Reloading a view (/#/settings/...) while the page's own budget is spent gives the 429 page, which said it
    reloads itself in 10 s and did not: Chromium takes a meta refresh to a URL with a fragment as a jump within the
    page. Under the 429 page's own policy (csp=True) its script reloads it, at the same view."""
    time.sleep(10.5)                                   # earlier tests' page loads leave the window
    for _ in range(10):                                # the page's budget: 10 loads per 10 s per address
        urllib.request.urlopen(limited.url + "/", timeout=10).close()
    page = _page(browser, csp=True)
    resp = page.goto(limited.url + "/#/settings/general")
    assert resp.status == 429 and "Zu viele Anfragen" in page.inner_text("body")
    page.locator("#s-general").wait_for(timeout=20000)
    assert page.url.endswith("/#/settings/general") and page.errors == []
    page.context.close()


def test_a_429_is_survived_and_two_tabs_share_the_budget(browser, limited, shots):
    limited.wait_for(lambda: limited.get("/api/v1/history/latest")[0] == 200)
    time.sleep(10.5)                                        # a fresh window
    page = _page(browser)
    statuses = []
    page.on("response", lambda r: statuses.append((r.status, r.headers.get("retry-after")))
            if "/api/v1/" in r.url else None)
    page.goto(limited.url + "/")
    page.wait_for_function("document.querySelector('[data-test=power] .big').textContent.includes('W')")
    # Another client uses up the device's budget (retry_429_for=0: this client must see the 429, not wait it out;
    # not alive, which keeps a small reserve of its own).
    while limited.get("/api/v1/system/info", retry_429_for=0)[0] != 429:
        pass
    page.locator("[data-test=busy]").wait_for(timeout=15000)
    page.screenshot(path=os.path.join(shots, "dashboard-busy.png"))
    assert (429, "10") in statuses
    refused = len(statuses)
    # It waits Retry-After (the banner counts down) and then carries on by itself.
    page.locator("[data-test=busy]").wait_for(state="detached", timeout=20000)
    page.wait_for_function("document.querySelector('[data-test=power] .big').textContent.includes('W')")
    _wait_on_page(page, lambda: any(st == 200 for st, _ in statuses[refused:]), 20, statuses)
    assert sum(st == 429 for st, _ in statuses) <= 2   # no hammering while it waits (latest and info may both meet it)
    # Two tabs polling side by side for 25 s: neither is refused.
    time.sleep(10.5)
    second = page.context.new_page()
    statuses.clear()
    second.on("response", lambda r: statuses.append((r.status, None)) if "/api/v1/" in r.url else None)
    second.goto(limited.url + "/")
    page.wait_for_timeout(25000)
    codes = [st for st, _ in statuses]
    assert codes.count(200) >= 10 and 429 not in codes, codes
    second.wait_for_function("document.querySelector('[data-test=power] .big').textContent.includes('W')")
    page.context.close()


# --- phone width, keyboard ---

@pytest.mark.parametrize("name", ["dashboard", "history", "settings", "security", "system"])
def test_phone_width_has_no_horizontal_scroll(browser, fast, shots, name):
    page = _page(browser, 360, 740)
    page.goto(fast.url + "/#/" + name)
    page.locator("main h1").wait_for()
    page.wait_for_timeout(1500)
    if name == "system":
        page.get_by_role("button", name="Laden").first.click()
        page.get_by_role("button", name="Laden").nth(1).click()
        page.locator("[data-test=log-ram] table").wait_for()
    page.screenshot(path=os.path.join(shots, "phone-%s.png" % name), full_page=True)
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 360, width
    assert page.errors == []
    page.context.close()


def test_system_page_shows_info_led_logs_and_ota(browser, fast):
    page = _page(browser)
    page.goto(fast.url + "/#/system")
    # The device in words and local time; the raw tables folded away for support.
    overview = page.locator("[data-test=overview]")
    overview.wait_for()
    words = overview.inner_text()
    for part in ("Firmware", "Läuft seit", "gestartet", "Grund: Einschalten", "Meter-Plus-000001",
                 "an, Adresse 192.168.4.1", "SML", "Telegramme", "Europe/Berlin", "KB frei"):
        assert part in words, (part, words)
    assert not re.search(r"\d{9,}", words)                             # no epoch seconds, no byte counts
    assert page.locator("[data-test=info-esp]").is_hidden()
    page.locator("[data-test=info-raw] summary").click()
    page.locator("[data-test=info-esp]").wait_for()
    assert "esp_id" in page.locator("[data-test=info-esp]").inner_text()
    # Each section has its own request (one may be asked again after the device shed it): wait, then count.
    page.locator("[data-test=led] .swatch").first.wait_for()
    assert page.locator("[data-test=led] .swatch").count() == 1
    page.get_by_role("button", name="Laden").nth(1).click()
    table = page.locator("[data-test=log-ram] table")
    table.locator("tbody tr").first.wait_for()
    assert table.locator("th").all_inner_texts() == ["uptime_s", "level", "message"]
    page.get_by_role("button", name="Laden").first.click()
    page.locator("[data-test=log-persistent] table").wait_for()
    page.get_by_role("button", name="Auf Update prüfen").click()
    page.get_by_text("Kein Update-Server eingerichtet").wait_for()     # the shipped placeholder: no server (issue 28)
    with page.expect_download() as dl:
        page.get_by_role("button", name="Rohdaten des Lesekopfs herunterladen").click()
    assert os.path.getsize(dl.value.path()) > 0
    page.context.close()


def test_keyboard_reaches_every_page(browser, fast):
    page = _page(browser)
    page.goto(fast.url + "/")
    page.wait_for_function("document.activeElement.tagName === 'H1'")   # focus starts on the page heading
    for target in ("Verlauf", "System", "Einstellungen", "Übersicht"):
        for _ in range(12):   # from the heading, Shift+Tab walks back into the navigation
            page.keyboard.press("Shift+Tab")
            if page.evaluate("document.activeElement.textContent") == target:
                break
        assert page.evaluate("document.activeElement.textContent") == target
        page.keyboard.press("Enter")
        page.wait_for_function("document.querySelector('main h1').textContent === %r" % target)
        page.wait_for_function("document.activeElement.tagName === 'H1'")   # focus moves to the new page
    page.context.close()


# --- the stale meter last: it silences the fast device's meter ---

def test_stale_meter_shows_unknown_never_the_last_value(browser, live, shots):
    page = _page(browser)
    page.goto(live.url + "/")
    page.wait_for_function("document.querySelector('[data-test=power] .big').textContent.includes('W')")
    live.control("meter", "off")
    try:
        live.wait_for(lambda: live.get("/api/v1/history/latest")[0] == 204, timeout=30)
        page.locator("[data-test=stale]").wait_for(timeout=15000)
        assert page.locator("[data-test=power] .big").inner_text() == "unbekannt"
        assert page.locator("[data-test=import] .big").inner_text() == "unbekannt"
        assert page.locator("[data-test=export] .big").inner_text() == "unbekannt"
        # The meter health says it in words (from the next /system/info, within 20 s), not "OK (stale)".
        page.locator("main table").get_by_text("keine Daten seit").wait_for(timeout=25000)
        assert "in Ordnung" not in page.locator("main table").first.inner_text()
        page.screenshot(path=os.path.join(shots, "dashboard-stale.png"), full_page=True)
    finally:
        live.control("meter", None)
    page.locator("[data-test=stale]").wait_for(state="detached", timeout=15000)
    page.context.close()


def test_unreachable_device_shows_no_old_values(browser, live):
    page = _page(browser)
    page.goto(live.url + "/")
    page.wait_for_function("document.querySelector('[data-test=power] .big').textContent.includes('W')")
    page.route("**/api/v1/**", lambda route: route.abort())       # the device drops off the network
    page.get_by_text("Gerät nicht erreichbar").first.wait_for(timeout=15000)
    assert page.locator("[data-test=power] .big").inner_text() == "…"
    assert page.locator("[data-test=import] .big").inner_text() == "…"
    page.unroute("**/api/v1/**")
    page.wait_for_function("document.querySelector('[data-test=power] .big').textContent.includes('W')",
                           timeout=15000)
    page.context.close()


def test_a_dropped_get_is_asked_again_a_dropped_post_is_not(browser, plain):
    """The device sheds a newcomer while both connection slots answer: the page asks a GET again (twice at most)
    and shows the settings; a POST whose connection dropped is reported, never sent a second time."""
    page = _page(browser)
    seen = {"GET": 0, "POST": 0}

    def drop_first_two(route):
        method = route.request.method
        seen[method] = seen.get(method, 0) + 1
        if method == "POST" or seen["GET"] <= 2:
            route.abort("connectionreset")
        else:
            route.continue_()

    name = _get_setting(plain, "device_name")
    page.route("**/api/v1/settings", drop_first_two)
    page.goto(plain.url + "/#/settings")
    page.locator("#s-general").wait_for()
    page.wait_for_function("(document.querySelector('#f-device_name') || {}).value === %s" % json.dumps(name))
    assert seen["GET"] >= 3                # the shell (language) and the form each ask for the settings
    form = page.locator("#s-general")
    _fill(form, "device_name", name + "x")
    form.get_by_role("button", name="Speichern", exact=True).click()
    form.get_by_text("Gerät nicht erreichbar").first.wait_for(timeout=10000)
    page.wait_for_timeout(1500)
    assert seen["POST"] == 1
    assert _get_setting(plain, "device_name") == name
    page.context.close()


# --- the page's rules against the device's ---

_CANDIDATES = {
    "bool": [True, False, "true", 1, None],
    "int": [0, 1, 2, 502, 1440, 1441, 3600, 3601, 65535, 65536, -1, "5", True],
    "choice": [0, 3, 4, 5, 9, 203, 213, 214, "5", None],
    "ratio": [1, 0.9, 1.5, 2.55, 10000, 10000.1, 10001, 0.1, 99.9, 123.4, "2", True],
    "text": ["", "Meter Plus", "x" * 31, "x" * 32, "x" * 64, "x" * 65, "\U0001F600" * 16, "\U0001F600" * 32,
             "a\tb", "a\x7fb", "a\x85b", "Zähler"],
    "topic": ["", "home/meter", "a+b", "a#", "a/", "x" * 64, "x" * 65],
    "ssid": ["", "Home", "x" * 32, "x" * 33, "ä" * 16, "ä" * 17, "a\x00b", "tab\there"],
    "wpa": ["", "short", "12345678", "x" * 63, "x" * 64, "ä" * 31, "ä" * 32, "1234567\x01", None],
    "secret": ["", "x" * 64, "x" * 65, None],
    "ipv4": ["", "192.168.1.10", "10.0.0", "256.1.1.1", "01.2.3.4", "1.2.3.4.5", "a.b.c.d", "0.0.0.0", "127.0.0.1",
             "224.0.0.1", "240.0.0.1", "255.255.255.255", "\u0661\u0669\u0662.168.1.1"],
    "mask": ["", "255.255.255.0", "255.0.255.0", "0.0.0.0", "255.255.255.255", "255.255.255.254", "255.255.255.252",
             "255.255.254.0", "1.2.3"],
    "host": ["", "pool.ntp.org", "192.168.1.2", "-bad.example", "bad-.example", "a_b", "x" * 64, "ok-host",
             "0.0.0.0", "999.1.1.1", "127.0.0.1", "239.1.1.1"],
    "url": ["", "http://192.168.1.5/manifest.json", "https://updates.example/stable/m.json", "ftp://x/", "http://",
            "http://a b/", "http://host:0/", "http://host:65535/x", "http://user@host/", "http://-x/", "x" * 201],
    "lang": ["de", "en", "fr", ""],
}


def test_the_pages_rules_match_the_devices(browser, plain):
    from core.settings_check import SCHEMA, check

    page = _page(browser)
    page.goto(plain.url + "/")
    page.wait_for_function("window.meterplus !== undefined")
    assert sorted(page.evaluate("Object.keys(window.meterplus.SCHEMA)")) == sorted(SCHEMA)   # every key
    cases = []
    for key, (kind, _a, _b) in SCHEMA.items():
        for value in _CANDIDATES.get(kind, []):
            if kind in ("int", "choice", "ratio", "bool") and not isinstance(value, (int, float)) or \
                    isinstance(value, bool) and kind != "bool":
                continue   # the page only ever passes numbers (parsed) and booleans (checkboxes) for these
            if kind not in ("bool",) and value is None and kind not in ("wpa", "secret"):
                continue
            if kind == "bool" and not isinstance(value, bool):
                continue
            if kind in ("text", "topic", "ssid", "ipv4", "mask", "host", "url", "lang") and not isinstance(value, str):
                continue
            cases.append((key, value))
    page_says = page.evaluate("cs => cs.map(([k, v]) => window.meterplus.check(k, v))", cases)
    wrong = []
    for (key, value), js in zip(cases, page_says):
        _norm, err = check(key, value, lambda z: True)
        if (err is None) != (js == ""):
            wrong.append((key, value, err, js))
    assert len(cases) > 150 and wrong == []
    page.context.close()


def test_restart_button_restarts_the_device(browser, plain):
    page = _page(browser)
    page.goto(plain.url + "/#/system")
    page.locator("[data-test=overview]").wait_for()
    asked = []
    page.on("dialog", lambda d: (asked.append(d.message), d.accept()))
    page.get_by_role("button", name="Jetzt neu starten").click()
    page.locator("[data-test=restart-wait]").wait_for()          # the waiting view (tests/test_web_restart_backup.py)
    assert asked == ["Gerät jetzt neu starten?"]

    def restarted():
        try:
            status, info, _ = plain.get("/api/v1/system/info")
        except (OSError, http.client.HTTPException):  # the device restarting mid-answer
            return False
        return status == 200 and {e["name"]: e["value"] for e in info["uptime"]}["reset_reason"] == "SOFTWARE"

    plain.wait_for(restarted, timeout=60)
    page.context.close()
