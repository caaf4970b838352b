"""Update manifest validation, version order, URL handling, and the streaming SHA-256/size check."""

import hashlib
import io
import json

import pytest
from hypothesis import given, settings, strategies as st

from core.url import resolve, split_url
from services.ota import manifest as m
from services.ota.stream import DownloadError, FileHasher, HashingWriter, MemorySink

SHA = hashlib.sha256(b"print(1)\n").hexdigest()


def doc(**over):
    d = {"format": 1, "version": "0.2.0", "release_date": "2026-11-30",
         "notes": {"de": "Neu", "en": "New"},
         "files": [{"path": "code.py", "size": 9, "sha256": SHA},
                   {"path": "core/version.py", "size": 9, "sha256": SHA}]}
    d.update(over)
    return json.dumps(d).encode()


def test_valid_manifest():
    got = m.parse_manifest(doc())
    assert got["version"] == "0.2.0" and got["notes_de"] == "Neu" and got["notes_en"] == "New"
    assert got["files"] == [("code.py", 9, SHA), ("core/version.py", 9, SHA)] and got["total"] == 18


@pytest.mark.parametrize("over,needle", [
    ({"version": "1.x"}, "version"),
    ({"version": 2}, "version"),
    ({"format": 2}, "format"),
    ({"format": 3}, "format"),
    ({"format": True}, "format"),
    ({"files": [{"path": "code.py", "size": 9, "sha256": SHA}, {"path": "core/a.py", "size": 9, "sha256": SHA},
                {"path": "core/a.mpy", "size": 9, "sha256": SHA}]}, "would win"),
    ({"mpy": "6"}, "mpy"),
    ({"mpy": {"version": 6}}, "mpy.manifest"),
    ({"mpy": {"version": 6, "manifest": "../x.json", "size": 9, "sha256": SHA}}, "mpy.manifest"),
    ({"mpy": {"version": 6, "manifest": "https://evil.example/m.json", "size": 9, "sha256": SHA}}, "mpy.manifest"),
    ({"mpy": {"version": 6, "manifest": "m.json", "size": 0, "sha256": SHA}}, "mpy.size"),
    ({"mpy": {"version": 6, "manifest": "m.json", "size": 9, "sha256": SHA.upper()}}, "mpy.sha256"),
    ({"mpy": {"version": "6.3", "manifest": "m.json", "size": 9, "sha256": SHA}}, "mpy.version"),
    ({"format": 2, "mpy": {"version": 0}}, "mpy.version"),
    ({"files": []}, "files"),
    ({"files": [{"path": "code.py", "size": 9, "sha256": SHA.upper()}]}, "sha256"),
    ({"files": [{"path": "code.py", "size": 9, "sha256": SHA[:-1]}]}, "sha256"),
    ({"files": [{"path": "code.py", "size": -1, "sha256": SHA}]}, "size"),
    ({"files": [{"path": "code.py", "size": True, "sha256": SHA}]}, "size"),
    ({"files": [{"path": "code.py", "size": m.MAX_FILE_BYTES + 1, "sha256": SHA}]}, "size"),
    ({"files": [{"path": "code.py", "size": 9, "sha256": SHA}] * 2}, "twice"),
    ({"files": [{"path": "boot.py", "size": 9, "sha256": SHA}]}, "anchor"),
    ({"files": [{"path": "settings.json", "size": 9, "sha256": SHA}]}, "application"),
    ({"files": [{"path": "history.bin", "size": 9, "sha256": SHA}]}, "application"),
    ({"files": [{"path": "core/../settings.json", "size": 9, "sha256": SHA}]}, "dot"),
    ({"files": [{"path": "/code.py", "size": 9, "sha256": SHA}]}, "relative"),
    ({"files": [{"path": "core/version.py", "size": 9, "sha256": SHA}]}, "code.py missing"),
    ({"files": [{"path": "code.py", "size": 9, "sha256": SHA}] +
      [{"path": "web/f%d.js" % i, "size": m.MAX_FILE_BYTES, "sha256": SHA} for i in range(9)]}, "add up"),
    ({"notes": "x"}, "notes"),
    ({"expires": "2027-01-01"}, "expires"),
    ({"expires": True}, "expires"),
    ({"expires": -1}, "expires"),
    ({"expires": 1.5e9}, "expires"),
])
def test_bad_manifests_are_rejected_with_the_reason(over, needle):
    with pytest.raises(m.ManifestError) as e:
        m.parse_manifest(doc(**over))
    assert needle in str(e.value)


def compiled_doc(**over):
    d = {"format": 2, "version": "0.2.0", "mpy": {"version": 6, "compiler": "CircuitPython 10.2.1"},
         "files": [{"path": "code.py", "size": 9, "sha256": SHA},
                   {"path": "core/version.mpy", "size": 9, "sha256": SHA},
                   {"path": "core/tz.dat", "size": 9, "sha256": SHA}]}
    d.update(over)
    return json.dumps(d).encode()


POINTER = {"version": 6, "compiler": "CircuitPython 10.2.1", "manifest": "manifest-mpy.json", "size": 300,
           "sha256": SHA}


def test_the_compiled_form_and_the_manifest_that_names_it():
    """Format 2 lists the compiled form (.mpy files of one version); format 1 may name it (pinned by size and
    SHA-256, so its own signature is not needed on the network path)."""
    got = m.parse_manifest(compiled_doc())
    assert got["format"] == 2 and got["mpy"] == 6 and got["mpy_manifest"] is None
    assert [p for p, _s, _h in got["files"]] == ["code.py", "core/version.mpy", "core/tz.dat"]
    got = m.parse_manifest(doc(mpy=POINTER))
    assert got["format"] == 1 and got["mpy"] == 6 and got["mpy_manifest"] == ("manifest-mpy.json", 300, SHA)
    plain = m.parse_manifest(doc())
    assert plain["mpy"] is None and plain["mpy_manifest"] is None


def test_firmware_before_the_compiled_form_reads_the_new_manifests_as_docs_say():
    """A device running today's firmware (its manifest.py, copied): the format 1 manifest that names a compiled form
    is read as before (its source files; the "mpy" object is ignored), the format 2 manifest (an uploaded -mpy.tar)
    is refused with the reason, before any file is staged."""
    from tests import ota_manifest_before_mpy as old

    got = old.parse_manifest(doc(mpy=POINTER))
    assert [p for p, _s, _h in got["files"]] == ["code.py", "core/version.py"]
    with pytest.raises(old.ManifestError, match="unknown manifest format 2 \\(this firmware reads format 1\\)"):
        old.parse_manifest(compiled_doc())


@pytest.mark.parametrize("path,other", [("core/a.py", "core/a.mpy"), ("services/ota/x.mpy", "services/ota/x.py"),
                                        ("code.py", None), ("web/app.js", None), ("core/tz.dat", None),
                                        ("web/x.py", None)])
def test_twins(path, other):
    assert m.twin(path) == other


def test_the_running_mpy_version(monkeypatch):
    """CircuitPython's sys.implementation._mpy: low byte the .mpy version (the bench's 10.2.1 says 0x706: v6,
    sub-version 3 and its native arch above); CPython (the host runtime) has none."""
    import sys
    import types

    assert m.running_mpy() is None
    monkeypatch.setattr(sys, "implementation", types.SimpleNamespace(name="circuitpython", _mpy=0x706))
    assert m.running_mpy() == 6
    monkeypatch.setattr(sys, "implementation", types.SimpleNamespace(name="micropython", _mpy=0x706))
    assert m.running_mpy() is None     # MicroPython's .mpy files start with 'M': CircuitPython's are another kind


def test_the_compiled_form_inside_micropython():
    from tools.mpvm import MicroVM

    with MicroVM(packages=("core", "services")) as vm:
        out, _fuel = vm.run(
            "from services.ota import manifest as m\n"
            "a = m.parse_manifest(%r)\n"
            "b = m.parse_manifest(%r)\n"
            "print(a['format'], a['mpy'], b['mpy_manifest'][0], m.twin('core/a.py'), m.running_mpy())\n"
            % (compiled_doc().decode(), doc(mpy=POINTER).decode()))
    assert out.split() == ["2", "6", "manifest-mpy.json", "core/a.mpy", "None"]


def test_an_optional_expiry_in_unix_seconds():
    """Issue 26 finding 11: manifests had no expiry, so an old signed manifest served again hid newer releases."""
    assert m.parse_manifest(doc())["expires"] == 0
    got = m.parse_manifest(doc(expires=1800000000))
    assert got["expires"] == 1800000000
    assert not m.expired(got, 1799999999) and m.expired(got, 1800000000)
    assert not m.expired(got, None)                           # no synced clock: cannot tell
    assert not m.expired(m.parse_manifest(doc()), 1 << 40)    # no expiry: never


def test_not_json_and_too_large():
    with pytest.raises(m.ManifestError, match="not JSON"):
        m.parse_manifest(b"<html>")
    with pytest.raises(m.ManifestError, match="larger"):
        m.parse_manifest(b" " * (m.MAX_MANIFEST_BYTES + 1))


@pytest.mark.parametrize("a,b,newer", [
    ("0.2.0", "0.1.0", True), ("0.10.0", "0.9.9", True), ("1.0", "1.0.0", False), ("1.0.1", "1.0", True),
    ("0.1.0", "0.1.0", False), ("0.0.9", "0.1.0", False),
])
def test_version_order_is_numeric(a, b, newer):
    assert m.is_newer(a, b) is newer


@pytest.mark.parametrize("url,parts", [
    ("http://192.168.1.5:8000/ota/manifest.json", ("http", "192.168.1.5", 8000, "/ota/manifest.json")),
    ("https://updates.example.org/m.json", ("https", "updates.example.org", 443, "/m.json")),
    ("http://h", ("http", "h", 80, "/")),
])
def test_split_url(url, parts):
    assert split_url(url) == parts


@pytest.mark.parametrize("url", ["ftp://h/x", "http://", "http://h:0/", "http://h:99999/", "http://a b/",
                                 "http://user@h/", "http://h_x/", "x" * 300, 5])
def test_bad_urls(url):
    with pytest.raises(ValueError):
        split_url(url)


def test_resolve():
    assert resolve("http://h:1/ota/manifest.json", "0.2.0/code.py") == "http://h:1/ota/0.2.0/code.py"
    assert resolve("http://h:1/ota/manifest.json", "/x/y") == "http://h:1/x/y"
    assert resolve("http://h/ota/m.json", "https://cdn/x") == "https://cdn/x"


class Recorder(io.BytesIO):
    def close(self):
        self.closed_value = self.getvalue()
        io.BytesIO.close(self)


def stream(data, size, sha, chunks=4):
    f = Recorder()
    w = HashingWriter(f, size, sha, "code.py")
    step = max(1, len(data) // chunks)
    for i in range(0, len(data), step):
        w.write(memoryview(data)[i:i + step])
    w.finish()
    return f.closed_value


def test_streaming_check_accepts_the_announced_file():
    assert stream(b"print(1)\n", 9, SHA) == b"print(1)\n"


@pytest.mark.parametrize("data,size,reason", [
    (b"print(2)\n", 9, "corrupted"),
    (b"print(1)", 9, "truncated"),
    (b"print(1)\n\n", 9, "oversized"),
])
def test_streaming_check_rejects(data, size, reason):
    with pytest.raises(DownloadError) as e:
        stream(data, size, SHA)
    assert e.value.reason == reason


def test_oversized_stops_before_writing_the_excess():
    f = Recorder()
    w = HashingWriter(f, 4, SHA, "x")
    w.write(b"1234")
    with pytest.raises(DownloadError):
        w.write(b"5")
    assert f.getvalue() == b"1234"


def test_full_drive_is_reported_as_such():
    class Full(io.BytesIO):
        def write(self, b):
            raise OSError(28, "ENOSPC")

    with pytest.raises(DownloadError) as e:
        HashingWriter(Full(), 9, SHA, "code.py").write(b"print")
    assert e.value.reason == "drive_full"


def test_memory_sink_limit():
    s = MemorySink(4)
    s.write(b"1234")
    with pytest.raises(DownloadError):
        s.write(b"5")


def test_file_hasher_in_slices(tmp_path):
    p = tmp_path / "f"
    data = bytes(range(256)) * 40
    p.write_bytes(data)
    h = FileHasher(str(p), bytearray(1000))
    steps = 0
    while not h.step():
        steps += 1
    assert steps == 11 and h.size == len(data) and h.sha == hashlib.sha256(data).hexdigest()
    missing = FileHasher(str(tmp_path / "nope"), bytearray(10))
    assert missing.step() and missing.size is None


def test_manifest_and_streaming_check_inside_micropython():
    """The same validation and SHA-256 (hashlib.new + binascii.hexlify) inside a real MicroPython VM."""
    from tools.mpvm import MicroVM

    with MicroVM(packages=("core", "services")) as vm:
        out, _fuel = vm.run(
            "from services.ota import manifest as m\n"
            "from services.ota.stream import HashingWriter, DownloadError\n"
            "d = m.parse_manifest(%r)\n"
            "print(d['version'], len(d['files']), m.is_newer('0.10.0', '0.9.1'))\n"
            "class F:\n"
            "    def write(self, b): pass\n"
            "    def close(self): pass\n"
            "w = HashingWriter(F(), 9, %r, 'code.py')\n"
            "w.write(memoryview(b'print(1)\\n')[:4]); w.write(memoryview(b'print(1)\\n')[4:])\n"
            "w.finish(); print('sha ok')\n"
            "w = HashingWriter(F(), 9, %r, 'code.py')\n"
            "w.write(b'print(2)\\n')\n"
            "try:\n    w.finish()\nexcept DownloadError as e:\n    print(e.reason)\n"
            % (doc().decode(), SHA, SHA))
    assert out.split() == ["0.2.0", "2", "True", "sha", "ok", "corrupted"]


# ------------------------------------------------------------------ audit of issue 18 (each failed on the old code)

@pytest.mark.parametrize("version", ["\u0669.0.0", "1.\u0662", "\uff11.0", "1..2", "1.", "+1.0", " 1.0"])
def test_versions_are_ascii_digits_only(version):
    """str.isdigit() took Arabic-Indic and full-width digits: "\u0669.0.0" read as 9.0.0."""
    with pytest.raises(ValueError):
        m.parse_version(version)
    with pytest.raises(m.ManifestError):
        m.parse_manifest(doc(version=version))


@pytest.mark.parametrize("base", ["https://evil.example/x/", "http://127.0.0.1:9/", "//evil.example/x/", "/abs/",
                                  "a/../../", "x:y/", "a b/"])
def test_base_must_be_relative_to_the_manifest(base):
    """An absolute URL to another host was accepted (docs/ota.md says relative)."""
    with pytest.raises(m.ManifestError, match="base"):
        m.parse_manifest(doc(base=base))


def test_relative_bases_still_work():
    assert m.parse_manifest(doc(base="0.2.0/"))["base"] == "0.2.0/"
    assert m.parse_manifest(doc(base="releases/0.2.0/"))["base"] == "releases/0.2.0/"


def test_a_manifest_nested_5000_deep_is_a_manifest_error_not_a_crash():
    deep = b'{"version": "0.2.0", "x": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    with pytest.raises(m.ManifestError, match="nested"):
        m.parse_manifest(deep)


@pytest.mark.parametrize("path", ["ota_keys.txt", "boot.py"])
def test_the_keys_file_and_boot_py_are_never_update_paths(path):
    assert path in m.PROTECTED
    with pytest.raises(m.ManifestError) as e:
        m.parse_manifest(doc(files=[{"path": "code.py", "size": 9, "sha256": SHA},
                                    {"path": path, "size": 9, "sha256": SHA}]))
    assert path in str(e.value) and "USB" in str(e.value)


def test_min_version():
    assert m.parse_manifest(doc(min_version="0.1.5"))["min_version"] == "0.1.5"
    assert m.parse_manifest(doc())["min_version"] == ""
    with pytest.raises(m.ManifestError, match="above"):
        m.parse_manifest(doc(min_version="0.3.0"))
    with pytest.raises(m.ManifestError, match="min_version"):
        m.parse_manifest(doc(min_version="\u0669"))


# ------------------------------------------------------------------ the character and dot rules, checked in C (strip)

BAD_PATHS = ["core/a b.py", "core/\u00fc.py", "core/x.py\n", " core/x.py", "core/x\x00.py", "core\\x.py", "web/ä",
             ".x", "core/.x/y.py", "core/./y.py", "core/x/..", "./code.py"]
BAD_SHAS = [SHA[:30] + "g" + SHA[31:], "G" + SHA[1:], SHA[:-1] + "\u0661", SHA[:32] + " " + SHA[33:], "-" * 64]


@pytest.mark.parametrize("path", BAD_PATHS)
def test_a_bad_character_or_dot_part_anywhere_in_a_path_is_refused(path):
    # path.strip(allowed) leaves what is outside the set wherever it is, not only at the ends
    assert m.path_problem(path) is not None
    with pytest.raises(m.ManifestError):
        m.parse_manifest(doc(files=[{"path": "code.py", "size": 9, "sha256": SHA},
                                    {"path": path, "size": 9, "sha256": SHA}]))


@pytest.mark.parametrize("sha", BAD_SHAS)
def test_a_non_hex_digit_anywhere_in_a_sha256_is_refused(sha):
    with pytest.raises(m.ManifestError, match="sha256"):
        m.parse_manifest(doc(files=[{"path": "code.py", "size": 9, "sha256": sha}]))


@settings(deadline=None)   # a busy CI worker must not turn a slow example into a failure (as the other property tests)
@given(st.text(alphabet="ab./-_ Z9\u00fc\\:", max_size=12))
def test_the_path_rules_are_the_per_character_and_per_part_rules(text):
    path = "core/" + text
    chars_ok = all(c in m._PATH_CHARS for c in path)
    parts_ok = not any(part.startswith(".") for part in path.split("/"))
    if not chars_ok or not parts_ok or path.endswith("/") or "//" in path:
        assert m.path_problem(path) is not None
    else:
        assert m.path_problem(path) is None


def test_the_path_and_sha256_rules_agree_inside_micropython():
    """str.strip(chars) on the device's VM: the same verdicts as on CPython."""
    from tools.mpvm import MicroVM

    paths = BAD_PATHS + ["core/a.py", "web/app.js.gz", "services/ota/x_y-z.py", "code.py"]
    shas = BAD_SHAS + [SHA]
    with MicroVM(packages=("core", "services")) as vm:
        out, _fuel = vm.run("from services.ota import manifest as m\n"
                            "print([m.path_problem(p) is None for p in %r])\n"
                            "print([not s.strip(m._HEX) for s in %r])\n" % (paths, shas))
    assert out.split("\n")[:2] == [str([m.path_problem(p) is None for p in paths]),
                                   str([False] * len(BAD_SHAS) + [True])]
