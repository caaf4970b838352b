"""The web interface's third round (issue 37 points 1-3) in Chromium against the host runtime, de and en, at desktop
and phone width: the tariff form's every label stands on its own field and only the fields of the chosen kind
show; the Cost page does not scroll sideways at 360 px (its totals and peaks, with a tariff and a year of peaks);
the WiFi card stores no untested credentials, and a station that cannot join says so (System page, LED)."""

import copy
import json
import os

import pytest

from host.ntp_server import scaled_clock, start_ntp_server
from tests.hostproc import meter_time_args
from tests.price_server import PriceServer
from tests.test_api_harness import start_host
from tests.test_tariff_host import EPOCH0
from tests.test_web_ui import WEB_MARKS, _page, browser, fetch_through  # noqa: F401  (fixtures)

pytestmark = WEB_MARKS
AXE = os.path.join(os.path.dirname(pytest.importorskip("axe_playwright_python").__file__), "axe.min.js")

# The fields of each tariff kind (docs/tariff.md): the export price and the base fee hold in every kind.
KIND_FIELDS = {
    "off": [],
    "fixed": ["importPrice", "exportPrice", "baseFee", "currency"],
    "tou": ["importPrice", "exportPrice", "baseFee", "currency", "tou"],
    "dynamic": ["exportPrice", "baseFee", "currency", "surcharge", "vatPercent", "priceUrl"],
}


@pytest.fixture(scope="module")
def priced(tmp_path_factory):
    """A device with a dynamic tariff (prices from the local stand-in) and a few hours of booked cost."""
    srv = PriceServer()
    sim = scaled_clock(300.0, EPOCH0)
    h, p, stop_ntp = start_ntp_server(clock=sim)
    settings = {"history": {"flushMinutes": 1},
                "tariff": {"mode": "dynamic", "surcharge": "0.1532", "vatPercent": "19", "exportPrice": "0.0786",
                           "baseFee": "12.5", "priceUrl": srv.energy_charts_url}}
    host = start_host(tmp_path_factory, "web-round3", settings=settings,
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


def _year_of_peaks(route):
    """The device's /peaks with eleven closed months behind the current one, as a year of history gives."""
    resp = fetch_through(route)
    body = resp.json()
    month = {"month": "2026-09", "quarter_peak": {"power_W": 11234.5, "start": "2026-09-14T18:15",
                                                  "timestamp": 1789402500},
             "hourly_top3": [{"date": "2026-09-%02d" % d, "start": "2026-09-%02dT18:00" % d,
                              "timestamp": 1789400000 + d, "energy_kWh": 3.456} for d in (14, 3, 22)],
             "hourly_top3_mean_kWh": 3.456}
    body["months"] = [dict(copy.deepcopy(month), month="2026-%02d" % m) for m in range(9, 0, -1)] + body["months"]
    route.fulfill(status=200, content_type="application/json", body=json.dumps(body))


def _cost_page(browser, host, lang, width):  # noqa: F811
    page = _page(browser, width=width)
    if lang == "en":
        page.add_init_script("localStorage.setItem('mp.lang', 'en')")
    page.route("**/api/v1/peaks", _year_of_peaks)
    page.goto(host.url + "/#/money")
    page.wait_for_selector("[data-test=money][data-ready='1']", timeout=30000)
    page.locator("[data-test=t-form]").wait_for()
    return page


# The words of each label (the label's text node) and its control's box, in the page: for every shown field of the
# form, whether the words are directly above their own control (or beside it, left, on its line), and which other
# control shares the words' line.
_GEOMETRY = """() => [...document.querySelectorAll('[data-test=t-form] label')]
  .filter((l) => l.offsetParent).map((l) => {
  const c = l.querySelector('input, select, textarea');
  const r = document.createRange();
  r.selectNodeContents(l.firstChild);
  const t = r.getBoundingClientRect();
  const b = c.getBoundingClientRect();
  const others = [...document.querySelectorAll('[data-test=t-form] input, [data-test=t-form] select, '
    + '[data-test=t-form] textarea')].filter((o) => o !== c && o.offsetParent).filter((o) => {
      const x = o.getBoundingClientRect();
      return x.top < t.bottom - 1 && x.bottom > t.top + 1;
    }).map((o) => o.name);
  return {name: c.name, text: l.firstChild.textContent.trim(),
    above: Math.abs(t.left - b.left) <= 4 && b.top - t.bottom >= -1 && b.top - t.bottom <= 12,
    beside: t.right <= b.left && t.top < b.bottom && t.bottom > b.top, others};
})"""


@pytest.mark.parametrize("width", [1280, 360])
@pytest.mark.parametrize("lang", ["de", "en"])
def test_each_tariff_label_stands_on_its_own_field_and_only_the_kinds_fields_show(browser, priced, lang, width):  # noqa: F811
    page = _cost_page(browser, priced, lang, width)
    mode = page.locator("[data-test=t-mode]")
    for kind, fields in KIND_FIELDS.items():
        mode.select_option(kind)
        shown = [name for name in ["importPrice", "exportPrice", "baseFee", "currency", "surcharge", "vatPercent",
                                   "priceUrl", "tou"] if page.locator("[data-test=t-%s]" % name).is_visible()]
        assert shown == fields, (kind, shown)
        for g in page.evaluate(_GEOMETRY):
            assert g["above"] or g["beside"], (kind, g)       # the words on their own field
            assert g["others"] == [], (kind, g)               # and beside no other field
    # what is hidden still goes along unchanged: a save in "fixed" keeps the dynamic tariff's surcharge
    mode.select_option("fixed")
    page.locator("[data-test=t-importPrice]").fill("0.3012")
    page.locator("form[data-test=t-form] button[type=submit]").click()
    page.locator("[data-test=m-price]").get_by_text("0.3012" if lang == "en" else "0,3012", exact=False).wait_for(
        timeout=15000)
    doc = priced.get("/api/v1/settings")[1]["tariff"]
    assert doc["mode"] == "fixed" and doc["importPrice"] == 0.3012 and doc["surcharge"] == 0.1532
    assert priced.post("/api/v1/settings", {"tariff": {"mode": "dynamic"}})[0] == 200
    assert page.errors == []
    page.unroute_all(behavior="ignoreErrors")      # the view reloads after the save: its /peaks may be on the way
    page.context.close()


@pytest.mark.parametrize("width", [360, 1280])
@pytest.mark.parametrize("lang", ["de", "en"])
def test_the_cost_page_does_not_scroll_sideways(browser, priced, lang, width):  # noqa: F811
    page = _cost_page(browser, priced, lang, width)
    assert page.locator("[data-test=m-peak]").count() >= 10
    page.wait_for_timeout(300)
    wide = page.evaluate("document.documentElement.scrollWidth")
    assert wide <= width, wide
    # every total and every peak is within the page's width (nothing cut off or scrolled inside a box)
    out = page.evaluate("""(w) => [...document.querySelectorAll('[data-test=money] dd, [data-test=money] dt')]
        .filter((e) => e.getBoundingClientRect().right > w + 0.5).map((e) => e.textContent)""", width)
    assert out == []
    today = page.locator("[data-test=m-today] [data-test=m-cost]").inner_text()
    assert today.endswith(" EUR") and today[0].isdigit()
    page.context.close()


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_axe_finds_nothing_on_the_cost_page(browser, priced, theme):  # noqa: F811
    page = _page(browser, width=360)
    page.add_init_script("localStorage.setItem('mp.theme', %r)" % theme)
    page.route("**/api/v1/peaks", _year_of_peaks)
    page.goto(priced.url + "/#/money")
    page.wait_for_selector("[data-test=money][data-ready='1']", timeout=30000)
    page.add_script_tag(path=AXE)
    result = page.evaluate("axe.run(document, {resultTypes: ['violations']})")
    found = [(v["id"], v["impact"], [n["target"] for n in v["nodes"]][:3]) for v in result["violations"]]
    assert found == []
    page.context.close()


# --- point 2: the WiFi card stores no untested credentials; a station that cannot join says so ---

GOOD = {"wifi": {"primary": {"ssid": "HostNetwork", "password": "host-password"}}}
WORDS = {
    "de": {"save": "Speichern", "wrong": "Das Passwort für „HostNetwork“ ist falsch. Nichts wurde gespeichert.",
           "gone": "Kein Netz „Nirgendwo“ in Reichweite. Nichts wurde gespeichert.",
           "joined": "Verbunden mit „HostNetwork“ und gespeichert", "down": "nicht verbunden: Passwort falsch",
           "led": "Hinweis · gelb · gedimmt"},
    "en": {"save": "Save", "wrong": 'The password for "HostNetwork" is wrong. Nothing was saved.',
           "gone": 'No network "Nirgendwo" in range. Nothing was saved.',
           "joined": 'Joined "HostNetwork" and saved', "down": "not connected: wrong password",
           "led": "note · yellow · dimmed"},
}


@pytest.fixture(scope="module")
def joined(tmp_path_factory):
    """A device on its home WiFi (the host's air: HostNetwork, host-password)."""
    h = start_host(tmp_path_factory, "web-round3-wifi", settings=GOOD)
    h.wait_for(lambda: {e["name"]: e["value"] for e in h.get("/api/v1/system/info")[1]["wifi"]}["connected"],
               timeout=30)
    yield h
    h.stop()


@pytest.fixture(scope="module")
def stranded(tmp_path_factory):
    """A device whose stored WiFi password is wrong (the air's network wants host-password)."""
    h = start_host(tmp_path_factory, "web-round3-stranded", args=["--speed", "60"],
                   settings={"wifi": {"primary": {"ssid": "HostNetwork", "password": "wrong-password"}}})
    h.wait_reading()
    yield h
    h.stop()


def _wifi_card(browser, host, lang):  # noqa: F811
    page = _page(browser)
    if lang == "en":
        page.add_init_script("localStorage.setItem('mp.lang', 'en')")
    page.goto(host.url + "/#/settings/wifiPrimary")
    form = page.locator("#s-wifiPrimary")
    form.wait_for()
    page.stored = []
    page.on("request", lambda r: page.stored.append(r.post_data)
            if r.method == "POST" and r.url.endswith("/api/v1/settings") else None)
    return page, form


@pytest.mark.parametrize("lang", ["de", "en"])
def test_the_wifi_cards_save_tries_a_new_password_or_network_before_storing_it(browser, joined, lang):  # noqa: F811
    w = WORDS[lang]
    page, form = _wifi_card(browser, joined, lang)
    box = form.locator("[data-test=join-primary]")
    before = joined.get("/api/v1/settings")[1]["wifi"]["primary"]
    form.locator('[name="wifi.primary.password"]').fill("wrong-password")
    form.get_by_role("button", name=w["save"], exact=True).click()
    box.get_by_text(w["wrong"]).wait_for(timeout=20000)
    assert page.stored == [] and joined.get("/api/v1/settings")[1]["wifi"]["primary"] == before
    form.locator('[name="wifi.primary.password"]').fill("")
    form.locator('[name="wifi.primary.ssid"]').fill("Nirgendwo")
    form.locator('[name="wifi.primary.ssid"]').press("Enter")               # the keyboard's save too
    box.get_by_text(w["gone"]).wait_for(timeout=20000)
    assert page.stored == [] and joined.get("/api/v1/settings")[1]["wifi"]["primary"] == before
    form.locator('[name="wifi.primary.ssid"]').fill("HostNetwork")
    form.locator('[name="wifi.primary.password"]').fill("host-password")
    form.get_by_role("button", name=w["save"], exact=True).click()
    box.get_by_text(w["joined"], exact=False).wait_for(timeout=20000)
    assert page.stored == []                        # stored by the join, after it worked
    assert joined.get("/api/v1/settings")[1]["wifi"]["primary"]["ssid"] == "HostNetwork"
    assert page.errors == []
    page.context.close()


@pytest.mark.parametrize("lang", ["de", "en"])
def test_a_station_that_cannot_join_says_why_and_the_led_is_not_fine(browser, stranded, lang):  # noqa: F811
    w = WORDS[lang]
    stranded.wait_for(lambda: stranded.get("/api/v1/system/led")[1]["status"] == "INFO", timeout=30)
    page = _page(browser)
    if lang == "en":
        page.add_init_script("localStorage.setItem('mp.lang', 'en')")
    page.goto(stranded.url + "/#/system")
    page.locator("[data-test=overview]").get_by_text(w["down"]).wait_for(timeout=20000)
    led = page.locator("[data-test=led] p")
    led.wait_for()
    assert w["led"] in led.inner_text(), led.inner_text()
    page.context.close()
