"""python -m tools.install DRIVE [--zip meterplus-x.y.z-circuitpy.zip] [--dry-run]: put a release onto CIRCUITPY.

Checks that DRIVE is a CIRCUITPY drive (boot_out.txt: CircuitPython 10.x on an ESP32-S3; no symbolic links or special
files, which FAT cannot hold), then copies the release's drive image (tools/release.py) onto it and keeps what is the
owner's: settings.json, tokens.json, settings.toml (WiFi and pins), history/, logs/, the MQTT CA, cloud pairing,
anything else that is not the release's own, and any key the owner added to ota_keys.txt. The release's own files are
code.py, boot.py, the application folders (core/, drivers/, meter/, services/, web/: replaced whole, so a file of an
older version or an update never shadows a new one) and lib/<each library the release ships>. A drive without room for
the release is refused before anything is written; --dry-run lists what would change and writes nothing. Nothing is
ever read, removed or written through a symbolic link. The board is what boot_out.txt says: a file on the drive, not a
check of the board itself (the output says so). Standard library only: it runs from a copy of this file with any
Python 3.8+."""

import argparse
import json
import os
import re
import shutil
import sys
import zipfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARKER = "meterplus_release.json"        # tools/release.py's MARKER
APP_FOLDERS = ("core", "drivers", "meter", "services", "web")
KEYS_FILE = "ota_keys.txt"
MAX_KEYS = 8                              # services/ota/signature.py: a device trusts at most 8 keys
MAX_KEYS_TEXT = 4096                      # ... and reads at most 4 KB of the keys file
# Release keys this project shipped before and retired: on a drive that has no release marker they are the
# project's, not the owner's (the key of 0.1.0's predecessors, whose private half is lost).
RETIRED_PROJECT_KEYS = ("82de35a2cb5d3990d5e82985021dd2389390c5077256d6460343d4194ed079e9",)
# An update that was under way (docs/ota.md, "The drive during an update"): boot.py would move ota/prev's old files
# back over the ones installed now, so the install ends it. ota/bad and ota/floor stay (what the owner's device
# learned about releases).
UPDATE_IN_PROGRESS = ("ota/journal", "ota/journal.tmp", "ota/stage", "ota/prev")
MARGIN = 64 * 1024                        # folder entries and the FAT itself


class InstallError(Exception):
    """Nothing was written; the message says why and what to do."""


# ---- the drive -----------------------------------------------------------------------------------------------------

def check_drive(drive):
    """(CircuitPython version, board) of a CIRCUITPY drive running CircuitPython 10 on an ESP32-S3; InstallError in
    plain words about what was found otherwise. The board and version are boot_out.txt's word: CircuitPython writes
    that file at every start, but anything that can write to the drive can write it too, and nothing else on the
    drive says which chip it belongs to (install() says so in its output)."""
    if not os.path.isdir(drive):
        raise InstallError("%s is not a folder: give the path where the CIRCUITPY drive is mounted (e.g. "
                           "/media/$USER/CIRCUITPY, /Volumes/CIRCUITPY or E:\\)" % drive)
    boot_out = os.path.join(drive, "boot_out.txt")
    if os.path.lexists(boot_out) and (os.path.islink(boot_out) or not os.path.isfile(boot_out)):
        raise InstallError("%s/boot_out.txt is a symbolic link or not a file: not a CIRCUITPY drive (its FAT file "
                           "system holds plain files only); nothing was written" % drive)
    try:
        with open(boot_out, encoding="utf-8", errors="replace") as f:
            first = f.readline().strip()
    except OSError:
        raise InstallError("%s has no boot_out.txt: not a CIRCUITPY drive (CircuitPython writes that file at every "
                           "start). Install CircuitPython 10.x for your ESP32-S3 board first (circuitpython.org), "
                           "then give the drive it shows" % drive)
    m = re.match(r"Adafruit CircuitPython (\d+)\.(\d+)\.(\d+)\S*(?: on \S+)?;\s*(.*?)\s+with\s+(\S+)\s*$", first)
    if not m:
        raise InstallError("%s/boot_out.txt does not read like CircuitPython's (first line: %r): not a CIRCUITPY "
                           "drive" % (drive, first[:120]))
    version = "%s.%s.%s" % m.group(1, 2, 3)
    board, chip = m.group(4), m.group(5)
    if m.group(1) != "10":
        raise InstallError("%s runs CircuitPython %s on %s: Meter Plus needs CircuitPython 10.x; install it first "
                           "(circuitpython.org, your board's page) and run this again" % (drive, version, board))
    if chip.upper().replace("-", "") != "ESP32S3":
        raise InstallError("%s is a %s with %s: Meter Plus runs on ESP32-S3 boards only" % (drive, board, chip))
    odd = special_entries(drive)
    if odd:
        raise InstallError("%s holds %s, which a CIRCUITPY drive cannot (its FAT file system has no symbolic links "
                           "and no special files): not a CIRCUITPY drive, or something put them there; nothing was "
                           "written and no link was followed. Remove them and run this again"
                           % (drive, ", ".join(odd[:5]) + (", ..." if len(odd) > 5 else "")))
    return version, board


def _is_link(entry):
    return entry.is_symlink() or bool(getattr(entry, "is_junction", lambda: False)())


def special_entries(drive):
    """Relative paths under drive of what FAT cannot hold: symbolic links (to a file or a folder, followed nowhere)
    and anything that is neither a plain file nor a folder (a FIFO would block a read)."""
    out = []
    stack = [""]
    while stack:
        rel = stack.pop()
        try:
            with os.scandir(_on_drive(drive, rel) if rel else drive) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            raise InstallError("%s: cannot read %s (%s): nothing was written" % (drive, rel or "the drive", exc))
        for e in entries:
            r = rel + "/" + e.name if rel else e.name
            if _is_link(e):
                out.append(r + " (a symbolic link)")
            elif e.is_dir(follow_symlinks=False):
                stack.append(r)
            elif not e.is_file(follow_symlinks=False):
                out.append(r + " (not a file)")
    return sorted(out)


def free_bytes(drive):
    """(free bytes, allocation unit) of the file system that holds drive."""
    try:
        st = os.statvfs(drive)
        return st.f_bavail * st.f_frsize, max(st.f_frsize, 512)
    except (AttributeError, OSError):      # Windows
        return shutil.disk_usage(drive).free, 4096


def _on_drive(drive, rel):
    return os.path.join(drive, *rel.split("/"))


def _walk(drive, folder):
    """Relative paths of the files under drive/folder."""
    out = []
    top = _on_drive(drive, folder)
    for root, dirs, names in os.walk(top):
        dirs.sort()
        for n in sorted(names):
            out.append(os.path.relpath(os.path.join(root, n), drive).replace(os.sep, "/"))
    return out


def _read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


# ---- ota_keys.txt --------------------------------------------------------------------------------------------------

def key_lines(text):
    """[(key in lower-case hex, the line it is on)] of a keys file's text (64 hex digits a line, # comments)."""
    out = []
    for line in text.splitlines():
        k = line.split("#")[0].strip().lower()
        if len(k) == 64 and all(c in "0123456789abcdef" for c in k):
            out.append((k, line.rstrip()))
    return out


def merged_keys(release_text, drive_text, project_keys):
    """(new ota_keys.txt text, owner key lines kept): the release's file, then every key on the drive that is not a
    project key (an owner's own build key), with its line as the owner wrote it."""
    release = set(k for k, _ in key_lines(release_text))
    known = release | set(project_keys) | set(RETIRED_PROJECT_KEYS)
    owner = []
    seen = set()
    for k, line in key_lines(drive_text or ""):
        if k not in known and k not in seen:
            seen.add(k)
            owner.append(line)
    text = release_text
    if owner:
        if not text.endswith("\n"):
            text += "\n"
        text += "# Added by the owner (kept by tools.install):\n" + "".join(line + "\n" for line in owner)
    if len(release) + len(owner) > MAX_KEYS:
        raise InstallError("ota_keys.txt would hold %d keys with yours; a device trusts at most %d: remove some of "
                           "yours from %s first" % (len(release) + len(owner), MAX_KEYS, KEYS_FILE))
    if len(text.encode()) > MAX_KEYS_TEXT:
        raise InstallError("ota_keys.txt would be %d bytes; the device reads at most %d: shorten your comments in it"
                           % (len(text.encode()), MAX_KEYS_TEXT))
    return text, owner


# ---- the plan ------------------------------------------------------------------------------------------------------

class Plan:
    """What an install does: writes {rel: bytes}, removes [rel], keeps [rel], notes [text]."""

    def __init__(self):
        self.writes = {}
        self.new = set()
        self.unchanged = []
        self.removes = []
        self.kept = []
        self.notes = []
        self.version = ""
        self.code = ""


def _release_owned(rel, libs):
    """True for paths the release owns: code.py, boot.py, the application folders, lib/<its libraries>."""
    top = rel.split("/")[0]
    if rel in ("code.py", "boot.py", MARKER) or top in APP_FOLDERS:
        return True
    if top == "lib" and "/" in rel:
        name = rel.split("/")[1]
        stem = name[:-4] if name.endswith(".mpy") else name[:-3] if name.endswith(".py") else name
        return stem in libs
    return False


def plan(drive, zip_path, replace_foreign=False):
    """The Plan for installing the drive image zip_path onto drive (reads only). Files in the application folders
    of a drive that holds no Meter Plus yet are another project's: refused unless replace_foreign."""
    try:
        z = zipfile.ZipFile(zip_path)
    except (OSError, zipfile.BadZipFile) as exc:
        raise InstallError("%s: not a release zip (%s); make release writes dist/meterplus-x.y.z/"
                           "meterplus-x.y.z-circuitpy.zip" % (zip_path, exc))
    with z:
        names = [n for n in z.namelist() if not n.endswith("/")]
        if MARKER not in names:
            raise InstallError("%s has no %s: not a Meter Plus drive image" % (zip_path, MARKER))
        files = {n: z.read(n) for n in names}
    for n in names:
        if n.startswith("/") or ".." in n.split("/") or "\\" in n or ":" in n:
            raise InstallError("%s: a file named %r would land outside the drive: refused" % (zip_path, n))
    missing = [n for n in ("settings.toml", KEYS_FILE) if n not in files]
    try:
        marker = json.loads(files[MARKER])
    except ValueError:
        missing.append(MARKER)
    if missing:
        raise InstallError("%s is not a whole Meter Plus drive image (%s missing or damaged): build it again"
                           % (zip_path, ", ".join(missing)))
    p = Plan()
    p.version, p.code = marker.get("version", "?"), marker.get("code", "?")
    libs = set()
    for n in names:
        if n.startswith("lib/") and n.count("/") >= 1:
            part = n.split("/")[1]
            libs.add(part[:-4] if part.endswith(".mpy") else part[:-3] if part.endswith(".py") else part)
    old_marker = {}
    raw = _read(_on_drive(drive, MARKER))
    if raw:
        try:
            old_marker = json.loads(raw)
        except ValueError:
            old_marker = {}
        if not isinstance(old_marker, dict):
            old_marker = {}

    # the release's files, written where they differ
    for n in sorted(names):
        if n in ("settings.toml", KEYS_FILE):
            continue
        have = _read(_on_drive(drive, n))
        if have == files[n]:
            p.unchanged.append(n)
        else:
            p.writes[n] = files[n]
            if have is None:
                p.new.add(n)
    # settings.toml: the owner's (WiFi, pins) once there; the release's template on a new drive
    if os.path.exists(_on_drive(drive, "settings.toml")):
        p.kept.append("settings.toml")
        if _read(_on_drive(drive, "settings.toml")) != files["settings.toml"]:
            p.notes.append("settings.toml is yours and stays; the release's template is settings.toml in the zip")
    else:
        p.writes["settings.toml"] = files["settings.toml"]
        p.new.add("settings.toml")
    # ota_keys.txt: the release's keys plus the owner's own
    drive_keys = _read(_on_drive(drive, KEYS_FILE))
    text, owner = merged_keys(files[KEYS_FILE].decode(), drive_keys.decode("utf-8", "replace") if drive_keys else "",
                              old_marker.get("keys") or [])
    if owner:
        p.notes.append("ota_keys.txt: the release's keys and %d of yours (kept)" % len(owner))
    if drive_keys != text.encode():
        p.writes[KEYS_FILE] = text.encode()
        if drive_keys is None:
            p.new.add(KEYS_FILE)
    else:
        p.unchanged.append(KEYS_FILE)
    # what goes: files of the release-owned places that this release does not have, and an update under way
    release = set(names)
    candidates = []
    for folder in APP_FOLDERS:
        candidates += _walk(drive, folder)
    for lib in sorted(libs):
        candidates += _walk(drive, "lib/" + lib)
        candidates += ["lib/%s.py" % lib, "lib/%s.mpy" % lib]
    candidates += [f for f in old_marker.get("files") or [] if isinstance(f, str) and _release_owned(f, libs)]
    for rel in sorted(set(candidates)):
        if rel not in release and os.path.isfile(_on_drive(drive, rel)):
            p.removes.append(rel)
    ours = old_marker or os.path.isfile(_on_drive(drive, "core/version.py"))
    foreign = [r for r in p.removes if r.split("/")[0] in APP_FOLDERS]
    if foreign and not ours and not replace_foreign:
        raise InstallError("%s holds no Meter Plus yet, but its %s hold files of something else (%s): move them away "
                           "or pass --replace-folders to let the install remove them; nothing was written"
                           % (drive, ", ".join(sorted(set(r.split("/")[0] + "/" for r in foreign))),
                              ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")))
    under_way = []
    for rel in UPDATE_IN_PROGRESS:
        path = _on_drive(drive, rel)
        if os.path.isdir(path):
            under_way += _walk(drive, rel)
        elif os.path.isfile(path):
            under_way.append(rel)
    if under_way:
        p.notes.append("an update was under way (ota/journal, ota/stage, ota/prev): it is ended, this install "
                       "replaces it")
        p.removes += under_way
    # everything else on the drive is the owner's
    for root, dirs, fnames in os.walk(drive):
        dirs.sort()
        for n in sorted(fnames):
            rel = os.path.relpath(os.path.join(root, n), drive).replace(os.sep, "/")
            if rel not in release and rel not in p.removes and rel not in ("settings.toml", "boot_out.txt") \
                    and not _release_owned(rel, libs):
                p.kept.append(rel)
    return p


def needed_bytes(drive, p, unit):
    """Bytes the plan needs on top of what it frees (whole allocation units, plus MARGIN)."""
    def alloc(n):
        return (n + unit - 1) // unit * unit

    need = sum(alloc(len(data)) for data in p.writes.values())
    freed = 0
    for rel in list(p.writes) + p.removes:
        path = _on_drive(drive, rel)
        if os.path.isfile(path):
            freed += alloc(os.path.getsize(path))
    return need - freed + MARGIN


# ---- doing it ------------------------------------------------------------------------------------------------------

class LinkFound(InstallError):
    """A symbolic link turned up below the drive during the install: nothing is removed or written through it."""


def _no_link(drive, rel):
    """rel's path on the drive, after checking that no part of it below the drive is a symbolic link (one made after
    check_drive looked); LinkFound otherwise. A part that does not exist yet is fine (it will be made)."""
    parts = rel.split("/")
    for i in range(1, len(parts) + 1):
        path = _on_drive(drive, "/".join(parts[:i]))
        if os.path.islink(path) or (hasattr(os.path, "isjunction") and os.path.isjunction(path)):
            raise LinkFound("%s is a symbolic link now (it was not when the drive was checked): the install stopped "
                            "there and followed nothing; remove it and run this again" % path)
    return _on_drive(drive, rel)


def _make_folders(drive, rel):
    """The folders of rel on the drive, made one at a time, none through a link."""
    parts = rel.split("/")[:-1]
    for i in range(1, len(parts) + 1):
        path = _no_link(drive, "/".join(parts[:i]))
        if not os.path.isdir(path):
            os.mkdir(path)


_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_BINARY", 0) | getattr(os, "O_NOFOLLOW", 0)


def apply(drive, p):
    """Remove, then write (each file flushed to the drive); empty folders left by removals go too. Every path is
    checked for a symbolic link below the drive just before it is used (LinkFound: stopped, nothing followed)."""
    for rel in p.removes:
        os.remove(_no_link(drive, rel))
    for rel in sorted(set(os.path.dirname(r) for r in p.removes if "/" in r), key=lambda d: -d.count("/")):
        d = _no_link(drive, rel)
        while rel and os.path.isdir(d) and not os.listdir(d):
            os.rmdir(d)
            rel = os.path.dirname(rel)
            d = _no_link(drive, rel) if rel else drive
    order = sorted(p.writes, key=lambda r: (r == "code.py", r))    # code.py last: the board restarts into a whole set
    for rel in order:
        _make_folders(drive, rel)
        fd = os.open(_no_link(drive, rel), _WRITE_FLAGS, 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(p.writes[rel])
            f.flush()
            os.fsync(f.fileno())
    if hasattr(os, "sync"):
        os.sync()


def default_zip():
    """dist/meterplus-<core/version.py>/meterplus-<version>-circuitpy.zip of this repository."""
    try:
        with open(os.path.join(REPO, "core", "version.py")) as f:
            version = re.search(r'^VERSION\s*=\s*"([^"]+)"', f.read(), re.M).group(1)
    except (OSError, AttributeError):
        return None
    name = "meterplus-" + version
    return os.path.join(REPO, "dist", name, name + "-circuitpy.zip")


def install(drive, zip_path, dry_run=False, out=print, replace_foreign=False):
    """Check, plan, check the room, then (unless dry_run) write. Returns the Plan; InstallError when refused."""
    cp_version, board = check_drive(drive)
    p = plan(drive, zip_path, replace_foreign)
    free, unit = free_bytes(drive)
    need = needed_bytes(drive, p, unit)
    head = "Meter Plus %s (%s) onto %s (CircuitPython %s, %s)" % (p.version, p.code, drive, cp_version, board)
    if need > free:
        raise InstallError("%s: the drive has %d KB free and the release needs %d KB more: nothing was written. Make "
                           "room (old files of your own, logs you downloaded) and run this again"
                           % (head, free // 1024, need // 1024))
    if not dry_run and not os.access(drive, os.W_OK):
        raise InstallError("%s is read-only for this computer: the firmware's boot.py keeps the drive for itself. "
                           "Press and release reset, then hold the BOOT button until the drive appears (it stays "
                           "writable over USB then) and run this again; nothing was written" % drive)
    out(("Would install " if dry_run else "Installing ") + head)
    out("  note: CircuitPython %s on %s is what boot_out.txt says: a file on the drive, which this tool cannot check "
        "against the board itself (nothing on the drive can tell an ESP32-S3 from another chip). CircuitPython writes "
        "it anew at every start: press reset once before installing if the drive might have come from elsewhere"
        % (cp_version, board))
    if dry_run and not os.access(drive, os.W_OK):
        out("  note: the drive is read-only for this computer now: press and release reset, then hold BOOT until the "
            "drive appears, before installing")
    for rel in p.removes:
        out("  remove  %s" % rel)
    for rel in sorted(p.writes):
        out("  %s %s" % ("new    " if rel in p.new else "replace", rel))
    out("  %d files unchanged; keep (yours): %s" % (len(p.unchanged), ", ".join(_summary(p.kept)) or "nothing yet"))
    for note in p.notes:
        out("  note: " + note)
    if dry_run:
        out("dry run: nothing written")
        return p
    try:
        apply(drive, p)
    except LinkFound as exc:
        raise InstallError("%s: %s. The drive may be half installed; only the release's own files on it were "
                           "removed or written" % (drive, exc))
    except OSError as exc:
        raise InstallError("writing to %s failed (%s): the drive may be half installed; run this again once the "
                           "cause is gone (only the release's own files on it were removed or written: yours were "
                           "not touched, and nothing outside the drive)" % (drive, exc))
    out("done: %d files written, %d removed. Eject the drive before you unplug it; the board restarts into %s."
        % (len(p.writes), len(p.removes), p.version))
    return p


def _summary(kept):
    """Top-level names of the owner's files (history/ rather than every file in it)."""
    out = []
    for rel in kept:
        top = rel.split("/")[0] + ("/" if "/" in rel else "")
        if top not in out:
            out.append(top)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m tools.install", description=__doc__.split("\n")[0])
    p.add_argument("drive", help="where the CIRCUITPY drive is mounted")
    p.add_argument("--zip", help="the drive image (default: this repository's dist/ for core/version.py's version)")
    p.add_argument("--dry-run", action="store_true", help="list what would change; write nothing")
    p.add_argument("--replace-folders", action="store_true",
                   help="on a drive without Meter Plus: remove other files in core/, drivers/, meter/, services/, web/")
    a = p.parse_args(argv)
    zip_path = a.zip or default_zip()
    if not zip_path or not os.path.isfile(zip_path):
        print("tools.install: no release zip at %s: run make release first (or give --zip)" % zip_path,
              file=sys.stderr)
        return 1
    try:
        install(a.drive, zip_path, a.dry_run, replace_foreign=a.replace_folders)
    except InstallError as exc:
        print("tools.install: %s" % exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
