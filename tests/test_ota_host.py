"""OTA end to end on the host runtime with the application on the drive and a local update server: aio-wattwaechter
checks and starts, the firmware restarts into the new version with settings and history intact; a version that
crashes at boot is rolled back; a bad download changes nothing; SIGKILL during the switch never bricks the drive;
the nightly check fires at --speed."""

import asyncio
import json
import os
import time

import pytest
from aio_wattwaechter import Wattwaechter

from tests import ota_powercut
from tests.hostproc import HostProcess
from tests.ota_server import UpdateServer, make_release, pubkey_file

pytestmark = pytest.mark.slow

SPEED = 60.0
BROKEN = {"services/metering/pipeline.py": 'raise RuntimeError("0.3.0 is broken at boot")\n'}
# Broken in a module code.py imports at its top, before build(): only a watchdog armed first restarts the chip.
BROKEN_AT_IMPORT = {"core/bus.py": 'raise RuntimeError("0.3.0 is broken at boot")\n'}


@pytest.fixture
def ntp():
    """The firmware's clock at midday: no nightly check (autoOta is on by default) installs the offered update on
    its own while a test drives the update through the API (ota_powercut.midday_ntp)."""
    server, stop = ota_powercut.midday_ntp(SPEED)
    yield server
    stop()


@pytest.fixture
def pub(tmp_path):
    d = tmp_path / "pub"
    d.mkdir()
    server = UpdateServer(str(d))
    yield str(d), server
    server.close()


def aio(host, coro_fn):
    async def go():
        async with Wattwaechter(host.url.split("//")[1]) as c:
            return await coro_fn(c)
    return asyncio.run(go())


def check_data(host):
    status, body, _h = host.get("/api/v1/ota/check")
    assert status == 200
    return body["data"]


def start_host(tmp_path, server, ntp, **settings):
    doc = {"device_name": "Keller", "ota": {"url": server.url}}
    doc.update(settings)
    h = HostProcess(tmp_path / "drive", args=["--app-on-drive", "--speed", str(SPEED), "--ntp", ntp,
                                              "--ota-pubkey", pubkey_file(str(tmp_path))], settings=doc)
    return h.start()


def running_version(host):
    """The version /system/alive reports, or None while the firmware restarts."""
    try:
        status, body, _h = host.get("/api/v1/system/alive", timeout=2)
    except OSError:
        return None
    return body["version"] if status == 200 else None


def wait_update_offered(host, version):
    return host.wait_for(lambda: (lambda d: d if d["update_available"] and d["version"] == version
                                  and d["state"] == "idle" else None)(check_data(host)), timeout=60)


def test_update_through_the_api_keeps_settings_and_history(tmp_path, pub, ntp):
    folder, server = pub
    make_release(folder, "0.2.0", changes={"services/ota/added_in_020.py": '"""New in 0.2.0."""\n'})
    h = start_host(tmp_path, server, ntp)
    try:
        assert h.get("/api/v1/system/alive")[1]["version"] == "0.1.0"
        wait_update_offered(h, "0.2.0")
        ota = aio(h, lambda c: c.ota_check())
        assert ota.ok and ota.data.update_available and ota.data.version == "0.2.0" and ota.data.tag == "v0.2.0"
        assert ota.data.release_note_de == "Neue Version" and ota.data.release_date == "2026-11-30"
        # history recorded before the update
        day = time.strftime("%Y-%m-%d")
        assert aio(h, lambda c: c.ota_start()) is True
        h.wait_for(lambda: "restarting the firmware" in h.log(), timeout=60)
        h.wait_alive()
        h.wait_for(lambda: running_version(h) == "0.2.0", timeout=60)
        assert os.path.exists(os.path.join(h.state, "services/ota/added_in_020.py"))
        d = h.wait_for(lambda: (lambda d: d if d["state"] == "idle" else None)(check_data(h)), timeout=60)
        assert "Updated from 0.1.0 to 0.2.0" in d["message"] and d["installed_version"] == "0.2.0"
        assert not os.path.exists(os.path.join(h.state, "ota/journal"))
        assert h.get("/api/v1/settings")[1]["device_name"] == "Keller"
        assert os.path.getsize(os.path.join(h.state, "history", "history.bin")) > 0
        assert h.get("/api/v1/history/highRes?date=" + day)[0] == 200
        assert "boot.py" not in os.listdir(os.path.join(h.state, "ota")) if os.path.exists(
            os.path.join(h.state, "ota")) else True
    finally:
        h.stop()


@pytest.mark.parametrize("broken", [BROKEN, BROKEN_AT_IMPORT], ids=["in-build", "at-import"])
def test_a_version_that_crashes_at_boot_is_rolled_back(tmp_path, pub, ntp, broken):
    folder, server = pub
    make_release(folder, "0.3.0", changes=broken)
    h = start_host(tmp_path, server, ntp)
    try:
        wait_update_offered(h, "0.3.0")
        assert h.post("/api/v1/ota/start", {})[1]["ok"] is True
        # three crashing boots, each restarted by the watchdog, then boot.py restores 0.1.0
        h.wait_for(lambda: h.log().count("watchdog: restarting the firmware after a crash") >= 3, timeout=120)
        h.wait_alive()
        assert h.get("/api/v1/system/alive")[1]["version"] == "0.1.0"
        d = check_data(h)
        assert d["rolled_back"] == ["0.3.0"] and "rolled back" in d["message"] and d["error"] == "rolled_back"
        assert "0.3.0 is broken at boot" in h.log()
        for path in broken:
            with open(os.path.join(h.state, path)) as f:
                assert "broken" not in f.read()
        assert h.get("/api/v1/settings")[1]["device_name"] == "Keller"
    finally:
        h.stop()


# Hangs inside build() (the metering feature's import): no exception ends code.py, only the watchdog can reset it.
HANGS_AT_START = {"services/metering/pipeline.py": 'import time\nwhile True:\n    time.sleep(0.05)\n'}


def test_a_version_that_hangs_at_start_is_reset_and_rolled_back(tmp_path, pub, ntp):
    """code.py feeds the watchdog between features, so a start that really hangs in one still resets the chip."""
    folder, server = pub
    make_release(folder, "0.3.0", changes=HANGS_AT_START)
    h = start_host(tmp_path, server, ntp)
    try:
        h.control("watchdog_s", "4")       # the device's 30 s, shortened so three hung boots take seconds
        wait_update_offered(h, "0.3.0")
        assert h.post("/api/v1/ota/start", {})[1]["ok"] is True
        h.wait_for(lambda: h.log().count("watchdog: restarting the firmware after a hang") >= 3, timeout=120)
        h.wait_alive()
        assert h.get("/api/v1/system/alive")[1]["version"] == "0.1.0"
        d = check_data(h)
        assert d["rolled_back"] == ["0.3.0"] and d["error"] == "rolled_back"
        live, shipped = (os.path.join(d, "services/metering/pipeline.py") for d in (h.state, "."))
        with open(live) as f, open(shipped) as g:
            assert f.read() == g.read()
        assert "watchdog expired (not fed for 4.0 s)" in h.log()
    finally:
        h.stop()


def test_a_corrupted_download_changes_nothing_and_says_why(tmp_path, pub, ntp):
    folder, server = pub
    make_release(folder, "0.2.0")
    server.faults["0.2.0/core/version.py"] = "corrupt"
    h = start_host(tmp_path, server, ntp)
    try:
        wait_update_offered(h, "0.2.0")
        assert h.post("/api/v1/ota/start", {})[1]["ok"] is True
        d = h.wait_for(lambda: (lambda d: d if d["error"] else None)(check_data(h)), timeout=60)
        assert d["error"] == "corrupted" and "core/version.py" in d["message"] and "retrying" in d["message"]
        assert "ota: download of core/version.py" in h.log()
        assert h.get("/api/v1/system/alive")[1]["version"] == "0.1.0"
        assert not os.path.exists(os.path.join(h.state, "ota/journal"))
    finally:
        h.stop()


def test_a_full_drive_changes_nothing_and_says_why(tmp_path, pub, ntp):
    folder, server = pub
    make_release(folder, "0.2.0")
    h = start_host(tmp_path, server, ntp)
    try:
        h.control("drive_free_bytes", 1000)
        wait_update_offered(h, "0.2.0")
        assert h.post("/api/v1/ota/start", {})[1]["ok"] is True
        d = h.wait_for(lambda: (lambda d: d if d["error"] else None)(check_data(h)), timeout=60)
        assert d["error"] == "drive_full" and "space" in d["message"]
        assert h.get("/api/v1/system/alive")[1]["version"] == "0.1.0"
    finally:
        h.stop()


def test_nightly_check_installs_with_auto_ota(tmp_path, pub):
    """At --speed 1800 a simulated night passes in seconds; the random minute comes, autoOta installs."""
    folder, server = pub
    make_release(folder, "0.2.0")
    doc = {"ota": {"url": server.url}, "autoOta": True}
    h = HostProcess(tmp_path / "drive", args=["--app-on-drive", "--speed", "1800", "--ota-pubkey",
                                              pubkey_file(str(tmp_path))], settings=doc).start()
    try:
        h.wait_for(lambda: "ota: nightly check (autoOta on)" in h.log(), timeout=120)
        h.wait_for(lambda: running_version(h) == "0.2.0", timeout=120)
    finally:
        h.stop()


def test_sigkill_during_the_update_never_bricks_the_drive():
    stats = ota_powercut.run(3, seed=int(os.environ.get("OTA_CUT_SEED", "7")), log=lambda *a: None)
    assert sum(stats.values()) == 3


def test_a_drive_cut_in_the_middle_of_the_switch_boots(tmp_path):
    """Found by the soak: meter/crc.py moved to ota/prev, its new copy still staged. boot.py must finish the switch
    before anything imports the application (the runtime's own meter decoder included)."""
    import shutil

    from tests.ota_server import ROOT

    drive = tmp_path / "drive"
    for entry in ("boot.py", "code.py"):
        os.makedirs(drive, exist_ok=True)
        shutil.copy(os.path.join(ROOT, entry), drive / entry)
    for folder in ("core", "drivers", "meter", "services"):
        shutil.copytree(os.path.join(ROOT, folder), drive / folder, ignore=shutil.ignore_patterns("__pycache__"))
    new_crc = (drive / "meter/crc.py").read_text() + "# new\n"
    os.makedirs(drive / "ota/stage/meter")
    os.makedirs(drive / "ota/prev/meter")
    (drive / "ota/stage/meter/crc.py").write_text(new_crc)
    os.rename(drive / "meter/crc.py", drive / "ota/prev/meter/crc.py")
    (drive / "ota/journal").write_text(json.dumps({"phase": "switch", "from": "0.1.0", "to": "0.1.0",
                                                   "files": ["meter/crc.py"], "new": []}))
    h = HostProcess(drive, args=["--app-on-drive", "--speed", str(SPEED)]).start()
    try:
        assert (drive / "meter/crc.py").read_text() == new_crc
        assert json.loads((drive / "ota/journal").read_text())["phase"] == "trial"
    finally:
        h.stop()


def test_an_unsigned_release_is_refused_by_the_firmware(tmp_path, pub, ntp):
    """The whole firmware: ota/check says why in words with "signature"; ota/start installs nothing."""
    folder, server = pub
    make_release(folder, "0.2.0", key=None)
    h = start_host(tmp_path, server, ntp)
    try:
        d = h.wait_for(lambda: (lambda d: d if d["error"] else None)(check_data(h)), timeout=90)
        assert d["error"] == "signature" and "signature" in d["message"] and d["update_available"] is False
        assert h.post("/api/v1/ota/start", {})[1]["ok"] is False
        assert "ota: update check: no signature" in h.log()
        assert [r for r in server.requests if not r.startswith("manifest.json")] == []
        assert h.get("/api/v1/system/alive")[1]["version"] == "0.1.0"
    finally:
        h.stop()


def test_a_release_uploaded_as_a_file_installs(tmp_path, pub, ntp):
    """POST /api/v1/ota/upload in 8 KB pieces (tools.ota_manifest --archive's file) on the whole firmware."""
    from tests.hostproc import http_request
    from tools.ota_manifest import make_archive

    folder, server = pub
    make_release(folder, "0.2.0", changes={"services/ota/added_in_020.py": '"""New in 0.2.0."""\n'})
    with open(os.path.join(folder, "manifest.json"), "rb") as f:
        manifest = f.read()
    with open(os.path.join(folder, "manifest.json.sig")) as f:
        make_archive(str(tmp_path / "r.tar"), os.path.join(folder, "0.2.0"), manifest, f.read())
    data = (tmp_path / "r.tar").read_bytes()
    # speed 1: the upload's 60 s idle limit is device time, and at --speed 60 one real second is a minute
    h = HostProcess(tmp_path / "drive", args=["--app-on-drive", "--speed", "1", "--ntp", ntp, "--ota-pubkey",
                                              pubkey_file(str(tmp_path))], settings={"ota": {"url": ""}}).start()
    try:
        offset, answer = 0, {}
        while not answer.get("done"):
            status, body, _h = http_request(h.url + "/api/v1/ota/upload?offset=%d" % offset,
                                            data=data[offset:offset + 8192], method="POST",
                                            headers={"Content-Type": "application/octet-stream"}, timeout=10)
            answer = json.loads(body)
            assert status in (200, 409), answer
            if status == 409:   # the signature is being checked (or the service is busy): send again from there
                h.wait_for(lambda: check_data(h)["state"] in ("uploading", "idle"), timeout=30)
            offset = answer["received"]
        h.wait_for(lambda: "restarting the firmware" in h.log(), timeout=60)
        h.wait_alive()
        h.wait_for(lambda: running_version(h) == "0.2.0", timeout=60)
        assert os.path.exists(os.path.join(h.state, "services/ota/added_in_020.py"))
        assert server.requests == []
    finally:
        h.stop()
