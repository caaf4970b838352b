"""python -m tools.ota_manifest SRC VERSION --key PRIVATE [--out manifest.json] [--base B] [--min-version V] ...

Writes the update manifest (docs/ota.md) for the application files in SRC: code.py, core/, drivers/, meter/,
services/, web/ with their sizes and SHA-256, and with --key its detached Ed25519 signature (<out>.sig): the device
installs signed releases only. boot.py is never listed (it is the rollback anchor). Without --key the unsigned
manifest goes to standard output (to sign elsewhere: --sign-only MANIFEST --key PRIVATE). With --archive FILE also
the release as one file for POST /api/v1/ota/upload (tar: manifest.json, manifest.json.sig, then the files)."""

import argparse
import hashlib
import json
import os
import io
import sys
import tarfile
import time

APP_FOLDERS = ("core", "drivers", "meter", "services", "web")


def app_files(src):
    """Relative paths of the application files under src, sorted."""
    out = ["code.py"] if os.path.exists(os.path.join(src, "code.py")) else []
    for folder in APP_FOLDERS:
        for root, dirs, files in os.walk(os.path.join(src, folder)):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
            for name in sorted(files):
                if name.endswith(".pyc") or name.startswith("."):
                    continue
                out.append(os.path.relpath(os.path.join(root, name), src).replace(os.sep, "/"))
    return out


def signature_hex(data, private_key):
    """The .sig text for the exact manifest bytes data: Ed25519 over b"MPOTA1" + SHA-256(data), 128 hex digits.
    private_key: a cryptography Ed25519PrivateKey (tools.ota_keygen.load_private)."""
    return private_key.sign(b"MPOTA1" + hashlib.sha256(data).digest()).hex()


def write_signed(path, manifest, private_key):
    """Write manifest (a dict) to path and its signature to path + ".sig"; returns the manifest bytes."""
    data = (json.dumps(manifest, indent=1) + "\n").encode()
    with open(path, "wb") as f:
        f.write(data)
    with open(path + ".sig", "w") as f:
        f.write(signature_hex(data, private_key) + "\n")
    return data


def make_archive(path, src, manifest_bytes, signature_text):
    """The upload archive: a ustar file of manifest.json, manifest.json.sig and every file the manifest lists."""
    manifest = json.loads(manifest_bytes)
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in (("manifest.json", manifest_bytes), ("manifest.json.sig", signature_text.encode())):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = int(time.time())
            tar.addfile(info, io.BytesIO(data))
        for entry in manifest["files"]:
            with open(os.path.join(src, entry["path"]), "rb") as f:
                data = f.read()
            info = tarfile.TarInfo(entry["path"])
            info.size = len(data)
            info.mtime = int(time.time())
            tar.addfile(info, io.BytesIO(data))


def make_manifest(src, version, base="", notes_de="", notes_en="", release_date=None, min_version=""):
    """The manifest dict for the application files in src."""
    files = []
    for rel in app_files(src):
        with open(os.path.join(src, rel), "rb") as f:
            data = f.read()
        files.append({"path": rel, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    return {"format": 1, "version": version,
            "release_date": release_date or time.strftime("%Y-%m-%d", time.gmtime()),
            "notes": {"de": notes_de, "en": notes_en}, "base": base, "files": files,
            **({"min_version": min_version} if min_version else {})}


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m tools.ota_manifest", description=__doc__.split("\n")[2])
    p.add_argument("src", nargs="?")
    p.add_argument("version", nargs="?")
    p.add_argument("--key", help="PEM private key from python -m tools.ota_keygen: sign the manifest")
    p.add_argument("--out", default="manifest.json", help="with --key: the manifest file (signature: OUT.sig)")
    p.add_argument("--archive", metavar="FILE", help="with --key: also the release as one archive for ota/upload")
    p.add_argument("--sign-only", metavar="MANIFEST", help="sign an existing manifest file as it is (needs --key)")
    p.add_argument("--base", default="")
    p.add_argument("--min-version", default="", help="no device that installed this release goes below it")
    p.add_argument("--notes-de", default="")
    p.add_argument("--notes-en", default="")
    a = p.parse_args(argv)
    if a.sign_only:
        if not a.key:
            p.error("--sign-only needs --key")
        from tools.ota_keygen import load_private

        with open(a.sign_only, "rb") as f:
            data = f.read()
        with open(a.sign_only + ".sig", "w") as f:
            f.write(signature_hex(data, load_private(a.key)) + "\n")
        print("signed %s -> %s.sig" % (a.sign_only, a.sign_only), file=sys.stderr)
        return 0
    if not a.src or not a.version:
        p.error("SRC and VERSION are needed")
    manifest = make_manifest(a.src, a.version, a.base, a.notes_de, a.notes_en, min_version=a.min_version)
    if a.key:
        from tools.ota_keygen import load_private

        data = write_signed(a.out, manifest, load_private(a.key))
        print("wrote %s and %s.sig (%d files)" % (a.out, a.out, len(manifest["files"])), file=sys.stderr)
        if a.archive:
            with open(a.out + ".sig") as f:
                make_archive(a.archive, a.src, data, f.read())
            print("wrote %s" % a.archive, file=sys.stderr)
        return 0
    if a.archive:
        p.error("--archive needs --key")
    json.dump(manifest, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
