"""make release (tools/release.py): the project's release key, a signed update release the device's own code
verifies, the CIRCUITPY drive image with the pinned libraries, byte-identical builds, .py where CircuitPython's
mpy-cross is missing and .mpy (that boots on the device bench) where it is there; the version in one place."""

import glob
import hashlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from services.ota import signature as sg
from services.ota.manifest import parse_manifest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROJECT_KEY = "9ffa12cda7ef09fc44013bd845253292dd51bf29305925e0ee98acce39e8589a"
LOST_KEY = "82de35a2cb5d3990d5e82985021dd2389390c5077256d6460343d4194ed079e9"
SOURCES = ("code.py", "boot.py", "settings.toml", "ota_keys.txt", "requirements.txt", "CHANGELOG.md", "core",
           "drivers", "meter", "services", "web")


# ---- helpers shared with tests/test_install*.py and tests/test_release_*.py ---------------------------------------

def write_key(folder, key=None):
    """(private key file, public hex) of key (default: a new one) in folder, as tools.ota_keygen writes them."""
    key = key or Ed25519PrivateKey.generate()
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "release_key.pem")
    with open(path, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    pub = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()
    return path, pub


def source_copy(dest, version="0.1.0", changes=None, keys=None):
    """A copy of this repository's release sources in dest with core/version.py at version, its CHANGELOG entry,
    changes {path: text} applied, and (keys: hex list) an ota_keys.txt trusting those keys. Returns dest."""
    os.makedirs(dest, exist_ok=True)
    for name in SOURCES:
        src = os.path.join(ROOT, name)
        if os.path.isdir(src):
            shutil.copytree(src, os.path.join(dest, name), ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy(src, dest)
    with open(os.path.join(dest, "core", "version.py"), "w") as f:
        f.write('"""Firmware version."""\n\nVERSION = "%s"\n' % version)
    with open(os.path.join(dest, "CHANGELOG.md"), encoding="utf-8") as f:
        log = f.read()
    if "\n## %s (" % version not in log:
        head, _, rest = log.partition("\n## ")
        log = head + "\n## %s (2026-12-01)\n\nen: Test release %s.\nde: Testversion %s.\n\n## " % (
            version, version, version) + rest
        with open(os.path.join(dest, "CHANGELOG.md"), "w", encoding="utf-8") as f:
            f.write(log)
    if keys is not None:
        with open(os.path.join(dest, "ota_keys.txt"), "w") as f:
            f.write("# keys of this test's project\n" + "".join(k + "\n" for k in keys))
    for path, text in (changes or {}).items():
        full = os.path.join(dest, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w") as f:
            f.write(text)
    return dest


def release(*args, cwd=ROOT, env=None):
    """python -m tools.release ARGS as a subprocess (the venv's libraries, not the host stand-ins)."""
    return subprocess.run([sys.executable, "-m", "tools.release", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env=dict(os.environ, **(env or {})))


def build(src, out, *args, key=None, mpy=False):
    """Build the release of src into out (.py unless mpy); returns the release folder."""
    r = release("--src", src, "--out", out, *args, *([] if mpy else ["--py"]), *(["--key", key] if key else []))
    assert r.returncode == 0, r.stderr + r.stdout
    from tools.release import source_version

    folder = os.path.join(out, "meterplus-" + source_version(src))
    assert os.path.isdir(folder)
    return folder


def drive_zip(folder):
    (z,) = glob.glob(os.path.join(folder, "*-circuitpy.zip"))
    return z


def tree(folder):
    """{relative path: bytes} of every file under folder."""
    out = {}
    for root, _dirs, names in os.walk(folder):
        for n in names:
            full = os.path.join(root, n)
            with open(full, "rb") as f:
                out[os.path.relpath(full, folder)] = f.read()
    return out


def circuitpython_build():
    """(CircuitPython's mpy-cross, its unix-port interpreter or None): built from $CIRCUITPY_SRC by the device bench
    (once, into its cache), else what the bench left in its cache; (None, None) without either."""
    from bench import bench_device as bd
    from tools.release import find_mpy_cross

    if os.environ.get("CIRCUITPY_SRC"):
        try:
            binary = bd.build(bd.source_tree(os.environ["CIRCUITPY_SRC"]))
            return bd.mpy_cross_of(binary), binary
        except bd.Skip:
            pass
    tool = find_mpy_cross()
    if tool is None:
        return None, None
    # Only an interpreter built with today's bench variant: an older one lacks what the runner now uses (benchclock).
    for binary in sorted(glob.glob(os.path.join(bd.CACHE, "cp-unix-*-" + bd.variant_digest(), "micropython"))):
        if os.path.exists(bd.mpy_cross_of(binary)):
            return tool, binary
    return tool, None


def verified(manifest, sig, pub_hex):
    check = sg.ManifestSignatureCheck(manifest, sg.parse_signature(sig), [bytes.fromhex(pub_hex)])
    while not check.step():
        pass
    return check.ok


# ---- point 1: the project's release key ------------------------------------------------------------------------------

def test_ota_keys_trusts_exactly_the_maintainers_release_key_and_a_new_host_drive_gets_it(tmp_path):
    with open(os.path.join(ROOT, "ota_keys.txt")) as f:
        text = f.read()
    assert sg.parse_keys(text) == [bytes.fromhex(PROJECT_KEY)]
    assert LOST_KEY not in text
    # python -m host --app-on-drive without --ota-pubkey: the drive trusts the project key and nothing else
    from host.__main__ import _install_ota_keys

    _install_ota_keys(str(tmp_path), [])
    assert sg.parse_keys((tmp_path / "ota_keys.txt").read_text()) == [bytes.fromhex(PROJECT_KEY)]


# ---- point 2: make release -----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def signed(tmp_path_factory):
    """The repository's release, signed with a test key, built twice into two folders (.py)."""
    tmp = tmp_path_factory.mktemp("release")
    key, pub = write_key(str(tmp / "k"))
    a = build(ROOT, str(tmp / "a"), key=key)
    b = build(ROOT, str(tmp / "b"), key=key)
    return a, b, pub


def test_two_builds_are_byte_identical(signed):
    a, b, _pub = signed
    ta, tb = tree(os.path.dirname(a)), tree(os.path.dirname(b))
    assert ta and ta == tb
    with zipfile.ZipFile(drive_zip(a)) as z:
        infos = z.infolist()
    assert [i.filename for i in infos] == sorted(i.filename for i in infos)
    assert {i.date_time for i in infos} == {(2026, 11, 27, 0, 0, 0)}     # CHANGELOG.md's date of 0.1.0
    assert {i.external_attr >> 16 for i in infos} == {0o100644}
    with tarfile.open(glob.glob(os.path.join(a, "*-update.tar"))[0]) as t:
        assert {(m.mtime, m.uid, m.gid, m.uname, m.mode) for m in t.getmembers()} == {(1795737600, 0, 0, "", 0o644)}


def test_make_release_twice_gives_identical_bytes(tmp_path):
    key, _pub = write_key(str(tmp_path / "k"))
    outs = []
    for n in ("1", "2"):
        out = str(tmp_path / n)
        r = subprocess.run(["make", "-s", "release", "KEY=" + key, "RELEASE_ARGS=--py --out " + out], cwd=ROOT,
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stdout + r.stderr
        outs.append(tree(out))
    assert outs[0] == outs[1] and "meterplus-0.1.0/meterplus-0.1.0-circuitpy.zip" in outs[0]


def test_the_signed_release_verifies_with_the_devices_own_code(signed):
    folder, _b, pub = signed
    dist = os.path.dirname(folder)
    assert os.path.basename(folder) == "meterplus-0.1.0"
    for mpath, base in ((os.path.join(folder, "manifest.json"), "app/"),
                        (os.path.join(dist, "manifest.json"), "meterplus-0.1.0/app/")):   # the release, the channel
        with open(mpath, "rb") as f:
            data = f.read()
        with open(mpath + ".sig", "rb") as f:
            sig = f.read()
        assert verified(data, sig, pub)
        assert not verified(data, sig, PROJECT_KEY)        # signed with KEY, not with anything else
        m = parse_manifest(data)
        assert m["version"] == "0.1.0" and m["base"] == base and m["release_date"] == "2026-11-27"
        assert m["notes_en"].startswith("First release") and m["notes_de"].startswith("Erste Version")
        for path, size, sha in m["files"]:                   # every file where ota.url's folder + base says
            with open(os.path.join(os.path.dirname(mpath), base, path), "rb") as f:
                blob = f.read()
            assert len(blob) == size and hashlib.sha256(blob).hexdigest() == sha
            with open(os.path.join(ROOT, path), "rb") as f:
                assert f.read() == blob
    # the upload archive: manifest, signature, then the files (services/ota/upload.py's order)
    with open(os.path.join(folder, "manifest.json"), "rb") as f:
        manifest = f.read()
    with tarfile.open(os.path.join(folder, "meterplus-0.1.0-update.tar")) as t:
        names = t.getnames()
        assert names[:2] == ["manifest.json", "manifest.json.sig"]
        assert t.extractfile("manifest.json").read() == manifest
        assert names[2:] == [p for p, _s, _h in parse_manifest(manifest)["files"]]
    # SHA256SUMS covers the release's files
    with open(os.path.join(folder, "SHA256SUMS")) as f:
        sums = dict(reversed(line.split("  ")) for line in f.read().splitlines())
    assert set(sums) == {"manifest.json", "manifest.json.sig", "meterplus-0.1.0-update.tar",
                         "meterplus-0.1.0-circuitpy.zip"}
    for name, digest in sums.items():
        with open(os.path.join(folder, name), "rb") as f:
            assert hashlib.sha256(f.read()).hexdigest() == digest


def _pins():
    out = {}
    with open(os.path.join(ROOT, "requirements.txt")) as f:
        for line in f:
            line = line.split("#")[0].strip()
            if line:
                name, version = line.split("==")
                out[name] = version
    return out


def test_the_drive_zip_holds_the_firmware_the_pinned_libraries_the_template_and_the_keys(signed):
    folder, _b, _pub = signed
    with zipfile.ZipFile(drive_zip(folder)) as z:
        files = {n: z.read(n) for n in z.namelist()}
    for name in ("code.py", "boot.py", "settings.toml", "ota_keys.txt", "core/version.py", "web/index.html.gz"):
        with open(os.path.join(ROOT, name), "rb") as f:
            assert files[name] == f.read(), name
    assert not [n for n in files if n.split("/")[0] in ("host", "tests", "bench", "tools", "web-src", "dist")]
    assert not [n for n in files if "__pycache__" in n or n.endswith(".pyc")]
    marker = json.loads(files["meterplus_release.json"])
    assert marker["version"] == "0.1.0" and marker["code"] == "py" and "source" in marker["code_note"]
    assert marker["keys"] == [PROJECT_KEY]
    assert marker["libraries"] == _pins()
    assert sorted(marker["files"]) == sorted(files)
    # every library of requirements.txt, byte for byte the pinned distribution's files
    libs = {n.split("/")[1].rsplit(".py", 1)[0] for n in files if n.startswith("lib/")}
    assert libs == set(_pins())
    for name, version in _pins().items():
        dist = importlib.metadata.distribution(importlib.metadata.packages_distributions()[name][0])
        assert dist.version == version
        shipped = {n for n in files if n.startswith("lib/%s/" % name) or n == "lib/%s.py" % name}
        assert shipped, name
        for n in shipped:
            with open(dist.locate_file(n[4:]), "rb") as f:
                assert files[n] == f.read(), n


def test_without_key_it_builds_everything_unsigned_and_says_so_in_one_line(tmp_path):
    r = release("--out", str(tmp_path / "d"), "--py")
    assert r.returncode == 0, r.stderr
    said = [line for line in (r.stdout + r.stderr).splitlines() if "unsigned" in line.lower()]
    assert len(said) == 1 and "KEY=" in said[0]
    folder = tmp_path / "d" / "meterplus-0.1.0"
    assert (folder / "manifest.json").exists() and (folder / "meterplus-0.1.0-circuitpy.zip").exists()
    assert not list(tmp_path.rglob("*.sig"))
    with tarfile.open(folder / "meterplus-0.1.0-update.tar") as t:
        assert "manifest.json.sig" not in t.getnames()


def test_without_circuitpythons_mpy_cross_the_drive_gets_py_and_says_so(tmp_path):
    # a machine like CI's: no CircuitPython source, nothing in the device bench's cache
    r = release("--out", str(tmp_path / "d"), env={"XDG_CACHE_HOME": str(tmp_path / "cache"), "CIRCUITPY_SRC": ""})
    assert r.returncode == 0, r.stderr
    assert "drive image as .py: no CircuitPython mpy-cross here" in r.stdout
    with zipfile.ZipFile(drive_zip(str(tmp_path / "d" / "meterplus-0.1.0"))) as z:
        marker = json.loads(z.read("meterplus_release.json"))
        names = z.namelist()
    assert marker["code"] == "py" and "no CircuitPython mpy-cross" in marker["code_note"]
    assert "core/bus.py" in names and not [n for n in names if n.endswith(".mpy")]
    # the update is source only and says so: in the build's output, the signed manifest and the drive's marker
    assert "update as .py only: no CircuitPython mpy-cross at build time" in r.stdout
    folder = tmp_path / "d" / "meterplus-0.1.0"
    m = json.loads((folder / "manifest.json").read_text())
    assert m["code_note"].startswith("source only (.py): no CircuitPython mpy-cross") and "mpy" not in m
    assert marker["update"] == m["code_note"]
    assert not (folder / "manifest-mpy.json").exists() and not (folder / "meterplus-0.1.0-update-mpy.tar").exists()


def test_the_version_lives_in_core_version_py_and_needs_a_changelog_entry(tmp_path):
    r = release("0.9.0", "--out", str(tmp_path / "d"), "--py")
    assert r.returncode == 1 and "core/version.py says 0.1.0" in r.stderr and not (tmp_path / "d").exists()
    src = source_copy(str(tmp_path / "src"), "0.3.0")
    with open(os.path.join(src, "CHANGELOG.md"), encoding="utf-8") as f:
        text = f.read()
    with open(os.path.join(src, "CHANGELOG.md"), "w", encoding="utf-8") as f:
        f.write(text.replace("## 0.3.0 (", "## 0.3.1 ("))
    r = release("--src", src, "--out", str(tmp_path / "d"), "--py")
    assert r.returncode == 1 and "CHANGELOG.md has no entry for 0.3.0" in r.stderr
    # with its entry, the release carries the version /api/v1/system/alive will report
    src2 = source_copy(str(tmp_path / "src2"), "0.3.0")
    folder = build(src2, str(tmp_path / "d2"))
    with zipfile.ZipFile(drive_zip(folder)) as z:
        assert b'VERSION = "0.3.0"' in z.read("core/version.py")
        assert json.loads(z.read("meterplus_release.json"))["version"] == "0.3.0"


def test_the_channel_manifest_names_the_newest_release_built_into_the_folder(tmp_path):
    out = str(tmp_path / "dist")
    build(source_copy(str(tmp_path / "s2"), "0.2.0"), out)
    build(source_copy(str(tmp_path / "s1"), "0.1.5"), out)     # an older one built later: the channel stays
    with open(os.path.join(out, "manifest.json")) as f:
        m = json.load(f)
    assert m["version"] == "0.2.0" and m["base"] == "meterplus-0.2.0/app/"
    assert sorted(os.listdir(out)) == ["manifest.json", "meterplus-0.1.5", "meterplus-0.2.0"]


# ---- .mpy with CircuitPython's own mpy-cross (where the build has one) --------------------------------------------

def test_with_circuitpythons_mpy_cross_the_drive_gets_mpy_files_circuitpython_loads(tmp_path):
    tool, _binary = circuitpython_build()
    if tool is None:
        pytest.skip("no CircuitPython mpy-cross here (make bench-device CIRCUITPY_SRC=... builds one): the .py "
                    "drive image is what this machine makes, tested above")
    r1 = release("--out", str(tmp_path / "a"))
    r2 = release("--out", str(tmp_path / "b"))
    assert r1.returncode == 0 and r2.returncode == 0, r1.stderr + r2.stderr
    assert tree(str(tmp_path / "a")) == tree(str(tmp_path / "b"))
    with zipfile.ZipFile(drive_zip(str(tmp_path / "a" / "meterplus-0.1.0"))) as z:
        files = {n: z.read(n) for n in z.namelist()}
    marker = json.loads(files["meterplus_release.json"])
    assert marker["code"] == "mpy" and "CircuitPython 10" in marker["code_note"]
    mpys = [n for n in files if n.endswith(".mpy")]
    assert "core/bus.mpy" in mpys and "lib/adafruit_ticks.mpy" in mpys and "lib/neopixel.mpy" in mpys
    # CircuitPython's header starts with 'C' (MicroPython's with 'M', which CircuitPython refuses)
    assert {files[n][:1] for n in mpys} == {b"C"}
    assert not [n for n in files if n.endswith(".py") and n not in ("code.py", "boot.py")]
    # the update: its source form (manifest.json, format 1, what every firmware installs) names its compiled form
    # (manifest-mpy.json, format 2) by size and SHA-256; both as the device's parser reads them
    from services.ota.manifest import parse_manifest

    folder = tmp_path / "a" / "meterplus-0.1.0"
    source = parse_manifest((folder / "manifest.json").read_bytes())
    data = (folder / "manifest-mpy.json").read_bytes()
    compiled = parse_manifest(data)
    assert source["format"] == 1 and source["mpy"] == 6 and compiled["format"] == 2 and compiled["mpy"] == 6
    assert source["mpy_manifest"] == ("manifest-mpy.json", len(data), hashlib.sha256(data).hexdigest())
    channel = parse_manifest((tmp_path / "a" / "manifest.json").read_bytes())
    assert channel["mpy_manifest"][0] == "meterplus-0.1.0/manifest-mpy.json"
    paths = [p for p, _s, _h in compiled["files"]]
    assert "core/bus.mpy" in paths and "code.py" in paths and "web/index.html.gz" in paths
    assert not [p for p in paths if p.endswith(".py") and p != "code.py"]
    for path, size, sha in compiled["files"]:      # the same bytes as the drive image's, served from app/
        got = (folder / "app" / path).read_bytes()
        assert len(got) == size and hashlib.sha256(got).hexdigest() == sha and got == files[path]
    assert sorted(p for p, _s, _h in source["files"]) == sorted(source_paths(folder))
    with tarfile.open(folder / "meterplus-0.1.0-update-mpy.tar") as t:
        names = t.getnames()
        assert names[:1] == ["manifest.json"] and t.extractfile("manifest.json").read() == data
    assert names[1:] == paths               # unsigned here: no .sig member
    assert "update: compiled (.mpy v6, CircuitPython 10" in r1.stdout


def source_paths(folder):
    """The update's source form in folder/app: every file but the compiled modules."""
    out = []
    for root, _dirs, names in os.walk(os.path.join(folder, "app")):
        for n in names:
            if not n.endswith(".mpy"):
                out.append(os.path.relpath(os.path.join(root, n), os.path.join(folder, "app")).replace(os.sep, "/"))
    return out


def test_the_mpy_drive_image_boots_on_the_device_bench(tmp_path):
    from bench import bench_device as bd

    tool, binary = circuitpython_build()
    if binary is None:
        pytest.skip("no CircuitPython unix port here (make bench-device CIRCUITPY_SRC=... builds it)")
    r = release("--out", str(tmp_path / "d"))
    assert r.returncode == 0, r.stderr
    drive = tmp_path / "drive"
    with zipfile.ZipFile(drive_zip(str(tmp_path / "d" / "meterplus-0.1.0"))) as z:
        z.extractall(drive)
    bd.add_bench_tools(str(drive))   # the hardware stand-ins (C modules on the device) and the runner
    res = subprocess.run([binary, "-X", "heapsize=1024k", "runner.py", str(bd.BOOT_SECONDS), "boot"], cwd=drive,
                         capture_output=True, text=True, timeout=bd.BOOT_SECONDS + 120)
    result = [json.loads(line[10:]) for line in res.stdout.splitlines() if line.startswith("@@BENCH@@ ")]
    assert res.returncode == 0 and result, res.stdout[-3000:] + res.stderr[-2000:]
    result = result[-1]
    assert result["http"].get("/api/v1/system/alive 200") and result["http"].get("/api/v1/history/latest 200")
    assert "FAILED" not in result["module_states"].values() and "memory_error" not in result
    assert not [n for n in os.listdir(drive / "core") if n.endswith(".py")]     # it ran the .mpy files


def test_an_expiry_is_written_into_the_signed_manifest_when_asked(tmp_path):
    """Issue 26 finding 11: `--expires YYYY-MM-DD` (make release RELEASE_ARGS=--expires=...) writes the manifest's
    expires (Unix seconds of 00:00 UTC that day) before signing; the device's own parser reads it back."""
    import calendar
    import time

    from services.ota.manifest import parse_manifest

    key, _pub = write_key(str(tmp_path / "k"))
    folder = build(ROOT, str(tmp_path / "d"), "--expires", "2030-06-30", key=key)
    data = open(os.path.join(folder, "manifest.json"), "rb").read()
    assert parse_manifest(data)["expires"] == calendar.timegm(time.strptime("2030-06-30", "%Y-%m-%d"))
    plain = build(ROOT, str(tmp_path / "e"), key=key)
    assert "expires" not in json.loads(open(os.path.join(plain, "manifest.json")).read())
    for bad in ("30.06.2030", "2000-01-01"):
        r = release("--out", str(tmp_path / "f"), "--py", "--expires", bad)
        assert r.returncode == 1 and "EXPIRES" in r.stderr, r.stderr
