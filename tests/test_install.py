"""python -m tools.install DRIVE: a folder standing in for the CIRCUITPY drive. A new drive gets the release; an
upgrade from the previous release keeps every byte of the owner's data (made by the running firmware: settings,
tokens, the MQTT CA, history, logs) and the owner's own update keys; what is not a CircuitPython 10 ESP32-S3 drive,
and a drive too small, are refused before anything is written; --dry-run writes nothing."""

import hashlib
import json
import os
import subprocess
import sys
import zipfile

import pytest

from tests.test_release import PROJECT_KEY, build, drive_zip, source_copy, tree, write_key
from tools import install as ins

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BOOT_OUT = ("Adafruit CircuitPython 10.0.3 on 2025-10-17; ESP32-S3-DevKitC-1-N8R8 with ESP32S3\n"
            "Board ID:espressif_esp32s3_devkitc_1_n8r8\nUID:C7FD1A2B3C4D\n")
ADDED = "services/ota/added_in_020.py"


@pytest.fixture(scope="module")
def zips(tmp_path_factory):
    """The drive images of this repository (0.1.0) and of a next release 0.2.0 (one module more), as .py."""
    tmp = tmp_path_factory.mktemp("zips")
    old = drive_zip(build(ROOT, str(tmp / "d1")))
    src = source_copy(str(tmp / "src"), "0.2.0", changes={ADDED: '"""New in 0.2.0."""\n'})
    new = drive_zip(build(src, str(tmp / "d2")))
    return old, new


def new_drive(path, boot_out=BOOT_OUT):
    os.makedirs(path, exist_ok=True)
    if boot_out is not None:
        with open(os.path.join(path, "boot_out.txt"), "w") as f:
            f.write(boot_out)
    return str(path)


def run_install(*args):
    return subprocess.run([sys.executable, "-m", "tools.install", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


def zip_files(path):
    with zipfile.ZipFile(path) as z:
        return {n: z.read(n) for n in z.namelist()}


def test_a_new_drive_gets_the_release_and_a_dry_run_writes_nothing(tmp_path, zips):
    old, _new = zips
    drive = new_drive(tmp_path / "CIRCUITPY")
    with open(os.path.join(drive, "code.py"), "w") as f:
        f.write('print("Hello World!")\n')                   # what a fresh CircuitPython drive holds
    before = tree(drive)
    r = run_install(drive, "--zip", old, "--dry-run")
    assert r.returncode == 0, r.stderr
    assert "replace code.py" in r.stdout and "new     core/version.py" in r.stdout and "nothing written" in r.stdout
    assert tree(drive) == before
    r = run_install(drive, "--zip", old)
    assert r.returncode == 0, r.stderr
    files = tree(drive)
    for name, data in zip_files(old).items():
        assert files[name] == data, name
    assert set(files) == set(zip_files(old)) | {"boot_out.txt"}
    with open(os.path.join(drive, "ota_keys.txt")) as f:
        assert PROJECT_KEY in f.read()
    # again: nothing to do
    r = run_install(drive, "--zip", old)
    assert r.returncode == 0 and "done: 0 files written, 0 removed" in r.stdout, r.stdout


@pytest.mark.parametrize("boot_out, words", [
    (None, "no boot_out.txt: not a CIRCUITPY drive"),
    ("Adafruit CircuitPython 9.2.1 on 2024-11-20; ESP32-S3-DevKitC-1-N8R8 with ESP32S3\n",
     "runs CircuitPython 9.2.1 on ESP32-S3-DevKitC-1-N8R8: Meter Plus needs CircuitPython 10.x"),
    ("Adafruit CircuitPython 10.0.3 on 2025-10-17; Raspberry Pi Pico with rp2040\n",
     "is a Raspberry Pi Pico with rp2040: Meter Plus runs on ESP32-S3 boards only"),
    ("MicroPython v1.24.1 on 2024-11-29; Generic ESP32S3 module with ESP32S3\n",
     "does not read like CircuitPython's"),
], ids=["no-boot_out", "circuitpython-9", "rp2040", "micropython"])
def test_what_is_not_a_circuitpython_10_esp32s3_drive_is_refused_in_plain_words(tmp_path, zips, boot_out, words):
    drive = new_drive(tmp_path / "USBSTICK", boot_out)
    with open(os.path.join(drive, "holiday.jpg"), "wb") as f:
        f.write(b"\xff\xd8 a photo")
    before = tree(drive)
    r = run_install(drive, "--zip", zips[0])
    assert r.returncode == 1 and words in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and tree(drive) == before
    r = run_install(str(tmp_path / "not-there"), "--zip", zips[0])
    assert r.returncode == 1 and "is not a folder" in r.stderr


def test_a_drive_too_small_is_refused_before_anything_is_written(tmp_path, zips, monkeypatch):
    drive = new_drive(tmp_path / "CIRCUITPY")
    with open(os.path.join(drive, "settings.json"), "w") as f:
        f.write('{"device_name": "Keller"}')
    before = tree(drive)
    needed = ins.needed_bytes(drive, ins.plan(drive, zips[0]), 4096)
    monkeypatch.setattr(ins, "free_bytes", lambda d: (needed - 4096, 4096))
    with pytest.raises(ins.InstallError) as e:
        ins.install(drive, zips[0], out=lambda line: None)
    assert "KB free" in str(e.value) and "nothing was written" in str(e.value)
    assert tree(drive) == before
    monkeypatch.setattr(ins, "free_bytes", lambda d: (needed, 4096))          # exactly enough: installs
    ins.install(drive, zips[0], out=lambda line: None)
    assert os.path.exists(os.path.join(drive, "code.py"))


def test_a_drive_the_firmware_keeps_read_only_is_refused_with_what_to_do(tmp_path, zips, monkeypatch):
    drive = new_drive(tmp_path / "CIRCUITPY")
    before = tree(drive)
    real = os.access
    monkeypatch.setattr(ins.os, "access", lambda p, mode: False if p == drive else real(p, mode))
    with pytest.raises(ins.InstallError) as e:
        ins.install(drive, zips[0], out=lambda line: None)
    assert "read-only" in str(e.value) and "BOOT" in str(e.value)
    assert tree(drive) == before


def _owner_files(drive):
    """{path: sha256} of every file on the drive that is not the release's own."""
    out = {}
    for rel, data in tree(drive).items():
        rel = rel.replace(os.sep, "/")
        top = rel.split("/")[0]
        if rel in ("code.py", "boot.py", "ota_keys.txt", "meterplus_release.json") or top in ins.APP_FOLDERS:
            continue
        if top == "lib" and rel.split("/")[1].split(".")[0] in ("adafruit_ticks", "adafruit_httpserver",
                                                                "adafruit_minimqtt", "adafruit_connection_manager",
                                                                "neopixel", "adafruit_ble"):
            continue
        out[rel] = hashlib.sha256(data).hexdigest()
    return out


@pytest.mark.slow
def test_an_upgrade_keeps_every_byte_of_the_owners_data_and_keys(tmp_path, zips):
    from tests.hostproc import HostProcess
    from tests.mqtt_peers import make_ca

    old, new = zips
    drive = new_drive(tmp_path / "CIRCUITPY")
    assert run_install(drive, "--zip", old).returncode == 0
    # the owner's data, made by the firmware itself on this drive
    h = HostProcess(drive, args=["--app-on-drive", "--speed", "900"], settings={"device_name": "Keller"}).start()
    try:
        assert h.get("/api/v1/system/alive")[1]["version"] == "0.1.0"
        status, body, _ = h.post("/api/v1/auth/tokens/generate", {})
        assert status == 200, body
        status, body, _ = h.post("/api/v1/auth/tokens/confirm", {"new_write_token": body["pending"]["token_write"]})
        assert status == 200, body
        with open(make_ca(str(tmp_path / "ca"))["ca.crt"]) as f:
            pem = f.read()
        status, body, _ = h.post("/api/v1/mqtt/ca", {"certificate": pem})
        assert status == 200, body
        h.wait_for(lambda: os.path.exists(os.path.join(drive, "history", "history.bin")), timeout=60)
    finally:
        assert h.stop() == 0
    from core.durable_file import stored

    for name in ("settings.json", "tokens.json", "mqtt_ca.pem"):       # in the durable store's own files
        assert stored(os.path.join(drive, name)), name
    for name in ("history/history.bin", "logs/log.csv"):
        assert os.path.exists(os.path.join(drive, name)), name
    # and by the owner over USB: WiFi in settings.toml, an own library, a note, an own update key, OTA's memory
    _key, own = write_key(str(tmp_path / "own"))
    with open(os.path.join(drive, "settings.toml")) as f:
        toml = f.read()
    with open(os.path.join(drive, "settings.toml"), "w") as f:
        f.write(toml.replace('CIRCUITPY_WIFI_SSID = ""', 'CIRCUITPY_WIFI_SSID = "Keller-WLAN"'))
    os.makedirs(os.path.join(drive, "lib"), exist_ok=True)
    for rel, text in (("lib/my_sensor.py", "X = 1\n"), ("notes.txt", "meter in the cellar\n"),
                      ("ota/bad", '["0.1.5"]'), ("ota/floor", "0.1.0")):
        os.makedirs(os.path.dirname(os.path.join(drive, rel)) or drive, exist_ok=True)
        with open(os.path.join(drive, rel), "w") as f:
            f.write(text)
    with open(os.path.join(drive, "ota_keys.txt"), "a") as f:
        f.write("# my own builds\n%s\n" % own)
    # left by an update over the network that was under way, and a module an older update put beside the release
    for rel in ("ota/journal", "ota/prev/core/bus.py", "core/from_an_update.py"):
        os.makedirs(os.path.dirname(os.path.join(drive, rel)), exist_ok=True)
        with open(os.path.join(drive, rel), "w") as f:
            f.write("{}")
    owner = _owner_files(drive)
    owner.pop("ota/journal")
    owner.pop("ota/prev/core/bus.py")
    r = run_install(drive, "--zip", new, "--dry-run")
    assert r.returncode == 0 and "remove  core/from_an_update.py" in r.stdout and "1 of yours" in r.stdout, r.stdout
    r = run_install(drive, "--zip", new)
    assert r.returncode == 0, r.stderr
    assert _owner_files(drive) == owner                       # every byte of the owner's data
    files = tree(drive)
    for name, data in zip_files(new).items():
        if name not in ("settings.toml", "ota_keys.txt"):
            assert files[name] == data, name
    assert ADDED in files and "core/from_an_update.py" not in files
    assert not [f for f in files if f.startswith(("ota/prev", "ota/journal"))]
    with open(os.path.join(drive, "ota_keys.txt")) as f:
        keys = [line.split("#")[0].strip() for line in f if len(line.split("#")[0].strip()) == 64]
    assert keys == [PROJECT_KEY, own]
    # the upgraded drive runs 0.2.0 with the owner's settings
    h = HostProcess(drive, args=["--app-on-drive", "--speed", "900"]).start()
    try:
        assert h.get("/api/v1/system/alive")[1]["version"] == "0.2.0"
        assert h.get("/api/v1/settings")[1]["device_name"] == "Keller"
    finally:
        h.stop()


def test_switching_between_py_and_mpy_never_leaves_a_stale_module_that_shadows_the_new_one(tmp_path, zips):
    old, _new = zips
    drive = new_drive(tmp_path / "CIRCUITPY")
    # an .mpy drive (a previous release) with a library the owner installed with circup as .mpy
    previous = ("core/bus.mpy", "lib/adafruit_ticks.mpy", "lib/adafruit_httpserver/server.mpy")
    for rel in previous + ("lib/other.mpy",):
        os.makedirs(os.path.dirname(os.path.join(drive, rel)), exist_ok=True)
        with open(os.path.join(drive, rel), "wb") as f:
            f.write(b"C\x06")
    with open(os.path.join(drive, "meterplus_release.json"), "w") as f:
        json.dump({"version": "0.0.9", "code": "mpy", "keys": [PROJECT_KEY], "files": list(previous)}, f)
    r = run_install(drive, "--zip", old)
    assert r.returncode == 0, r.stderr
    files = tree(drive)
    assert "core/bus.mpy" not in files and "lib/adafruit_ticks.mpy" not in files
    assert "lib/adafruit_httpserver/server.mpy" not in files and "lib/adafruit_httpserver/server.py" in files
    assert "lib/other.mpy" in files                           # not the release's: the owner's


def test_make_install_builds_the_release_and_installs_it(tmp_path):
    drive = new_drive(tmp_path / "CIRCUITPY")
    r = subprocess.run(["make", "-s", "install"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 2 and "make install DRIVE=" in r.stdout + r.stderr
    r = subprocess.run(["make", "-s", "install", "DRIVE=" + drive, "ARGS=--dry-run"], cwd=ROOT, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Would install Meter Plus 0.1.0" in r.stdout and "new     code.py" in r.stdout
    assert sorted(os.listdir(drive)) == ["boot_out.txt"]
    r = subprocess.run(["make", "-s", "install", "DRIVE=" + drive], cwd=ROOT, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert os.path.exists(os.path.join(drive, "code.py")) and os.path.exists(os.path.join(drive, "lib"))


def test_a_drive_with_another_projects_folders_is_refused_unless_asked(tmp_path, zips):
    drive = new_drive(tmp_path / "CIRCUITPY")
    os.makedirs(os.path.join(drive, "core"))
    with open(os.path.join(drive, "core", "robot.py"), "w") as f:
        f.write("ARM = 1\n")
    before = tree(drive)
    r = run_install(drive, "--zip", zips[0])
    assert r.returncode == 1 and "core/robot.py" in r.stderr and "--replace-folders" in r.stderr, r.stderr
    assert tree(drive) == before
    r = run_install(drive, "--zip", zips[0], "--replace-folders")
    assert r.returncode == 0, r.stderr
    assert not os.path.exists(os.path.join(drive, "core", "robot.py"))


def snapshot(folder):
    """{relative path: ("link", target) | ("file", bytes) | ("other",)} without following any link or opening a
    FIFO: what tree() would read through."""
    out = {}
    for root, dirs, names in os.walk(folder):
        for n in dirs + names:
            full = os.path.join(root, n)
            rel = os.path.relpath(full, folder)
            if os.path.islink(full):
                out[rel] = ("link", os.readlink(full))
            elif os.path.isfile(full) and not os.path.isdir(full):
                with open(full, "rb") as f:
                    out[rel] = ("file", f.read())
            elif not os.path.isdir(full):
                out[rel] = ("other",)
    return out


def _installed_drive(tmp_path, zips):
    """A drive with the release on it, and a folder outside it holding the owner's precious files."""
    drive = new_drive(tmp_path / "CIRCUITPY")
    assert run_install(drive, "--zip", zips[0]).returncode == 0
    outside = tmp_path / "home"
    outside.mkdir()
    (outside / "precious.py").write_text("the owner's own work, not on the drive\n")
    (outside / "victim.txt").write_text("a file outside the drive\n")
    return drive, outside


@pytest.mark.parametrize("where", ["folder", "file", "boot_out"])
def test_a_symbolic_link_on_the_drive_is_refused_and_nothing_outside_it_is_touched(tmp_path, zips, where):
    """Issue 36 point 7: the install followed links on the target: services/ -> a folder outside the drive lost a
    file ("your files were not touched"), code.py -> a file outside was overwritten. A CIRCUITPY drive (FAT) holds
    no links: one anywhere is refused before anything is read through it or written."""
    drive, outside = _installed_drive(tmp_path, zips)
    if where == "folder":
        import shutil

        shutil.rmtree(os.path.join(drive, "services"))
        os.symlink(str(outside), os.path.join(drive, "services"))
    elif where == "file":
        os.remove(os.path.join(drive, "code.py"))
        os.symlink(str(outside / "victim.txt"), os.path.join(drive, "code.py"))
    else:
        (outside / "boot_out.txt").write_text(BOOT_OUT)
        os.remove(os.path.join(drive, "boot_out.txt"))
        os.symlink(str(outside / "boot_out.txt"), os.path.join(drive, "boot_out.txt"))
    before, away = snapshot(drive), snapshot(str(outside))
    for args in (("--dry-run",), ()):
        r = run_install(drive, "--zip", zips[1], *args)
        assert r.returncode == 1 and "symbolic link" in r.stderr and "nothing was written" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr
        assert snapshot(drive) == before and snapshot(str(outside)) == away


def test_a_special_file_on_the_drive_is_refused_not_read(tmp_path, zips):
    """A FIFO where code.py should be: reading it would wait for ever. FAT has none: refused at once."""
    drive, _outside = _installed_drive(tmp_path, zips)
    os.remove(os.path.join(drive, "code.py"))
    os.mkfifo(os.path.join(drive, "code.py"))
    r = subprocess.run([sys.executable, "-m", "tools.install", drive, "--zip", zips[1]], cwd=ROOT, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 1 and "code.py (not a file)" in r.stderr, r.stderr


def test_a_link_made_after_the_check_is_not_followed_either(tmp_path, zips, monkeypatch):
    """A link that appears between the check and the writing (the drive is the computer's, anything may write to
    it): every path is checked again just before it is removed or written, and the install stops there."""
    import shutil

    drive, outside = _installed_drive(tmp_path, zips)
    with open(os.path.join(drive, "services", "precious.py"), "w") as f:
        f.write("stale module the install would remove\n")
    real_plan = ins.plan

    def plan_then_link(*a, **kw):
        p = real_plan(*a, **kw)
        assert "services/precious.py" in p.removes
        shutil.rmtree(os.path.join(drive, "services"))
        os.symlink(str(outside), os.path.join(drive, "services"))
        return p

    monkeypatch.setattr(ins, "plan", plan_then_link)
    away = snapshot(str(outside))
    with pytest.raises(ins.InstallError) as e:
        ins.install(drive, zips[1], out=lambda line: None)
    assert "is a symbolic link now" in str(e.value) and "followed nothing" in str(e.value)
    assert snapshot(str(outside)) == away


def test_the_board_is_named_as_boot_out_txt_claims_it_and_the_output_says_it_is_unchecked(tmp_path, zips):
    """boot_out.txt can say anything (a copy from another board): nothing else on a CIRCUITPY drive says which chip
    it belongs to, so the install says whose word the board is instead of pretending to have checked it."""
    liar = BOOT_OUT.replace("ESP32-S3-DevKitC-1-N8R8", "Raspberry Pi Pico")   # an RP2040 drive, edited
    drive = new_drive(tmp_path / "CIRCUITPY", liar)
    r = run_install(drive, "--zip", zips[0], "--dry-run")
    assert r.returncode == 0, r.stderr
    assert ("CircuitPython 10.0.3 on Raspberry Pi Pico is what boot_out.txt says: a file on the drive, which this "
            "tool cannot check against the board itself") in r.stdout
