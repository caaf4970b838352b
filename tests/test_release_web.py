"""The release's upload archive (dist/meterplus-x.y.z/meterplus-x.y.z-update.tar, signed with the project key) installs
from a file through the web page's System section onto a drive installed with tools.install from the previous
release, in Chromium; no update server is asked. (The project key is played by a key made for this test:
tests/test_release_host.py says why.)"""

import os

from tests.hostproc import HostProcess
from tests.test_ota_host import ntp, running_version  # noqa: F401  (fixture)
from tests.test_release_host import ADDED, project
from tests.test_web_ota_upload import _upload
from tests.test_web_ui import WEB_MARKS, browser  # noqa: F401  (the module's Chromium fixture)

pytestmark = WEB_MARKS


def test_the_release_archive_installs_from_a_file_in_the_web_page(browser, tmp_path, ntp):  # noqa: F811
    folder, drive = project(tmp_path)
    archive = os.path.join(folder, "meterplus-0.2.0-update.tar")
    # speed 1: the upload's 60 s idle limit is device time; no --ota-pubkey: the drive's keys are the install's
    h = HostProcess(drive, args=["--app-on-drive", "--speed", "1", "--ntp", ntp], settings={"ota": {"url": ""}})
    try:
        h.start()
        assert running_version(h) == "0.1.0"
        page = _upload(browser, h, archive)
        page.locator("[data-test=restart-wait]").wait_for(timeout=120000)   # all pieces taken, installing
        h.wait_for(lambda: running_version(h) == "0.2.0", timeout=120)
        page.wait_for_event("load", timeout=60000)                          # the waiting view reloaded the page
        assert os.path.exists(os.path.join(drive, ADDED))
        page.context.close()
    finally:
        h.stop()
