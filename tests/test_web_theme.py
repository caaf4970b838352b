"""Dark mode (issue 20 point 6), in Chromium: the page follows the system's colour scheme, a switch in the footer
overrides it on this browser (kept across reloads), and the dark colours keep WCAG contrast (text 4.5:1, field
borders and the focus ring 3:1)."""

from tests.test_api_harness import host_fixture
from tests.test_web_a11y import _background, _contrast
from tests.test_web_ui import WEB_MARKS, browser  # noqa: F401  (browser: the module's Chromium fixture)

pytestmark = WEB_MARKS
device = host_fixture("web-theme")


def _page(browser, scheme):  # noqa: F811
    ctx = browser.new_context(viewport={"width": 1200, "height": 900}, locale="de-DE", color_scheme=scheme,
                              bypass_csp=True)
    return ctx.new_page()


def _style(page, selector, prop):
    return page.evaluate("([s, p]) => getComputedStyle(document.querySelector(s))[p]", [selector, prop])


def _luminance_dark(page, color):
    return _contrast(page, color, "rgb(0, 0, 0)") < 2.0


def test_a_dark_system_gets_dark_colours_with_enough_contrast(browser, device):  # noqa: F811
    page = _page(browser, "dark")
    page.goto(device.url + "/#/settings")
    field = page.locator("main input[type=text]").first
    field.wait_for()
    bg = _style(page, "body", "backgroundColor")
    fg = _style(page, "body", "color")
    assert _luminance_dark(page, bg)
    assert _contrast(page, fg, bg) >= 4.5
    card = _background(page, "main input[type=text]")
    assert _luminance_dark(page, card) and _contrast(page, fg, card) >= 4.5
    border = page.evaluate("(el) => getComputedStyle(el).borderTopColor", field.element_handle())
    assert _contrast(page, border, _style(page, "main input[type=text]", "backgroundColor")) >= 3.0
    assert _contrast(page, border, card) >= 3.0
    field.focus()
    page.keyboard.press("Shift+Tab")
    page.keyboard.press("Tab")
    ring = page.evaluate("getComputedStyle(document.activeElement).outlineColor")
    assert _contrast(page, ring, card) >= 3.0 and _contrast(page, ring, bg) >= 3.0
    # The charts' axes are drawn in --muted on a card (canvas reads the variable when a chart is made).
    muted = page.evaluate("(() => { const d = document.createElement('div'); d.style.color = "
                          "getComputedStyle(document.documentElement).getPropertyValue('--muted'); "
                          "document.body.append(d); const c = getComputedStyle(d).color; d.remove(); return c; })()")
    assert _contrast(page, muted, card) >= 4.5
    page.context.close()


def test_the_switch_overrides_the_system_and_is_kept(browser, device):  # noqa: F811
    page = _page(browser, "light")
    page.goto(device.url + "/")
    switch = page.locator("[data-test=theme]")
    switch.wait_for()
    assert switch.inner_text() == "Darstellung: wie das System"
    assert not _luminance_dark(page, _style(page, "body", "backgroundColor"))
    switch.click()
    assert switch.inner_text() == "Darstellung: hell"
    switch.click()
    assert switch.inner_text() == "Darstellung: dunkel"
    assert _luminance_dark(page, _style(page, "body", "backgroundColor"))
    page.reload()
    page.locator("[data-test=theme]").wait_for()
    assert page.evaluate("document.documentElement.dataset.theme") == "dark"      # kept on this browser
    assert _luminance_dark(page, _style(page, "body", "backgroundColor"))
    page.locator("[data-test=theme]").click()                                      # back to the system's
    assert page.evaluate("localStorage.getItem('mp.theme')") is None
    assert not _luminance_dark(page, _style(page, "body", "backgroundColor"))
    page.context.close()
