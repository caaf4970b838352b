"""Point 4 of issue 27 end to end: a maintainer builds a release with make release KEY=..., serves dist/ with a
plain static web server (python -m http.server) and points ota.url at it; a drive installed with tools.install
from the previous release runs on the host runtime (python -m host --app-on-drive, no --ota-pubkey) and updates
itself to it. The project key is played by a key made for this test (the real one's private half is offline):
this test's project ships its public half in ota_keys.txt as the repository ships the maintainers' key."""

import os
import socket
import subprocess
import sys
import time

import pytest

from tests.hostproc import HostProcess, free_port
from tests.test_install import new_drive, run_install
from tests.test_ota_host import check_data, ntp, running_version, wait_update_offered  # noqa: F401  (fixture)
from tests.test_release import build, drive_zip, source_copy, write_key

pytestmark = pytest.mark.slow
ADDED = "services/ota/added_in_020.py"


def project(tmp_path):
    """(release folder of 0.2.0 in tmp/dist, signed with the test project's key; a CIRCUITPY folder with 0.1.0
    installed from its drive zip): what a maintainer publishes and what an owner has."""
    key, pub = write_key(str(tmp_path / "maintainers"))
    old = drive_zip(build(source_copy(str(tmp_path / "src-0.1.0"), "0.1.0", keys=[pub]), str(tmp_path / "old")))
    src = source_copy(str(tmp_path / "src-0.2.0"), "0.2.0", changes={ADDED: '"""New in 0.2.0."""\n'}, keys=[pub])
    folder = build(src, str(tmp_path / "dist"), key=key)
    drive = new_drive(tmp_path / "CIRCUITPY")
    r = run_install(drive, "--zip", old)
    assert r.returncode == 0, r.stderr
    return folder, drive


class StaticServer:
    """python -m http.server serving folder on 127.0.0.1 (any static web server would do)."""

    def __init__(self, folder):
        self.port = free_port()
        self.proc = subprocess.Popen([sys.executable, "-m", "http.server", str(self.port), "--bind", "127.0.0.1",
                                      "--directory", folder], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("http.server did not start")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(10)


def test_a_release_on_a_static_web_server_installs_over_the_network(tmp_path, ntp):  # noqa: F811
    folder, drive = project(tmp_path)
    server = StaticServer(os.path.dirname(folder))          # serve dist/
    url = "http://127.0.0.1:%d/manifest.json" % server.port  # the channel: the newest release in dist/
    h = HostProcess(drive, args=["--app-on-drive", "--speed", "60", "--ntp", ntp], settings={"ota": {"url": url}})
    keys_before = open(os.path.join(drive, "ota_keys.txt")).read()
    try:
        h.start()
        assert running_version(h) == "0.1.0"
        d = wait_update_offered(h, "0.2.0")
        assert d["release_note_en"] == "Test release 0.2.0." and d["release_date"] == "2026-12-01"
        status, body, _ = h.post("/api/v1/ota/start", {})
        assert status == 200 and body["ok"], body
        h.wait_for(lambda: running_version(h) == "0.2.0", timeout=120)
        assert os.path.exists(os.path.join(drive, ADDED))
        # the drive's keys are the ones the install put there: the runtime added none (no --ota-pubkey)
        assert open(os.path.join(drive, "ota_keys.txt")).read() == keys_before
    finally:
        h.stop()
        server.stop()


def test_a_release_signed_with_another_key_is_refused_by_the_installed_drive(tmp_path, ntp):  # noqa: F811
    folder, drive = project(tmp_path)
    stranger, _pub = write_key(str(tmp_path / "stranger"))
    src = source_copy(str(tmp_path / "src-0.3.0"), "0.3.0")
    build(src, os.path.dirname(folder), key=stranger)        # dist/manifest.json now names 0.3.0, signed by stranger
    server = StaticServer(os.path.dirname(folder))
    url = "http://127.0.0.1:%d/manifest.json" % server.port
    h = HostProcess(drive, args=["--app-on-drive", "--speed", "60", "--ntp", ntp], settings={"ota": {"url": url}})
    try:
        h.start()
        d = h.wait_for(lambda: (lambda d: d if d["error"] else None)(check_data(h)), timeout=90)
        assert d["error"] == "signature" and d["update_available"] is False
        assert running_version(h) == "0.1.0"
    finally:
        h.stop()
        server.stop()
