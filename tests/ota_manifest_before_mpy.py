"""services/ota/manifest.py as firmware before the compiled form (commit 3e1937e) has it, byte for byte below this
line: tests/test_ota_manifest.py checks that a device running it reads a release's manifests as docs/ota.md says.

The update manifest: parse and validate it, compare versions, decide which paths an update may replace."""

import json

MAX_MANIFEST_BYTES = 32768
MAX_FILE_BYTES = 262144          # 256 KB: a source file far above this is a mistake
MAX_TOTAL_BYTES = 2097152        # 2 MB: the application is ~400 KB; CIRCUITPY on 8 MB boards holds ~6 MB
MAX_FILES = 300
APP_FOLDERS = ("core/", "drivers/", "meter/", "services/", "web/")
APP_FILES = ("code.py",)
_PATH_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-/"
_HEX = "0123456789abcdef"
_DIGITS = "0123456789"
KEYS_FILE = "ota_keys.txt"   # the trusted public keys beside boot.py: written over USB only, never by an update
# Files an update never writes, whatever the manifest or an uploaded archive says (boot.py's anchor and its keys).
PROTECTED = ("boot.py", KEYS_FILE)


class ManifestError(ValueError):
    """A manifest that must not be used; the message says why."""


def parse_version(text):
    """Tuple of ints of a dotted version (1 to 4 numbers, e.g. 0.2.0); ValueError otherwise."""
    if not isinstance(text, str) or not 1 <= len(text) <= 23:
        raise ValueError("version must be dotted numbers like 0.2.0")
    parts = text.split(".")
    if len(parts) > 4:
        raise ValueError("version has more than 4 parts: %s" % text)
    out = []
    for p in parts:
        # ASCII digits only: str.isdigit() and int() also take other scripts' digits ("\u0669" reads as 9)
        if not p or len(p) > 5 or any(c not in _DIGITS for c in p):
            raise ValueError("version must be dotted numbers like 0.2.0: %s" % text)
        out.append(int(p))
    while len(out) < 4:
        out.append(0)
    return tuple(out)


def is_newer(candidate, running):
    """True when version text candidate is higher than running (1.2 == 1.2.0)."""
    return parse_version(candidate) > parse_version(running)


def path_problem(path):
    """Why path may not be replaced by an update, or None (application files only: docs/ota.md)."""
    if not isinstance(path, str) or not path or len(path) > 96:
        return "path must be 1 to 96 characters"
    # What strip(allowed) leaves is a character outside the set. It runs in C: a 150-file manifest is validated in
    # one poll of 294 S3 ms, not the 900 of a loop over every character (docs/ota.md).
    if path.strip(_PATH_CHARS):
        return "path may hold letters, digits, . _ - and / only"
    if path.startswith("/") or path.endswith("/") or "//" in path:
        return "path must be relative to the drive root"
    if path.startswith(".") or "/." in path:   # a part that starts with a dot (".", "..", ".hidden")
        return "path parts must not start with a dot"
    if path == "boot.py":
        return "boot.py is the rollback anchor and is not updated over the network (update it over USB)"
    if path in PROTECTED:
        return "%s holds the trusted update keys and is changed over USB only" % path
    if path in APP_FILES:
        return None
    for folder in APP_FOLDERS:
        if path.startswith(folder):
            return None
    return "not an application file (code.py, core/, drivers/, meter/, services/, web/)"


def base_problem(base):
    """Why base is not a folder relative to the manifest's (no scheme, host, absolute path or ..), or None."""
    if base.strip(_PATH_CHARS):
        return "letters, digits, . _ - and / only"
    if base.startswith("/") or "//" in base:
        return "no absolute path or host"
    for part in base.split("/"):
        if part == "..":
            return "no .."
    return None


def _text(doc, key, limit, required):
    v = doc.get(key, None)
    if v is None and not required:
        return ""
    if not isinstance(v, str) or len(v) > limit:
        raise ManifestError("%s must be a string of at most %d characters" % (key, limit))
    return v


def parse_manifest(data):
    """The validated manifest as a dict (version, release_date, notes_de, notes_en, base, files, total); files is a
    list of (path, size, sha256 hex). Raises ManifestError with the first problem found."""
    if len(data) > MAX_MANIFEST_BYTES:
        raise ManifestError("manifest larger than %d bytes" % MAX_MANIFEST_BYTES)
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeError):
        raise ManifestError("manifest is not JSON")
    except RuntimeError:  # RecursionError on CPython, "maximum recursion depth exceeded" in MicroPython
        raise ManifestError("manifest is nested too deeply")
    if not isinstance(doc, dict):
        raise ManifestError("manifest must be a JSON object")
    if doc.get("format", 1) != 1:
        raise ManifestError("unknown manifest format %r (this firmware reads format 1)" % (doc.get("format"),))
    version = _text(doc, "version", 23, True)
    try:
        parse_version(version)
    except ValueError as exc:
        raise ManifestError(str(exc))
    notes = doc.get("notes", {})
    if not isinstance(notes, dict):
        raise ManifestError("notes must be an object with de and en")
    files = doc.get("files")
    if not isinstance(files, list) or not 1 <= len(files) <= MAX_FILES:
        raise ManifestError("files must be a list of 1 to %d entries" % MAX_FILES)
    out = []
    seen = set()
    total = 0
    for entry in files:
        if not isinstance(entry, dict):
            raise ManifestError("each file must be an object with path, size and sha256")
        path = entry.get("path")
        problem = path_problem(path)
        if problem is not None:
            raise ManifestError("%s: %s" % (path, problem))
        if path in seen:
            raise ManifestError("%s: listed twice" % path)
        seen.add(path)
        size = entry.get("size")
        if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size <= MAX_FILE_BYTES:
            raise ManifestError("%s: size must be 0 to %d bytes" % (path, MAX_FILE_BYTES))
        sha = entry.get("sha256")
        if not isinstance(sha, str) or len(sha) != 64 or sha.strip(_HEX):
            raise ManifestError("%s: sha256 must be 64 lower-case hex digits" % path)
        total += size
        out.append((path, size, sha))
    if total > MAX_TOTAL_BYTES:
        raise ManifestError("files add up to %d bytes, more than %d" % (total, MAX_TOTAL_BYTES))
    if "code.py" not in seen:
        raise ManifestError("code.py missing: a manifest lists every application file")
    base = _text(doc, "base", 96, False)
    if base and base_problem(base):
        raise ManifestError("base must be a folder relative to the manifest (%s)" % base_problem(base))
    min_version = _text(doc, "min_version", 23, False)
    if min_version:
        try:
            floor = parse_version(min_version)
        except ValueError as exc:
            raise ManifestError("min_version: %s" % exc)
        if floor > parse_version(version):
            raise ManifestError("min_version %s is above the version %s" % (min_version, version))
    expires = doc.get("expires", 0)
    if isinstance(expires, bool) or not isinstance(expires, int) or not 0 <= expires < 1 << 40:
        raise ManifestError("expires must be Unix seconds (an integer; 0 or absent: never)")
    return {
        "version": version,
        "expires": expires,
        "release_date": _text(doc, "release_date", 32, False),
        "notes_de": _text(notes, "de", 1000, False),
        "notes_en": _text(notes, "en", 1000, False),
        "base": base,
        "min_version": min_version,
        "files": out,
        "total": total,
    }


def expired(m, utc):
    """True when the manifest m carries an expiry (signed with it) that the wall time utc (Unix s) has reached.

    A server (or a man in the middle) replaying an old signed manifest would keep the device from hearing of a newer
    release (a freeze); without a synced clock (utc None) the expiry cannot be checked and the manifest passes."""
    return bool(m.get("expires")) and utc is not None and utc >= m["expires"]
