"""Accessibility of the web interface (issue 20 point 9), in Chromium: the skip link lands in the page's content
from every page without leaving it, the token dialog keeps the keyboard inside and gives focus back, and the
focus ring and input borders have the 3:1 contrast WCAG 2.2 asks of non-text contrast."""

import hashlib
import json
import os

import pytest

from tests.test_api_harness import host_fixture, start_host
from tests.test_web_ui import WEB_MARKS, _page, browser  # noqa: F401  (browser: the module's Chromium fixture)

pytestmark = WEB_MARKS
TOKEN = "0123456789abcdef" * 4


device = host_fixture("web-a11y")


@pytest.fixture(scope="module")
def locked(tmp_path_factory):
    """A device with authentication on: every API request without a token is 401, so the token dialog opens."""
    h = start_host(tmp_path_factory, "web-a11y-auth", settings={"api_auth_required": True})
    h.stop()
    digest = hashlib.sha256(TOKEN.encode()).hexdigest()
    with open(os.path.join(h.state, "tokens.json"), "w") as f:
        json.dump({"read": digest, "write": digest, "required": True}, f)
    h.start()
    yield h
    h.stop()


@pytest.mark.parametrize("route", ["dashboard", "history", "settings", "security", "system"])
def test_the_skip_link_lands_in_this_pages_content(browser, device, route):  # noqa: F811
    page = _page(browser)
    page.goto(device.url + "/#/" + route)
    page.locator("main h1").wait_for()
    skip = page.locator("a.skip")
    assert page.evaluate("document.querySelector('a[href], button, input') === document.querySelector('a.skip')")
    skip.focus()                                                 # the first stop in the tab order
    assert skip.inner_text() == "Zum Inhalt springen"           # German like the rest of the page
    assert skip.bounding_box()["x"] >= 0                         # shown while it has the focus
    page.keyboard.press("Enter")
    assert page.evaluate("location.hash") == "#/" + route         # still this page, not the dashboard
    assert page.evaluate("document.activeElement.closest('main') !== null")
    page.context.close()


def _contrast(page, color_a, color_b):
    """WCAG contrast ratio of two CSS rgb() colors, computed in the page."""
    return page.evaluate("""([a, b]) => {
      const lum = (c) => {
        const [r, g, bl] = c.match(/\\d+(\\.\\d+)?/g).slice(0, 3).map(Number).map((v) => {
          v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; });
        return 0.2126 * r + 0.7152 * g + 0.0722 * bl;
      };
      const [x, y] = [lum(a), lum(b)].sort((p, q) => q - p);
      return (x + 0.05) / (y + 0.05);
    }""", [color_a, color_b])


def _background(page, selector):
    """The first non-transparent background behind the element."""
    return page.evaluate("""(sel) => {
      for (let el = document.querySelector(sel); el; el = el.parentElement) {
        const c = getComputedStyle(el).backgroundColor;
        if (c && c !== 'rgba(0, 0, 0, 0)' && c !== 'transparent') return c;
      }
      return 'rgb(255, 255, 255)';
    }""", selector)


def test_focus_ring_and_input_borders_reach_3_to_1(browser, device):  # noqa: F811
    page = _page(browser)
    page.goto(device.url + "/#/settings")
    field = page.locator("main input[type=text]").first
    field.wait_for()
    border = page.evaluate("(el) => getComputedStyle(el).borderTopColor", field.element_handle())
    assert _contrast(page, border, _background(page, "main input[type=text]")) >= 3.0
    field.focus()
    page.keyboard.press("Shift+Tab")
    page.keyboard.press("Tab")                                   # keyboard focus: :focus-visible applies
    ring = page.evaluate("getComputedStyle(document.activeElement).outlineColor")
    assert page.evaluate("getComputedStyle(document.activeElement).outlineStyle") == "solid"
    assert _contrast(page, ring, _background(page, "main")) >= 3.0
    assert _contrast(page, ring, "rgb(255, 255, 255)") >= 3.0    # on a card
    nav = page.locator("header nav a").first
    nav.focus()
    page.keyboard.press("Shift+Tab")
    page.keyboard.press("Tab")
    ring = page.evaluate("getComputedStyle(document.activeElement).outlineColor")
    assert page.evaluate("!!document.activeElement.closest('header')")
    assert _contrast(page, ring, _background(page, "header")) >= 3.0
    page.context.close()


def test_the_token_dialog_keeps_the_keyboard_inside_and_gives_focus_back(browser, locked):  # noqa: F811
    page = _page(browser)
    page.goto(locked.url + "/#/system")
    dialog = page.get_by_role("dialog")
    dialog.wait_for()
    assert page.evaluate("document.activeElement.id") == "tok-in"
    seen = []
    for _ in range(6):                                           # around the dialog and back, both ways
        page.keyboard.press("Tab")
        seen.append(page.evaluate("!!document.activeElement.closest('[role=dialog]')"))
    for _ in range(6):
        page.keyboard.press("Shift+Tab")
        seen.append(page.evaluate("!!document.activeElement.closest('[role=dialog]')"))
    assert all(seen), seen
    page.keyboard.press("Escape")
    assert dialog.count() == 0
    assert page.evaluate("document.activeElement !== document.body")   # focus went back into the page
    page.context.close()
