"""The settings page's Emulation section (issue 21 point 6) in headless Chromium against the host runtime: the
Shelly Pro 3EM switch saved to emulation.shelly, a port out of range refused in the page with nothing sent or
changed, and the help (what to enter in the battery's app, the SMA serial, the no-token note with authentication
on)."""

import json

from tests.test_api_harness import host_fixture
from tests.test_web_ui import WEB_MARKS, _page, browser  # noqa: F401 (the module's browser fixture)

pytestmark = WEB_MARKS

emu = host_fixture("web-emulation")


def _derived_serial(device_id):
    """emulation.smaSerial 0: the device id's last 8 hex digits as a number, 0 -> 1 (as the SMA sender derives it)."""
    n = int(device_id[-8:], 16) if device_id else 0
    return 1 if n == 0 else (0xFFFFFFFE if n == 0xFFFFFFFF else n)


def _emulation(host):
    return host.get("/api/v1/settings")[1]["emulation"]


def _open(browser, host):  # noqa: F811
    page = _page(browser)
    page.goto(host.url + "/#/settings/emulation")
    form = page.locator("#s-emulation")
    form.wait_for()
    assert form.is_visible() and page.locator("form.section:visible").count() == 1
    return page, form


def test_shelly_switched_on_is_saved(browser, emu):  # noqa: F811
    assert _emulation(emu)["shelly"] is False
    page, form = _open(browser, emu)
    assert form.locator("h2").inner_text() == "Emulation"
    form.locator('[name="emulation.shelly"]').set_checked(True)
    page.locator("[data-test=tab-emulation]").get_by_label("ungespeicherte Änderungen").wait_for()
    with page.expect_response(lambda r: r.request.method == "POST" and "/api/v1/settings" in r.url) as resp:
        form.get_by_role("button", name="Speichern", exact=True).click()
    assert resp.value.status == 200, resp.value.text()
    assert json.loads(resp.value.request.post_data) == {"emulation.shelly": True}
    form.locator(".msg.ok").wait_for()
    assert "emulation." not in form.locator(".msg.ok").inner_text()          # keys named in words
    assert _emulation(emu)["shelly"] is True
    page.locator("[data-test=tab-emulation]").get_by_label("ungespeicherte Änderungen").wait_for(state="detached")
    assert form.locator('[name="emulation.shelly"]').is_checked()
    assert page.errors == []
    page.context.close()


def test_a_bad_port_shows_the_field_error_and_changes_nothing(browser, emu):  # noqa: F811
    before = _emulation(emu)
    page, form = _open(browser, emu)
    posts = []
    page.on("request", lambda r: posts.append(r.url) if r.method == "POST" else None)
    field = form.locator('[name="emulation.shellyUdpPort"]')
    assert field.input_value() == str(before["shellyUdpPort"])
    field.fill("70000")
    form.get_by_role("button", name="Speichern", exact=True).click()
    err = form.locator("#f-emulation-shellyUdpPort-err")
    err.wait_for()
    assert "0 bis 65535" in err.inner_text()
    assert field.get_attribute("aria-invalid") == "true"
    form.locator('[name="emulation.smaTargets"]').fill("192.168.1.20, 224.0.0.1")
    form.get_by_role("button", name="Speichern", exact=True).click()
    assert "Multicast" in form.locator("#f-emulation-smaTargets-err").inner_text()
    page.wait_for_timeout(300)
    assert posts == []                                                         # nothing was sent
    assert _emulation(emu) == before                                           # nothing changed

    # The device's own check too: 70000 sent past the page's rules comes back as the field's error.
    def corrupt(route):
        if route.request.method == "POST":
            route.continue_(post_data=json.dumps({"emulation.shellyUdpPort": 70000}))
        else:
            route.continue_()

    page.route("**/api/v1/settings", corrupt)
    field.fill("1011")
    form.locator('[name="emulation.smaTargets"]').fill("")
    with page.expect_response(lambda r: r.request.method == "POST" and "/api/v1/settings" in r.url) as resp:
        form.get_by_role("button", name="Speichern", exact=True).click()
    assert resp.value.status == 400
    assert resp.value.json()["fields"]["emulation.shellyUdpPort"] == "must be 0 to 65535"
    # in the page's language (issue 28 point 4)
    assert form.locator("#f-emulation-shellyUdpPort-err").inner_text() == "ganze Zahl 0 bis 65535"
    assert _emulation(emu) == before
    assert page.errors == []
    page.context.close()


def test_help_names_the_ports_the_serial_and_the_no_token_note(browser, emu):  # noqa: F811
    page, form = _open(browser, emu)
    help_text = form.locator("[data-test=emu-help]")
    help_text.wait_for()
    assert "1010" in help_text.inner_text() and "2220" in help_text.inner_text()
    assert form.locator("[data-test=emu-auth]").count() == 0                   # authentication off: no note
    esp_id = {e["name"]: e["value"] for e in emu.get("/api/v1/system/info")[1]["esp"]}["esp_id"]
    assert _emulation(emu)["smaSerial"] == 0                                   # the serial derived from the id
    page.wait_for_function("s => document.querySelector('[data-test=emu-help]').textContent.includes(s)",
                           arg="Seriennummer %d." % _derived_serial(esp_id))
    page.context.close()

    # With authentication on (the settings document says so), the note that the emulation needs no token.
    page = _page(browser)

    def auth_on(route):
        if route.request.method == "GET":
            answer = route.fetch()
            doc = answer.json()
            doc["api_auth_required"] = True
            doc["emulation"]["smaSerial"] = 123456789
            route.fulfill(response=answer, json=doc)
        else:
            route.continue_()

    page.route("**/api/v1/settings", auth_on)
    page.goto(emu.url + "/#/settings/emulation")
    note = page.locator("#s-emulation [data-test=emu-auth]")
    note.wait_for()
    assert "ohne Token" in note.inner_text() and "ändert nichts" in note.inner_text()
    assert "Seriennummer 123456789." in page.locator("#s-emulation [data-test=emu-help]").inner_text()
    assert page.errors == []
    page.context.close()


def test_the_pages_emulation_rules_match_the_devices(browser, emu):  # noqa: F811
    """The keys' rules in rules.js against core/settings.py (tests/test_web_ui.py's table has no ipv4list)."""
    from core.settings import check

    page = _page(browser)
    page.goto(emu.url + "/")
    page.wait_for_function("window.meterplus !== undefined")
    lists = ["", "192.168.1.20", " 192.168.1.20 , 10.0.0.7 ", "1.1.1.1,2.2.2.2,3.3.3.3",
             "1.1.1.1,2.2.2.2,3.3.3.3,4.4.4.4",
             "127.0.0.1", "0.1.2.3", "224.0.0.1", "239.255.255.250", "240.0.0.1", "255.255.255.255", "10.0.0",
             "01.2.3.4", "1.2.3.4,", ",", "a.b.c.d", "192.168.1.20;10.0.0.7"]
    cases = [("emulation.smaTargets", v) for v in lists]
    for key in ("emulation.shellyUdpPort", "emulation.shellyUdpPort2", "emulation.smaSerial", "emulation.smaSusyId"):
        cases += [(key, v) for v in (-1, 0, 1, 1010, 65535, 65536, 4294967295, 4294967296)]
    cases += [(k, v) for k in ("emulation.shelly", "emulation.sma") for v in (True, False)]
    page_says = page.evaluate("cs => cs.map(([k, v]) => window.meterplus.check(k, v))", cases)
    wrong = [(k, v, js) for (k, v), js in zip(cases, page_says)
             if (check(k, v, lambda z: True)[1] is None) != (js == "")]
    assert wrong == []
    page.context.close()


def test_a_save_that_costs_discovery_its_txt_records_says_so_in_the_page(browser, tmp_path_factory):  # noqa: F811
    """Issue 36 finding 6: Modbus switched on beside the Shelly emulation with a UDP port leaves the device's own mDNS
    responder no socket; the save's answer carries warnings ["mdns_txt: ..."] and the page says it in words (de and
    en); a save that costs nothing says nothing of it."""
    from tests.test_api_harness import start_host

    host = start_host(tmp_path_factory, "web-mdns-txt", settings={
        "emulation": {"shelly": True, "shellyUdpPort": 1010, "shellyUdpPort2": 0}})
    try:
        for lang, words in (("de", "ohne TXT-Einträge"), ("en", "without TXT records")):
            host.post("/api/v1/settings", {"modbus": {"enable": False}, "ledEnable": True})
            page = _page(browser)
            if lang == "en":
                page.add_init_script("localStorage.setItem('mp.lang', 'en')")
            page.goto(host.url + "/#/settings/modbus")
            form = page.locator("#s-modbus")
            form.wait_for()
            form.locator('[name="modbus.enable"]').set_checked(True)
            with page.expect_response(lambda r: r.request.method == "POST" and "/api/v1/settings" in r.url) as resp:
                form.locator("button[type=submit]").first.click()
            assert resp.value.status == 200 and resp.value.json()["warnings"][0].startswith("mdns_txt:")
            form.locator(".msg.ok").wait_for()
            assert words in form.locator(".msg.ok").inner_text()
            page.goto(host.url + "/#/settings/general")
            general = page.locator("#s-general")
            general.wait_for()
            general.locator('[name="ledEnable"]').set_checked(False)
            with page.expect_response(lambda r: r.request.method == "POST" and "/api/v1/settings" in r.url):
                general.locator("button[type=submit]").first.click()
            general.locator(".msg.ok").wait_for()
            assert words not in general.locator(".msg.ok").inner_text()
            assert page.errors == []
            page.context.close()
    finally:
        host.stop()
