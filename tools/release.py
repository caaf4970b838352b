"""python -m tools.release [VERSION] [--key PRIVATE.pem] [--out dist] [--py]: build a release (docs/release.md).

Writes OUT/meterplus-VERSION/: the signed update release (manifest.json, manifest.json.sig, app/<files>, and the same
release as one archive, meterplus-VERSION-update.tar, for "update from a file" in the web page), the drive image
meterplus-VERSION-circuitpy.zip (what goes onto CIRCUITPY: firmware, lib/ with the pinned device libraries,
settings.toml as a template, ota_keys.txt, meterplus_release.json) and SHA256SUMS; and OUT/manifest.json (+ .sig),
the channel a device's ota.url points at, which always names the newest release built into OUT.

VERSION must be the one in core/version.py (the one place it lives) and CHANGELOG.md must have its entry. The
firmware's packages and the libraries are .mpy files compiled by CircuitPython's own mpy-cross when one is at hand
(CIRCUITPY_SRC, or one the device bench built into its cache), else .py; meterplus_release.json on the drive says
which. The update ships the same compiled packages (manifest-mpy.json, -update-mpy.tar) beside its source form
(manifest.json, -update.tar), or says it is source only. Two builds of the same sources are byte-identical: fixed
timestamps (the CHANGELOG date, or SOURCE_DATE_EPOCH), sorted entries, fixed permissions, deterministic Ed25519
signatures."""

import argparse
import calendar
import glob
import hashlib
import importlib.metadata
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROJECT_KEY = "9ffa12cda7ef09fc44013bd845253292dd51bf29305925e0ee98acce39e8589a"
MARKER = "meterplus_release.json"    # on the drive: which release, .py or .mpy, the shipped keys and files
APP_BASE = "app/"                    # the update's files, relative to the release's manifest.json
COMPILED = "manifest-mpy.json"       # the update's compiled form (format 2), named by manifest.json (docs/ota.md)
DRIVE_TOP = ("boot.py", "settings.toml", "ota_keys.txt")   # besides the application files (code.py, core/ ...)
MPY_PACKAGES = ("core", "drivers", "meter", "services")    # compiled to .mpy (code.py and boot.py run as source)
FILE_MODE = 0o644


class ReleaseError(Exception):
    """The release cannot be built as asked; the message says why and what to do."""


# ---- inputs: the version, the CHANGELOG entry, the libraries ------------------------------------------------------

def source_version(src):
    """The VERSION string of src/core/version.py."""
    with open(os.path.join(src, "core", "version.py")) as f:
        m = re.search(r'^VERSION\s*=\s*"([^"]+)"', f.read(), re.M)
    if not m:
        raise ReleaseError("core/version.py has no VERSION = \"x.y.z\" line")
    return m.group(1)


def changelog_entry(src, version):
    """(release date 'YYYY-MM-DD', notes_en, notes_de) from CHANGELOG.md's '## VERSION (YYYY-MM-DD)' entry."""
    path = os.path.join(src, "CHANGELOG.md")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError:
        raise ReleaseError("no CHANGELOG.md: each release needs an entry '## %s (YYYY-MM-DD)'" % version)
    m = re.search(r"^## %s \((\d{4}-\d{2}-\d{2})\)[ \t]*\n(.*?)(?=^## |\Z)" % re.escape(version), text, re.M | re.S)
    if not m:
        raise ReleaseError("CHANGELOG.md has no entry for %s: add '## %s (YYYY-MM-DD)' with an 'en:' and a 'de:' "
                           "line (the notes the device shows)" % (version, version))
    date, body = m.group(1), m.group(2)
    try:
        time.strptime(date, "%Y-%m-%d")
    except ValueError:
        raise ReleaseError("CHANGELOG.md: %s is not a date (YYYY-MM-DD)" % date)
    notes = {}
    for lang in ("en", "de"):
        n = re.search(r"^%s:[ \t]*(.+)$" % lang, body, re.M)
        if not n:
            raise ReleaseError("CHANGELOG.md, %s: no '%s:' line (the release note the device shows)" % (version, lang))
        notes[lang] = n.group(1).strip()
        if len(notes[lang]) > 1000:
            raise ReleaseError("CHANGELOG.md, %s: the '%s:' note is %d characters; the device takes at most 1000"
                               % (version, lang, len(notes[lang])))
    return date, notes["en"], notes["de"]


def pinned_libraries(src):
    """[(module name, version)] of the device libraries requirements.txt pins (circup names, name==version)."""
    out = []
    with open(os.path.join(src, "requirements.txt")) as f:
        for line in f:
            line = line.split("#")[0].strip()
            if not line:
                continue
            m = re.match(r"^([A-Za-z0-9_]+)==([0-9][0-9A-Za-z.]*)$", line)
            if not m:
                raise ReleaseError("requirements.txt: %r is not name==version (every device library is pinned)" % line)
            out.append((m.group(1), m.group(2)))
    return out


def library_files(name, version):
    """[(path on the drive under lib/, absolute source path)] of one device library from the pinned host install,
    after checking that the installed distribution is the version requirements.txt pins."""
    from bench.bench_device import Skip, library_path

    dists = importlib.metadata.packages_distributions().get(name) or []
    if not dists:
        raise ReleaseError("device library %s is not installed in this virtualenv: make release installs "
                           "requirements-dev.txt (its adafruit-circuitpython-* line pins it)" % name)
    dist = importlib.metadata.distribution(dists[0])
    if dist.version != version:
        raise ReleaseError("device library %s: requirements.txt pins %s, the virtualenv has %s (%s): pin the same "
                           "release in requirements-dev.txt" % (name, version, dist.version, dists[0]))
    try:
        path = library_path(name)
    except Skip as exc:
        raise ReleaseError(str(exc))
    site = os.path.realpath(str(dist.locate_file("")))
    if os.path.dirname(os.path.realpath(path)) != site:   # a stand-in of the same name came first on sys.path
        raise ReleaseError("device library %s found at %s, not in %s's install (%s)" % (name, path, dists[0], site))
    if os.path.isfile(path):
        return [("lib/" + os.path.basename(path), path)]
    files = []
    for root, dirs, names in os.walk(path):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for n in sorted(names):
            if n.endswith((".pyc", ".pyi")) or n == "py.typed":
                continue
            full = os.path.join(root, n)
            files.append(("lib/" + name + "/" + os.path.relpath(full, path).replace(os.sep, "/"), full))
    return files


# ---- CircuitPython's mpy-cross -------------------------------------------------------------------------------------

def find_mpy_cross(circuitpy_src=None):
    """Path of CircuitPython's mpy-cross: built from circuitpy_src (once, by the device bench's build), else one the
    device bench left in its cache; None when there is none (the release then ships .py)."""
    from bench import bench_device as bd

    if circuitpy_src:
        try:
            return bd.mpy_cross_of(bd.build(bd.source_tree(circuitpy_src), log=lambda m: print(m, file=sys.stderr)))
        except bd.Skip as exc:
            raise ReleaseError("CIRCUITPY_SRC: %s" % exc)
    for tool in sorted(glob.glob(os.path.join(bd.CACHE, "cp-unix-*", "mpy-cross-build", "mpy-cross"))):
        if os.access(tool, os.X_OK) and mpy_cross_version(tool).startswith("CircuitPython "):
            return tool
    return None


def mpy_cross_version(tool):
    """'CircuitPython 10.2.1; mpy-cross emitting mpy v6.3' (the build date left out: it is not the compiler's)."""
    try:
        out = subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    except OSError:
        return ""
    return re.sub(r" on \d{4}-\d{2}-\d{2}", "", out)


def compile_tree(tool, folder):
    """Every .py under folder replaced by its .mpy (the device bench's compile step)."""
    from bench.bench_device import compile_mpy

    compile_mpy(os.path.join(os.path.dirname(os.path.dirname(tool)), "micropython"), folder)


# ---- deterministic archives ----------------------------------------------------------------------------------------

def epoch_of(date):
    """Seconds of 00:00 UTC on date, or SOURCE_DATE_EPOCH when set (reproducible-builds.org)."""
    env = os.environ.get("SOURCE_DATE_EPOCH")
    if env:
        return int(env)
    return calendar.timegm(time.strptime(date, "%Y-%m-%d"))


def write_zip(path, entries, epoch):
    """entries: {name: bytes}; sorted, one fixed timestamp, mode 0644, deflate level 9, no folder entries."""
    stamp = time.gmtime(max(epoch, 315532800))[:6]        # zip cannot say anything before 1980
    with zipfile.ZipFile(path, "w") as z:
        for name in sorted(entries):
            info = zipfile.ZipInfo(name, date_time=stamp)
            info.create_system = 3                           # Unix, whatever builds it
            info.external_attr = (0o100000 | FILE_MODE) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, entries[name], compresslevel=9)


def write_tar(path, members, epoch):
    """The upload archive (services/ota/upload.py): ustar, regular files in the given order, fixed owner and time."""
    with open(path, "wb") as raw, tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = epoch
            info.mode = FILE_MODE
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def _write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, FILE_MODE)


def uncommitted(src, paths):
    """The paths among these that differ from src's git commit (untracked ones too); [] outside a git work tree."""
    try:
        res = subprocess.run(["git", "-C", src, "status", "--porcelain", "--untracked-files=all", "--"] + sorted(
            set(p.split("/")[0] for p in paths)), capture_output=True, text=True, timeout=60)
    except OSError:
        return []
    if res.returncode != 0:
        return []
    wanted = set(paths)
    return [line[3:] for line in res.stdout.splitlines() if line[3:] in wanted]


def _channel_version(out):
    try:
        with open(os.path.join(out, "manifest.json")) as f:
            return json.load(f).get("version")
    except (OSError, ValueError, AttributeError):
        return None


# ---- the build -----------------------------------------------------------------------------------------------------

def build(version=None, key_path=None, out=None, src=REPO, use_mpy=True, circuitpy_src=None, log=print,
          expires=None):
    """Build the release of src into out (default src/dist); returns its folder. ReleaseError says what is wrong.

    expires: a date (YYYY-MM-DD) from 00:00 UTC of which devices refuse the manifest (signed with it: docs/ota.md);
    None writes no expiry."""
    from services.ota.manifest import parse_manifest, parse_version
    from tools.ota_manifest import app_files, signature_hex

    src = os.path.abspath(src)
    out = os.path.abspath(out or os.path.join(src, "dist"))
    have = source_version(src)
    version = version or have
    try:
        parse_version(version)
    except ValueError as exc:
        raise ReleaseError("VERSION: %s" % exc)
    if version != have:
        raise ReleaseError("VERSION=%s but core/version.py says %s: the version lives there only (it is what "
                           "/api/v1/system/alive reports); change it there and add its CHANGELOG.md entry"
                           % (version, have))
    date, notes_en, notes_de = changelog_entry(src, version)
    epoch = epoch_of(date)
    expires_at = None
    if expires:
        try:
            expires_at = calendar.timegm(time.strptime(expires, "%Y-%m-%d"))
        except ValueError:
            raise ReleaseError("EXPIRES: %r is not a date like 2027-06-30" % expires)
        if expires_at <= calendar.timegm(time.strptime(date, "%Y-%m-%d")):
            raise ReleaseError("EXPIRES: %s is not after the release date %s" % (expires, date))
    key = None
    if key_path:
        from tools.ota_keygen import load_private, public_hex

        try:
            key = load_private(key_path)
        except (OSError, ValueError) as exc:
            raise ReleaseError("KEY: %s" % exc)
    with open(os.path.join(src, "ota_keys.txt")) as f:
        keys_text = f.read()
    shipped_keys = sorted(set(re.findall(r"^([0-9a-fA-F]{64})\s*(?:#.*)?$", keys_text, re.M)))
    if not shipped_keys:
        raise ReleaseError("ota_keys.txt holds no key: a drive built from it would refuse every update")
    libs = pinned_libraries(src)
    lib_files = []
    for name, pin in libs:
        lib_files += library_files(name, pin)
    tool = find_mpy_cross(circuitpy_src) if use_mpy else None

    # the update's source form: every application file as it is (what every firmware installs)
    app = app_files(src)
    app_data = {rel: _read(os.path.join(src, rel)) for rel in app}

    def entries(paths, data):
        return [{"path": rel, "size": len(data[rel]), "sha256": hashlib.sha256(data[rel]).hexdigest()}
                for rel in paths]

    files = entries(app, app_data)
    name = "meterplus-" + version

    # the drive image
    stage = tempfile.mkdtemp(prefix="meterplus-release-")
    try:
        for rel in app + list(DRIVE_TOP):
            _write(os.path.join(stage, rel), _read(os.path.join(src, rel)))
        for rel, path in lib_files:
            _write(os.path.join(stage, rel), _read(path))
        if tool:
            for folder in MPY_PACKAGES + ("lib",):
                compile_tree(tool, os.path.join(stage, folder))
        drive = {}
        for root, _dirs, names in os.walk(stage):
            for n in names:
                full = os.path.join(root, n)
                drive[os.path.relpath(full, stage).replace(os.sep, "/")] = _read(full)
    finally:
        shutil.rmtree(stage, ignore_errors=True)

    # the update's compiled form: the drive image's .mpy for each package module (the same mpy-cross), code.py
    # and web/ as they are; installed by devices whose boot.py switches twins and whose CircuitPython imports it
    compiled = None
    mpy_ver = None
    if tool:
        compiled = [rel[:-3] + ".mpy" if rel.split("/")[0] in MPY_PACKAGES and rel.endswith(".py") else rel
                    for rel in app]
        headers = set(drive[rel][:2] for rel in compiled if rel.endswith(".mpy"))
        if len(headers) != 1 or next(iter(headers))[:1] != b"C":
            raise ReleaseError("mpy-cross %s wrote .mpy headers %r: not one CircuitPython .mpy version" % (tool,
                                                                                                        headers))
        mpy_ver = next(iter(headers))[1]      # the header's version byte: what sys.implementation._mpy says
    compiler = mpy_cross_version(tool) if tool else ""
    why_py = ("no CircuitPython mpy-cross at build time (CIRCUITPY_SRC, or make bench-device once)" if use_mpy
              else "built with --py")
    code_note = (("source form; the compiled form (.mpy v%d, %s) is %s" % (mpy_ver, compiler, COMPILED))
                 if tool else "source only (.py): %s" % why_py)

    def manifest_bytes(base, fmt=1, pointer=None):
        doc = {"format": fmt, "version": version, "release_date": date, "notes": {"de": notes_de, "en": notes_en},
               "base": base}
        if fmt == 2:
            doc["files"] = entries(compiled, drive)
            doc["mpy"] = {"version": mpy_ver, "compiler": compiler}
            doc["code_note"] = "compiled form: .mpy v%d (%s); its source form is manifest.json" % (mpy_ver, compiler)
        else:
            doc["files"] = files
            doc["code_note"] = code_note
            if pointer is not None:   # firmware before the compiled form ignores it and installs the source form
                doc["mpy"] = {"version": mpy_ver, "compiler": compiler, "manifest": pointer,
                              "size": len(compiled_manifest), "sha256": hashlib.sha256(compiled_manifest).hexdigest()}
        if expires_at is not None:
            doc["expires"] = expires_at     # inside the signed bytes: nobody can move it
        data = (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()
        parse_manifest(data)   # what the device checks: refuse here, not on every device
        return data

    compiled_manifest = manifest_bytes(APP_BASE, 2) if tool else None
    manifest = manifest_bytes(APP_BASE, pointer=COMPILED if tool else None)
    sig = (signature_hex(manifest, key) + "\n").encode() if key else None
    csig = (signature_hex(compiled_manifest, key) + "\n").encode() if key and tool else None
    marker = {
        "name": "Meter Plus",
        "version": version,
        "release_date": date,
        "code": "mpy" if tool else "py",
        "code_note": ("firmware packages and lib/ compiled by CircuitPython's own mpy-cross (%s); code.py and boot.py "
                      "are source" % mpy_cross_version(tool)) if tool else
                     ("source (.py): %s; CircuitPython runs .py the same, each import compiles it first (a slower "
                      "start)" % ("no CircuitPython mpy-cross at build time (CIRCUITPY_SRC, or make bench-device once)"
                                  if use_mpy else "built with --py")),
        "update": ("compiled (.mpy v%d) and source" % mpy_ver) if tool else code_note,
        "libraries": {n: v for n, v in libs},
        "keys": shipped_keys,
        "files": sorted(list(drive) + [MARKER]),
    }
    drive[MARKER] = (json.dumps(marker, indent=1, sort_keys=True) + "\n").encode()

    # write the release folder from scratch (a build never mixes with an older one)
    folder = os.path.join(out, name)
    if os.path.exists(folder):
        shutil.rmtree(folder)
    os.makedirs(folder)
    _write(os.path.join(folder, "manifest.json"), manifest)
    if sig:
        _write(os.path.join(folder, "manifest.json.sig"), sig)
    for rel in app:
        _write(os.path.join(folder, APP_BASE + rel), app_data[rel])
    members = [("manifest.json", manifest)] + ([("manifest.json.sig", sig)] if sig else [])
    members += [(rel, app_data[rel]) for rel in app]
    write_tar(os.path.join(folder, name + "-update.tar"), members, epoch)
    if tool:
        _write(os.path.join(folder, COMPILED), compiled_manifest)
        if csig:
            _write(os.path.join(folder, COMPILED + ".sig"), csig)
        for rel in compiled:
            _write(os.path.join(folder, APP_BASE + rel), drive[rel])
        # the compiled form as one file: its manifest (format 2) under the name the upload reads, its signature
        members = [("manifest.json", compiled_manifest)] + ([("manifest.json.sig", csig)] if csig else [])
        members += [(rel, drive[rel]) for rel in compiled]
        write_tar(os.path.join(folder, name + "-update-mpy.tar"), members, epoch)
    write_zip(os.path.join(folder, name + "-circuitpy.zip"), drive, epoch)
    sums = ""
    for n in sorted(os.listdir(folder)):
        if os.path.isfile(os.path.join(folder, n)):
            sums += "%s  %s\n" % (hashlib.sha256(_read(os.path.join(folder, n))).hexdigest(), n)
    _write(os.path.join(folder, "SHA256SUMS"), sums.encode())

    # the channel: OUT/manifest.json names the newest release in OUT (an older build leaves it alone)
    current = _channel_version(out)
    channel_note = ""
    if current is None or parse_version(version) >= parse_version(current):
        channel = manifest_bytes(name + "/" + APP_BASE, pointer=name + "/" + COMPILED if tool else None)
        _write(os.path.join(out, "manifest.json"), channel)
        chsig = os.path.join(out, "manifest.json.sig")
        if key:
            _write(chsig, (signature_hex(channel, key) + "\n").encode())
        elif os.path.exists(chsig):
            os.remove(chsig)
    else:
        channel_note = " (%s stays on %s, the newer release)" % (os.path.join(out, "manifest.json"), current)

    log("built %s: %d application files, drive image with %d files (%s), %d libraries%s"
        % (folder, len(app), len(drive), marker["code"], len(libs), channel_note))
    if tool:
        log("update: compiled (.mpy v%d, %s: %s, %s) and source (manifest.json, %s)"
            % (mpy_ver, compiler, COMPILED, name + "-update-mpy.tar", name + "-update.tar"))
    else:
        log("update as .py only: %s (devices start an update ~2x slower)" % code_note[len("source only (.py): "):])
    dirty = uncommitted(src, app + list(DRIVE_TOP) + ["CHANGELOG.md", "requirements.txt"])
    if dirty:
        log("note: built from uncommitted changes (%s%s): this is not the release of a commit"
            % (", ".join(dirty[:3]), ", ..." if len(dirty) > 3 else ""))
    if not tool and use_mpy:
        log("drive image as .py: no CircuitPython mpy-cross here (set CIRCUITPY_SRC, or run make bench-device once)")
    if key is None:
        log("UNSIGNED: no KEY given, devices refuse this update; build with KEY=path/to/ota_private_key.pem to sign")
    else:
        pub = public_hex(key)
        if pub not in [k.lower() for k in shipped_keys]:
            log("note: KEY's public key %s… is not in ota_keys.txt: only devices that trust it (an owner's key, "
                "--ota-pubkey) install this release" % pub[:16])
    return folder


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m tools.release", description=__doc__.split("\n")[0])
    p.add_argument("version", nargs="?", help="x.y.z; default and only allowed value: core/version.py's")
    p.add_argument("--key", help="the release's private key (PEM, python -m tools.ota_keygen); without it: unsigned")
    p.add_argument("--out", help="output folder (default dist/ beside the sources)")
    p.add_argument("--src", default=REPO, help="the sources (default: this repository)")
    p.add_argument("--py", action="store_true", help="ship .py even where CircuitPython's mpy-cross is at hand")
    p.add_argument("--circuitpy-src", default=os.environ.get("CIRCUITPY_SRC") or None,
                   help="a CircuitPython source tree to build mpy-cross from (default $CIRCUITPY_SRC)")
    p.add_argument("--expires", help="YYYY-MM-DD: devices refuse the signed manifest from 00:00 UTC that day (an old "
                                      "manifest served again cannot hide a newer release); default: no expiry")
    a = p.parse_args(argv)
    try:
        build(a.version or None, a.key and os.path.expanduser(a.key), a.out, a.src, not a.py, a.circuitpy_src,
              expires=a.expires)
    except ReleaseError as exc:
        print("make release: %s" % exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
