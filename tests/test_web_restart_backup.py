"""Web interface (issue 20 point 6), in Chromium: a restart shows a waiting view that reloads the page by itself
once the device answers again; settings download as a backup without secrets and come back from it, leaving WiFi
and the access point alone; a file that is no backup, or one with a bad value, changes nothing."""

import json

from tests.test_api_harness import host_fixture
from tests.test_web_ui import WEB_MARKS, _page, browser  # noqa: F401  (browser: the module's Chromium fixture)

pytestmark = WEB_MARKS
device = host_fixture("web-restart-backup")


def test_restart_waits_for_the_device_and_reloads_by_itself(browser, device):  # noqa: F811
    page = _page(browser)
    page.goto(device.url + "/#/system")
    page.locator("main h1").wait_for()
    loads = []
    page.on("load", lambda: loads.append(1))
    page.on("dialog", lambda d: d.accept())
    starts = device.log().count("Meter Plus up")
    page.get_by_role("button", name="Jetzt neu starten").click()
    wait = page.locator("[data-test=restart-wait]")
    wait.wait_for()
    assert "startet neu" in wait.inner_text()
    page.wait_for_event("load", timeout=60000)                 # reloaded by itself once alive answered
    page.locator("main h1").wait_for()
    assert page.locator("[data-test=restart-wait]").count() == 0 and loads
    assert device.log().count("Meter Plus up") == starts + 1   # the device really restarted in between
    assert page.evaluate("location.hash") == "#/system"
    page.context.close()


def _restore(page, tmp_path, doc, expect, name="backup.json", preview=None, accept=False):
    """Upload doc as a backup file (its preview, when one shows, checked against the lines preview gives and then
    accepted); the message once it says expect."""
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    for attempt in range(3):                                       # a fresh page: no message of the last upload
        page.reload()
        try:
            page.locator("[data-test=backup]").wait_for(timeout=10000)
            break
        except Exception:
            if attempt == 2:
                raise
            page.wait_for_timeout(5000)   # the device's page limit (10 loads in 10 s) answered 429: as the page says
    page.locator("[data-test=restore-file]").set_input_files(str(path))
    if preview is not None or accept:
        box = page.locator("[data-test=restore-preview]")
        box.wait_for()
        if preview is not None:
            assert box.locator("li").all_inner_texts() == preview
        box.get_by_role("button", name="Einspielen").click()
    msg = page.locator("[data-test=backup] .msg", has_text=expect)
    msg.wait_for()
    return msg.inner_text()


def test_backup_downloads_without_secrets_and_restores_all_but_the_network(browser, device, tmp_path):  # noqa: F811
    before = {"device_name": "Keller", "mqtt": {"host": "broker.lan", "password": "s3cret"},
              "wifi": {"primary": {"ssid": "HostNetwork"}}}
    assert device.post("/api/v1/settings", before)[0] == 200
    page = _page(browser)
    page.goto(device.url + "/#/settings/backup")
    box = page.locator("[data-test=backup]")
    box.wait_for()
    with page.expect_download() as dl:
        box.get_by_role("button", name="Einstellungen herunterladen").click()
    text = open(dl.value.path(), encoding="utf-8").read()
    backup = json.loads(text)
    assert backup["meterplus_backup"] == 1 and backup["settings"]["device_name"] == "Keller"
    assert backup["settings"]["mqtt"]["host"] == "broker.lan"
    assert "s3cret" not in text and "password_set" not in text and '"password"' not in text

    assert device.post("/api/v1/settings", {"device_name": "Dachboden", "mqtt": {"port": 1884}})[0] == 200
    backup["settings"]["wifi"]["primary"]["ssid"] = "SomeoneElse"    # a file must not move the device off its WiFi
    # Asked first, naming each setting old -> new (issue 28 point 6); "Abbrechen" sends nothing.
    path = tmp_path / "first.json"
    path.write_text(json.dumps(backup))
    posts = []
    page.on("request", lambda r: posts.append(r.url) if r.method == "POST" else None)
    page.reload()                                                  # the page shows the settings as they are now
    page.locator("[data-test=backup]").wait_for()
    page.locator("[data-test=restore-file]").set_input_files(str(path))
    page.locator("[data-test=restore-preview]").get_by_role("button", name="Abbrechen").click()
    page.wait_for_timeout(300)
    assert posts == [] and device.get("/api/v1/settings")[1]["device_name"] == "Dachboden"
    said = _restore(page, tmp_path, backup, "Sicherung eingespielt",
                    preview=["Gerätename: Dachboden → Keller", "Port: 1884 → 1883"])
    assert "2 Einstellungen" in said
    doc = device.get("/api/v1/settings")[1]
    assert doc["device_name"] == "Keller" and doc["mqtt"]["host"] == "broker.lan" and doc["mqtt"]["port"] == 1883
    assert doc["mqtt"]["password_set"] is True                     # the secret stayed as it was
    assert doc["wifi"]["primary"]["ssid"] == "HostNetwork"
    page.context.close()


def test_a_file_that_is_no_backup_or_holds_a_bad_value_changes_nothing(browser, device, tmp_path):  # noqa: F811
    page = _page(browser)
    page.goto(device.url + "/#/settings/backup")
    page.locator("[data-test=backup]").wait_for()
    before = device.get("/api/v1/settings")[1]
    _restore(page, tmp_path, "{not json", "keine Meter-Plus-Sicherung", "broken.json")
    _restore(page, tmp_path, {"device_name": "x"}, "keine Meter-Plus-Sicherung", "plain.json")
    bad = {"meterplus_backup": 1, "settings": {"device_name": "Garage", "mqtt": {"port": 70000}}}
    said = _restore(page, tmp_path, bad, "abgelehnt", "bad.json",
                    preview=["Gerätename: %s → Garage" % before["device_name"],
                             "Port: %d → 70000" % before["mqtt"]["port"]])
    assert "Port" in said                                          # the field is named in words
    assert device.get("/api/v1/settings")[1] == before             # all or nothing: the name was not taken either
    page.context.close()


def test_a_crafted_backup_changes_neither_the_network_nor_where_the_broker_password_goes(browser, device,  # noqa: F811
                                                                                       tmp_path):
    """Issue 26 finding 7, end to end: dotted WiFi and access point keys slipped past the page's filter and the
    stored MQTT password went along to the backup's broker."""
    assert device.post("/api/v1/settings", {"device_name": "Keller", "mqtt": {"host": "broker.lan",
                                                                              "password": "s3cret"}})[0] == 200
    page = _page(browser)
    page.goto(device.url + "/#/settings/backup")
    page.locator("[data-test=backup]").wait_for()
    before = device.get("/api/v1/settings")[1]
    crafted = {"meterplus_backup": 1, "settings": {
        "wifi.primary.ssid": "EvilTwin", "wifi.primary.password": "evilpass1", "accessPoint.enable": True,
        "api_auth_required": False, "device_name": "Gekapert", "mqtt": {"host": "broker.evil.example"}}}
    said = _restore(page, tmp_path, crafted, "abgelehnt", "crafted.json", accept=True)
    assert "wifi.primary.ssid" in said or "WLAN" in said or "SSID" in said
    assert device.get("/api/v1/settings")[1] == before            # nothing changed, not even the name
    # The same file without the network keys: the broker moves, the owner's password does not go with it.
    crafted["settings"] = {"device_name": "Gekapert", "mqtt": {"host": "broker.evil.example"}}
    said = _restore(page, tmp_path, crafted, "Sicherung eingespielt", "crafted2.json", accept=True)
    assert "Zugangsdaten entfernt" in said
    doc = device.get("/api/v1/settings")[1]
    assert doc["mqtt"]["host"] == "broker.evil.example" and doc["mqtt"]["password_set"] is False
    assert doc["wifi"] == before["wifi"] and doc["accessPoint"] == before["accessPoint"]
    page.context.close()


def test_the_log_follows_live_while_asked_and_stops_after(browser, device):  # noqa: F811
    page = _page(browser)
    asked = []
    page.on("request", lambda r: asked.append(r.url) if "/logs/ram" in r.url else None)
    page.goto(device.url + "/#/system")
    box = page.locator("[data-test=log-ram]")
    box.wait_for()
    box.locator("[data-test=live]").check()
    box.locator("table").wait_for()
    assert device.post("/api/v1/settings", {"device_name": "Live-Test"})[0] == 200   # a new line in the log
    box.get_by_text("settings changed: device_name").first.wait_for(timeout=15000)   # shown without a click
    page.wait_for_timeout(10500)
    during = len(asked)
    assert 3 <= during <= 6                                        # every 5 s: 2 requests per 10 s
    box.locator("[data-test=live]").uncheck()
    page.wait_for_timeout(6000)
    assert len(asked) == during                                    # stopped
    page.context.close()
