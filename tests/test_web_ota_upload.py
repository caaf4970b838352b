"""Web interface (issue 20 point 6), in Chromium: an update installed from a file (the signed archive of
tools.ota_manifest --archive) through the System page, piece by piece, then the device restarts into it; an
archive whose signature the device does not trust is refused with the device's words and changes nothing."""

import os
import time

from tests.hostproc import HostProcess
from tests.ota_server import make_release, pubkey_file
from tests.test_ota_host import ntp, pub, running_version  # noqa: F401  (fixtures)
from tests.test_web_ui import WEB_MARKS, _page, browser  # noqa: F401  (browser: the module's Chromium fixture)

pytestmark = WEB_MARKS


def _archive(tmp_path, folder, version, changes=None, key=None):
    from tools.ota_manifest import make_archive

    kwargs = {"changes": changes or {}}
    if key is not None:
        kwargs["key"] = key
    make_release(folder, version, **kwargs)
    with open(os.path.join(folder, "manifest.json"), "rb") as f:
        manifest = f.read()
    with open(os.path.join(folder, "manifest.json.sig")) as f:
        path = tmp_path / ("release-%s.tar" % version)
        make_archive(str(path), os.path.join(folder, version), manifest, f.read())
    return path


def _device(tmp_path, ntp):  # noqa: F811
    # speed 1: the upload's 60 s idle limit is device time
    return HostProcess(tmp_path / "drive", args=["--app-on-drive", "--speed", "1", "--ntp", ntp, "--ota-pubkey",
                                                 pubkey_file(str(tmp_path))], settings={"ota": {"url": ""}}).start()


def _upload(browser, h, archive, drop=None):  # noqa: F811
    """The System page with archive chosen in the update-from-file box (its confirmation accepted); drop: the
    offsets whose first piece is lost at the network (the connection aborted, as a shed or a WiFi drop)."""
    page = _page(browser)
    if drop:
        dropped = set()

        def lose_once(route):
            offset = route.request.url.rsplit("offset=", 1)[1]
            if offset in drop and offset not in dropped:
                dropped.add(offset)
                route.abort("connectionreset")
            else:
                route.continue_()

        page.route("**/api/v1/ota/upload?offset=*", lose_once)
        page.dropped = dropped
    page.goto(h.url + "/#/system")
    page.on("dialog", lambda d: d.accept())
    page.locator("[data-test=ota-file]").set_input_files(str(archive))
    return page


def test_an_update_from_a_file_installs_and_the_page_comes_back(browser, tmp_path, pub, ntp):  # noqa: F811
    folder, server = pub
    archive = _archive(tmp_path, folder, "0.2.0", {"services/ota/added_in_020.py": '"""New in 0.2.0."""\n'})
    h = _device(tmp_path, ntp)
    try:
        page = _upload(browser, h, archive)
        page.locator("[data-test=restart-wait]").wait_for(timeout=120000)   # all pieces taken, installing
        h.wait_for(lambda: running_version(h) == "0.2.0", timeout=120)
        page.wait_for_event("load", timeout=60000)                          # the waiting view reloaded the page
        assert os.path.exists(os.path.join(h.state, "services/ota/added_in_020.py"))
        assert server.requests == []                                         # nothing came from an update server
        page.context.close()
    finally:
        h.stop()


def test_an_untrusted_archive_is_refused_in_words_and_changes_nothing(browser, tmp_path, pub, ntp):  # noqa: F811
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    folder, _server = pub
    archive = _archive(tmp_path, folder, "0.2.0", key=Ed25519PrivateKey.generate())
    h = _device(tmp_path, ntp)
    try:
        page = _upload(browser, h, archive, drop={"0", "8192"})        # two pieces lost once: sent again
        refusal = page.locator("[data-test=ota-upload] .msg.err")
        refusal.wait_for(timeout=60000)
        # In the page's language from the answer's stable error code, not the device's English message.
        assert refusal.inner_text() == "Abgelehnt: Signatur fehlt oder falsch.", refusal.inner_text()
        assert page.dropped == {"0", "8192"}
        assert page.locator("[data-test=restart-wait]").count() == 0
        assert running_version(h) == "0.1.0" and not os.path.exists(os.path.join(h.state, "ota/journal"))
        page.context.close()
    finally:
        h.stop()


def test_the_upload_stays_under_the_rate_limit_and_ends_with_the_new_version_on_trial(browser, tmp_path, pub, ntp):  # noqa: F811,E501
    """Issue 28 point 9: the page paces its pieces under the device's own limit (25 requests per 10 s, the real
    one here), so no request is refused and no "busy" banner shows; after the restart it names the version now
    running and that it is on trial."""
    folder, _server = pub
    big = '"""New in 0.2.0."""\n' + "#" * 60000
    archive = _archive(tmp_path, folder, "0.2.0", {"services/ota/added_in_020.py": big})
    h = _device(tmp_path, ntp)
    try:
        page = _page(browser)
        refused = []
        page.on("response", lambda r: refused.append(r.url) if r.status == 429 else None)
        page.goto(h.url + "/#/system")
        page.locator("[data-test=overview]").wait_for()
        page.on("dialog", lambda d: d.accept())
        t0 = time.monotonic()
        page.locator("[data-test=ota-file]").set_input_files(str(archive))
        page.locator("[data-test=restart-wait]").wait_for(timeout=180000)
        print("upload of %d bytes: %.1f s" % (os.path.getsize(archive), time.monotonic() - t0))
        assert refused == [] and page.locator("[data-test=busy]").count() == 0
        result = page.locator("[data-test=ota-result]")
        result.wait_for(timeout=120000)                                      # after the reload
        assert result.inner_text().startswith("Aktualisiert: 0.1.0 → 0.2.0, in Erprobung"), result.inner_text()
        assert refused == []
        page.context.close()
    finally:
        h.stop()
