"""python -m tools.ota_manifest SRC VERSION [--base B] [--notes-de T] [--notes-en T] > manifest.json

Writes the update manifest (docs/ota.md) for the application files in SRC: code.py, core/, drivers/, meter/,
services/, web/ with their sizes and SHA-256. boot.py is never listed (it is the rollback anchor)."""

import argparse
import hashlib
import json
import os
import sys
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


def make_manifest(src, version, base="", notes_de="", notes_en="", release_date=None):
    """The manifest dict for the application files in src."""
    files = []
    for rel in app_files(src):
        with open(os.path.join(src, rel), "rb") as f:
            data = f.read()
        files.append({"path": rel, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    return {"format": 1, "version": version,
            "release_date": release_date or time.strftime("%Y-%m-%d", time.gmtime()),
            "notes": {"de": notes_de, "en": notes_en}, "base": base, "files": files}


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m tools.ota_manifest", description=__doc__.split("\n")[2])
    p.add_argument("src")
    p.add_argument("version")
    p.add_argument("--base", default="")
    p.add_argument("--notes-de", default="")
    p.add_argument("--notes-en", default="")
    a = p.parse_args(argv)
    json.dump(make_manifest(a.src, a.version, a.base, a.notes_de, a.notes_en), sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
