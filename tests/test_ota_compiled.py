"""The OTA service's choice between an update's compiled form (.mpy) and its source form (.py), against a real local
HTTP server: the compiled form where the drive's boot.py switches twins and the interpreter imports that .mpy
version, else the source form with the reason; the twins set aside and brought back (docs/ota.md, "Twins").

The .mpy files here are stand-ins (CPython imports none): what is tested is what is staged, journaled, switched and
rolled back. The device bench starts a drive with the real compiled update (bench/bench_device.py overlay_update)."""

import hashlib
import json
import os
import types

import pytest

from services.ota import manifest as mf
from tests.ota_server import write_manifest
from tests import test_ota_service as base
from tests.test_ota_service import BOOT, run, tree

env = base.env   # the fixture: a drive with this repository's sources, release 0.2.0 on a local server

pytestmark = pytest.mark.alone

OLD_BOOT = types.SimpleNamespace(**{k: v for k, v in vars(BOOT).items() if k != "SWITCH_VERSION"})


def compiled_form(e, mpy=6, tamper=False):
    """Beside the test release 0.2.0: its compiled form (every package .py as a stand-in .mpy), manifest-mpy.json
    (format 2), named by the signed manifest.json (format 1, re-signed)."""
    with open(os.path.join(e.pub, "manifest.json")) as f:
        source = json.load(f)
    files = []
    for entry in source["files"]:
        path = entry["path"]
        if mf.twin(path) is not None and path.endswith(".py"):
            with open(os.path.join(e.pub, "0.2.0", path), "rb") as f:
                data = b"C\x06\x00\x1f" + f.read()
            path = mf.twin(path)
            with open(os.path.join(e.pub, "0.2.0", path), "wb") as f:
                f.write(data)
            entry = {"path": path, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        files.append(entry)
    doc = dict(source, format=2, files=files, mpy={"version": mpy, "compiler": "CircuitPython 10.2.1"})
    data = json.dumps(doc).encode()
    with open(os.path.join(e.pub, "manifest-mpy.json"), "wb") as f:
        f.write(data + (b" " if tamper else b""))
    source["mpy"] = {"version": mpy, "manifest": "manifest-mpy.json", "size": len(data),
                     "sha256": hashlib.sha256(data).hexdigest()}
    write_manifest(e.pub, source)
    return doc


def check(e, mpy_version=6, boot=None):
    if boot is not None:
        e.svc._boot = boot
    e.svc.start()
    e.svc.mpy_version = mpy_version      # what sys.implementation._mpy says on the device (CPython: None)
    run(e, lambda: e.svc.phase == "idle" and e.svc._checked_at is not None and e.svc._req is None
        and e.svc.server_version)
    return e.svc.check_result(e.now)["data"]


def install(e):
    assert e.svc.start_update()["ok"]
    run(e, lambda: e.calls and e.calls[-1][0] == "restart")
    with open("ota/journal") as f:
        return json.load(f)


def package_files(folder, ext):
    return sorted(p for p in tree(folder) if mf.twin(p) is not None and p.endswith(ext))


def test_a_device_that_can_takes_the_compiled_form_and_sets_the_source_aside(env):
    e = env
    compiled_form(e)
    d = check(e)
    assert d["update_available"] and d["message"] == "Version 0.2.0 is available"
    assert e.svc.available["format"] == 2 and e.svc.available["source"].endswith("/manifest-mpy.json")
    journal = install(e)
    sources = package_files(e.drive, ".py")
    assert sorted(journal["gone"]) == sources            # every live .py would win over its new .mpy
    assert sorted(journal["new"]) == sorted([mf.twin(p) for p in sources] + ["core/a_new_module.mpy",
                                                                              "services/ota/added_in_020.mpy"])
    assert BOOT.update_step(BOOT.DriveFs()) == "switch"
    assert package_files(e.drive, ".py") == []            # nothing shadows the compiled modules
    assert tree(e.drive) == {p: h for p, h in tree(os.path.join(e.pub, "0.2.0")).items()
                             if not (p.endswith(".py") and mf.twin(p))}
    for _ in range(3):                                   # a version that never proves itself
        BOOT.update_step(BOOT.DriveFs())
    assert tree(e.drive) == e.before                      # the sources are back, every .mpy it wrote is gone
    assert not os.path.exists("ota/journal")


@pytest.mark.parametrize("mpy_version,boot,why", [
    (6, OLD_BOOT, "this drive's boot.py cannot set a module's .py aside for its .mpy (install boot.py over USB: "
                  "python -m tools.install)"),
    (5, None, "its .mpy files are version 6, this CircuitPython imports version 5"),
    (None, None, "this interpreter imports no CircuitPython .mpy files"),
])
def test_a_device_that_cannot_takes_the_source_form_and_says_why(env, mpy_version, boot, why):
    e = env
    compiled_form(e)
    d = check(e, mpy_version, boot)
    assert d["update_available"] and d["message"] == "Version 0.2.0 is available (as source: %s)" % why
    assert e.svc.available["format"] == 1
    journal = install(e)
    assert not [p for p in journal["files"] if p.endswith(".mpy")] and journal["gone"] == []


def test_a_compiled_manifest_that_differs_from_the_signed_pin_falls_back_to_the_source_form(env):
    e = env
    compiled_form(e, tamper=True)
    d = check(e)
    assert e.svc.available["format"] == 1
    assert "(as source: its compiled form could not be used (" in d["message"] and "manifest-mpy.json" in d["message"]


def test_a_source_update_over_a_compiled_drive_sets_the_stale_mpy_aside(env):
    """A drive whose packages are .mpy (the drive image) takes a source update: each .mpy of a module it ships goes
    aside (stale code beside a .py that wins), an .mpy of a module it no longer ships stays (nothing imports it)."""
    e = env
    for p in ("core/bus.mpy", "core/gone_in_020.mpy"):
        with open(p, "wb") as f:
            f.write(b"C\x06\x00\x1f old")
    before = tree(e.drive)
    check(e)
    journal = install(e)
    assert journal["gone"] == ["core/bus.mpy"] and "core/bus.py" not in journal["files"]   # unchanged, twin gone
    assert BOOT.update_step(BOOT.DriveFs()) == "switch"
    assert not os.path.exists("core/bus.mpy") and os.path.exists("core/gone_in_020.mpy")
    for _ in range(3):
        BOOT.update_step(BOOT.DriveFs())
    assert tree(e.drive) == before


def test_an_uploaded_compiled_form_is_refused_with_the_reason_where_it_cannot_be_installed(env):
    e = env
    doc = compiled_form(e)
    e.svc._boot = OLD_BOOT
    e.svc.start()
    m = mf.parse_manifest(json.dumps(doc).encode())
    assert e.svc._compiled_blocker(m["mpy"]).startswith("this drive's boot.py cannot")
