"""Fail closed against hostile pages: every answer (page, API JSON, errors, 429) says nosniff and DENY to framing;
the page carries a Content-Security-Policy whose hashes are those of its own inline script and style; in Chromium the
page runs under it with no violation, and a page of another origin cannot frame it (clickjacking)."""

import base64
import gzip
import hashlib
import http.server
import os
import re
import threading
import urllib.request

import pytest

from tests.hostproc import http_request
from tests.test_api_harness import start_host
from tests.test_web_ui import CHROMIUM, _page, browser  # noqa: F401  (fixture)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def device(tmp_path_factory):
    h = start_host(tmp_path_factory, "web-headers")
    yield h
    h.stop()


@pytest.fixture(scope="module")
def limited(tmp_path_factory):
    h = start_host(tmp_path_factory, "web-headers-429", rate_limit=3)
    yield h
    h.stop()


def _headers(url, **kw):
    status, _body, headers = http_request(url, retry_429_for=0, **kw)
    return status, headers


def _safe(headers):
    return headers.get("X-Content-Type-Options") == "nosniff" and headers.get("X-Frame-Options") == "DENY"


@pytest.mark.parametrize("path,method,data,want", [
    ("/", None, None, 200), ("/api/v1/system/alive", None, None, 200), ("/api/v1/history/latest", None, None, None),
    ("/api/v1/nothing-here", None, None, 404), ("/api/v1/settings", "POST", b"{not json", 400),
])
def test_every_answer_says_nosniff_and_no_framing(device, path, method, data, want):
    status, headers = _headers(device.url + path, method=method, data=data,
                               headers={"Content-Type": "application/json"} if data else None)
    assert want is None or status == want
    assert _safe(headers), dict(headers)


def test_a_429_says_it_too(limited):
    statuses = []
    for _ in range(12):
        status, headers = _headers(limited.url + "/api/v1/system/info")
        statuses.append(status)
        if status == 429:
            assert _safe(headers)
            return
    pytest.fail("no 429 in %s" % statuses)


def test_the_pages_policy_hashes_its_own_inline_script_and_style(device):
    with urllib.request.urlopen(device.url + "/") as r:
        csp = r.headers["Content-Security-Policy"]
        page = gzip.decompress(r.read()).decode()
    assert "frame-ancestors 'none'" in csp and "default-src 'none'" in csp and "unsafe-inline" not in csp
    script = re.search(r"<script>(.*)</script>", page, re.S).group(1)
    style = re.search(r"<style>(.*)</style>", page, re.S).group(1)
    b64 = lambda text: base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()  # noqa: E731
    assert "script-src 'sha256-%s'" % b64(script) in csp
    assert "style-src 'sha256-%s'" % b64(style) in csp


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="chromium missing (make test installs it)")
def test_the_page_runs_under_its_policy_and_no_other_site_can_frame_it(browser, device, tmp_path):  # noqa: F811
    page = _page(browser, csp=True)
    console = []
    page.on("console", lambda m: console.append(m.text))
    page.goto(device.url + "/")
    page.get_by_role("link", name="Verlauf").wait_for()
    page.goto(device.url + "/#/system")
    page.locator("[data-test=overview]").wait_for()           # API calls work under connect-src 'self'
    assert not [c for c in console if "Content Security Policy" in c], console
    assert page.errors == []
    page.context.close()

    # A page of another origin (another port) that frames the device, as the reported clickjacking page did.
    (tmp_path / "evil.html").write_text('<!doctype html><title>win a prize</title><iframe id="f" '
                                        'src="%s/#/system" width="800" height="600"></iframe>' % device.url)
    handler = lambda *a, **k: http.server.SimpleHTTPRequestHandler(*a, directory=str(tmp_path), **k)  # noqa: E731
    evil = http.server.ThreadingHTTPServer(("127.0.0.2", 0), handler)
    threading.Thread(target=evil.serve_forever, daemon=True).start()
    try:
        page = _page(browser, csp=True)
        page.goto("http://127.0.0.2:%d/evil.html" % evil.server_address[1])
        page.wait_for_load_state("load")                         # the frame has loaded (or failed to)
        frames = [f for f in page.frames if f != page.main_frame]
        assert len(frames) == 1
        blocked = frames[0]
        inner = blocked.evaluate("document.body ? document.body.innerHTML : ''")
        assert blocked.url.startswith("chrome-error://") or inner == ""
        assert page.frame_locator("#f").locator("nav").count() == 0      # nothing of the device inside
        page.context.close()
    finally:
        evil.shutdown()


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="chromium missing (make test installs it)")
def test_texts_from_an_update_server_are_shown_as_text(browser, device):  # noqa: F811
    """A hostile update server's texts (version, notes, messages) reach the page only as text: no element is made
    from them, no script runs (Preact escapes; the page has no innerHTML; the CSP would stop an inline handler)."""
    evil = '<img src=x onerror="window.pwned=1"><b>bold</b>'
    check = {"success": True, "data": {"update_available": True, "version": evil, "installed_version": "0.1.0",
                                       "release_date": "2026-11-24", "release_note_de": evil, "release_note_en": evil,
                                       "release_url": ""}}
    page = _page(browser, csp=True)
    page.route("**/api/v1/ota/check", lambda route: route.fulfill(status=200, content_type="application/json",
                                                                 body=__import__("json").dumps(check)))
    page.route("**/api/v1/ota/start", lambda route: route.fulfill(status=200, content_type="application/json",
                                                                 body='{"ok": false, "message": %s}'
                                                                 % __import__("json").dumps(evil)))
    page.goto(device.url + "/#/system")
    page.get_by_role("button", name="Auf Update prüfen").click()
    page.get_by_text("onerror", exact=False).first.wait_for()
    page.once("dialog", lambda d: d.accept())
    page.get_by_role("button", name="Update starten").click()
    page.get_by_text("window.pwned", exact=False).first.wait_for()
    assert page.evaluate("window.pwned") is None
    assert page.locator("img[src=x]").count() == 0 and page.locator("b", has_text="bold").count() == 0
    page.context.close()
