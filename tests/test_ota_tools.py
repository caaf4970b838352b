"""The release tools: python -m tools.ota_keygen DIR makes a key pair; python -m tools.ota_manifest ... --key signs
what the device checks (its own Ed25519 code verifies the result); --archive builds the upload file."""

import os
import stat
import subprocess
import sys
import tarfile

from services.ota import signature as sg
from tests.ota_server import ROOT


def tool(*args, cwd=None):
    return subprocess.run([sys.executable, "-m"] + list(args), cwd=cwd or ROOT, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=ROOT), timeout=120)


def test_keygen_makes_a_private_key_only_its_owner_reads_and_never_replaces_one(tmp_path):
    r = tool("tools.ota_keygen", str(tmp_path / "k"))
    assert r.returncode == 0, r.stderr
    priv = tmp_path / "k" / "ota_private_key.pem"
    assert stat.S_IMODE(os.stat(priv).st_mode) == 0o600
    keys = sg.parse_keys((tmp_path / "k" / "ota_public_key.txt").read_text())
    assert len(keys) == 1
    before = priv.read_bytes()
    r = tool("tools.ota_keygen", str(tmp_path / "k"))
    assert r.returncode == 1 and "not replaced" in r.stderr and priv.read_bytes() == before


def test_manifest_signed_with_key_verifies_on_the_device_code_and_the_archive_holds_it(tmp_path):
    assert tool("tools.ota_keygen", str(tmp_path / "k")).returncode == 0
    out = tmp_path / "pub" / "manifest.json"
    out.parent.mkdir()
    r = tool("tools.ota_manifest", ROOT, "9.1.0", "--key", str(tmp_path / "k" / "ota_private_key.pem"), "--out",
             str(out), "--base", "9.1.0/", "--min-version", "9.0.0", "--archive", str(tmp_path / "r.tar"))
    assert r.returncode == 0, r.stderr
    data = out.read_bytes()
    keys = sg.parse_keys((tmp_path / "k" / "ota_public_key.txt").read_text())
    check = sg.ManifestSignatureCheck(data, sg.parse_signature((tmp_path / "pub" / "manifest.json.sig").read_bytes()),
                                      keys)
    while not check.step():
        pass
    assert check.ok
    with tarfile.open(tmp_path / "r.tar") as tar:
        names = tar.getnames()
        assert names[:2] == ["manifest.json", "manifest.json.sig"] and "code.py" in names
        assert tar.extractfile("manifest.json").read() == data
    # --sign-only signs a manifest as it is; a changed byte no longer verifies
    (tmp_path / "m2.json").write_bytes(data.replace(b"9.1.0", b"9.1.1"))
    r = tool("tools.ota_manifest", "--sign-only", str(tmp_path / "m2.json"), "--key",
             str(tmp_path / "k" / "ota_private_key.pem"))
    assert r.returncode == 0, r.stderr
    sig2 = sg.parse_signature((tmp_path / "m2.json.sig").read_bytes())
    for text, ok in ((tmp_path / "m2.json").read_bytes(), True), (data, False):
        check = sg.ManifestSignatureCheck(text, sig2, keys)
        while not check.step():
            pass
        assert check.ok is ok


def test_without_key_the_manifest_goes_to_stdout_unsigned(tmp_path):
    r = tool("tools.ota_manifest", ROOT, "9.1.0")
    assert r.returncode == 0 and '"version": "9.1.0"' in r.stdout
    r = tool("tools.ota_manifest", ROOT, "9.1.0", "--archive", str(tmp_path / "x.tar"))
    assert r.returncode != 0 and "--key" in r.stderr
