"""No English device message in the German interface (issue 20 point 7): errors are shown from the answer's stable
code (docs/openapi.yaml, Error.code), update answers from theirs; only a code this page does not know yet falls back
to the device's own words."""

import json

from tests.test_web_ui import WEB_MARKS, _page, _settings_page, browser, fast, plain  # noqa: F401  (fixtures)

pytestmark = WEB_MARKS


def _save_name(page, name):
    form = page.locator("#s-general")
    form.locator('[name="device_name"]').fill(name)
    form.get_by_role("button", name="Speichern", exact=True).click()
    return form.locator(".msg.err")


def test_a_device_error_is_shown_in_the_pages_language(browser, plain):  # noqa: F811
    page = _settings_page(browser, plain)
    answer = {"error": "Settings could not be stored ([Errno 28] No space left on device)", "code": "storage_failed"}
    page.route("**/api/v1/settings", lambda route: route.fulfill(status=500, content_type="application/json",
                                                                   body=json.dumps(answer))
               if route.request.method == "POST" else route.continue_())
    err = _save_name(page, "Keller 2")
    err.wait_for()
    assert err.inner_text() == "Speichern fehlgeschlagen (Flash voll?)."
    # A code this page does not know: the device's words, with the status, rather than nothing.
    page.unroute("**/api/v1/settings")
    page.route("**/api/v1/settings", lambda route: route.fulfill(status=500, content_type="application/json",
                                                                   body=json.dumps({"error": "Brand new trouble",
                                                                                    "code": "from_the_future"}))
               if route.request.method == "POST" else route.continue_())
    err = _save_name(page, "Keller 3")
    page.get_by_text("500: Brand new trouble").wait_for()
    page.context.close()


def test_update_start_says_in_german_that_there_is_none(browser, fast):  # noqa: F811
    page = _page(browser)
    page.on("dialog", lambda d: d.accept())
    page.goto(fast.url + "/#/system")
    with page.expect_response(lambda r: "/ota/start" in r.url) as resp:
        page.get_by_role("button", name="Update starten").click()
    body = resp.value.json()
    assert body["code"] == "no_update" and body["message"].startswith("No update available")
    page.get_by_text("Kein Update verfügbar.").wait_for()
    assert page.get_by_text("No update available").count() == 0
    page.context.close()
