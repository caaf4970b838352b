"""The settings page tries WiFi credentials before it stores them (POST /api/v1/wifi/join, headless Chromium on the
host runtime): a wrong password says so plainly and stores nothing, a missing network too, the right one joins
with the access point kept up and shows the address and name the device has there."""

import os

import pytest

from tests.test_api_harness import start_host
from tests.test_web_ui import CHROMIUM, _settings_page, browser, shots  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="chromium missing (make test installs it)")]


@pytest.fixture
def device(tmp_path_factory):
    h = start_host(tmp_path_factory, "web-join")
    yield h
    h.stop()


def _try(page, ssid, password):
    form = page.locator("#s-wifiPrimary")
    form.locator('[name="wifi.primary.ssid"]').fill(ssid)
    form.locator('[name="wifi.primary.password"]').fill(password)
    box = page.locator("[data-test=join-primary]")
    box.get_by_role("button", name="Verbindung testen und speichern").click()
    return box


def test_credentials_are_tried_before_they_are_stored(browser, device, shots):  # noqa: F811
    page = _settings_page(browser, device, section="wifiPrimary")
    box = _try(page, "HostNetwork", "wrong-password")
    box.get_by_text("Das Passwort für „HostNetwork“ ist falsch. Nichts wurde gespeichert.").wait_for()
    assert device.get("/api/v1/settings")[1]["wifi"]["primary"]["ssid"] == ""
    box = _try(page, "Nirgendwo", "some-password")
    box.get_by_text("Kein Netz „Nirgendwo“ in Reichweite.", exact=False).wait_for()
    box = _try(page, "HostNetwork", "host-password")
    box.get_by_text("http://127.0.0.1/", exact=False).wait_for()
    text = box.inner_text()
    assert "Verbunden mit „HostNetwork“ und gespeichert" in text and "meterplus-024d50000001.local" in text
    assert device.get("/api/v1/settings")[1]["wifi"]["primary"]["ssid"] == "HostNetwork"
    info = {s: {e["name"]: e["value"] for e in device.get("/api/v1/system/info")[1][s]} for s in ("wifi", "ap")}
    assert info["wifi"]["connected"] is True and info["ap"]["active"] is True     # the AP stayed up
    page.screenshot(path=os.path.join(shots, "settings-wifi-join.png"), full_page=True)
    assert page.errors == []
    page.context.close()
