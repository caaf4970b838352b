"""The custom CA: one PEM certificate accepted, everything else refused with a reason; crash-safe storage."""

import base64
import os

import pytest

from core.durable_file import read_text, stored
from services.mqtt import ca_store as mqtt_ca
from tools.mpvm import MicroVM


@pytest.fixture
def ca_pem(certs):
    return open(certs["ca.crt"]).read()


def test_one_certificate_is_accepted_and_normalised(ca_pem):
    assert mqtt_ca.validate(ca_pem) == ca_pem.strip() + "\n"
    # CRLF line ends, one long base64 line, bytes: the same certificate.
    body = "".join(ca_pem.strip().splitlines()[1:-1])
    flat = "-----BEGIN CERTIFICATE-----\r\n" + body + "\r\n-----END CERTIFICATE-----\r\n"
    assert mqtt_ca.validate(flat) == ca_pem.strip() + "\n"
    assert mqtt_ca.validate(ca_pem.encode()) == ca_pem.strip() + "\n"


@pytest.mark.parametrize("bad, reason", [
    ("", "BEGIN/END"),
    ("hello", "BEGIN/END"),
    ("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----", "empty"),
    ("-----BEGIN CERTIFICATE-----\nnot*base64\n-----END CERTIFICATE-----", "base64"),
    ("-----BEGIN CERTIFICATE-----\n" + base64.b64encode(b"plain text, not DER").decode()
     + "\n-----END CERTIFICATE-----", "DER"),
])
def test_not_a_certificate_is_refused(bad, reason):
    with pytest.raises(mqtt_ca.CertError) as e:
        mqtt_ca.validate(bad)
    assert reason in str(e.value)


def test_truncated_two_certificates_key_and_binary_are_refused(certs, ca_pem):
    lines = ca_pem.strip().splitlines()
    cut = "\n".join(lines[:2] + lines[-1:])
    with pytest.raises(mqtt_ca.CertError, match="DER"):
        mqtt_ca.validate(cut)
    with pytest.raises(mqtt_ca.CertError, match="exactly one"):
        mqtt_ca.validate(ca_pem + open(certs["server.crt"]).read())
    with pytest.raises(mqtt_ca.CertError):
        mqtt_ca.validate(open(certs["server.key"]).read())
    with pytest.raises(mqtt_ca.CertError, match="not text"):
        mqtt_ca.validate(b"\xff\xfe" * 10)
    with pytest.raises(mqtt_ca.CertError):
        mqtt_ca.validate(12)


def test_over_the_size_limit(ca_pem):
    padded = ca_pem + " " * (mqtt_ca.MAX_BYTES + 1 - len(ca_pem))
    with pytest.raises(mqtt_ca.TooLarge):
        mqtt_ca.validate(padded)
    with pytest.raises(mqtt_ca.TooLarge):
        mqtt_ca.validate(padded.encode())
    assert mqtt_ca.validate(padded[:-1])  # exactly the limit is fine


def test_store_save_status_delete(tmp_path, ca_pem):
    store = mqtt_ca.CaStore(str(tmp_path / "mqtt_ca.pem"))
    assert store.status() == {"has_custom_cert": False, "bundle_size": 0, "custom_size": 0}
    assert store.delete() is False
    pem = store.save(ca_pem)
    assert store.status() == {"has_custom_cert": True, "bundle_size": len(pem), "custom_size": len(pem)}
    assert mqtt_ca.CaStore(store.path).pem() == pem  # read back from the file
    with pytest.raises(mqtt_ca.CertError):
        store.save("garbage")
    assert store.pem() == pem and read_text(store.path, str) == pem  # a refused upload changes nothing
    assert store.delete() is True and not stored(store.path) and store.pem() is None


def test_interrupted_writes_leave_a_readable_file(tmp_path, ca_pem, certs):
    path = str(tmp_path / "mqtt_ca.pem")
    old = mqtt_ca.CaStore(path).save(ca_pem)
    new = mqtt_ca.validate(open(certs["server.crt"]).read())
    # Cut while writing .new: the old file stays.
    open(path + ".new", "w").write(new[:100])
    assert mqtt_ca.CaStore(path).pem() == old
    # Cut while rewriting the file in place (emptied or torn): the complete .new is the upload.
    open(path + ".new", "w").write(new)
    for torn in ("", old[:500]):
        open(path, "w").write(torn)
        assert mqtt_ca.CaStore(path).pem() == new
    # An older firmware's rename scheme, cut between its remove and its rename: its complete .tmp is read.
    os.remove(path + ".new")
    os.remove(path)
    open(path + ".tmp", "w").write(old)
    s = mqtt_ca.CaStore(path)
    assert s.pem() == old
    # The next upload works from any of these, and a delete removes every name.
    assert s.save(new) == new and mqtt_ca.CaStore(path).pem() == new
    assert s.delete() is True and os.listdir(tmp_path) == []


def test_store_never_renames(tmp_path, ca_pem, monkeypatch):
    def no_rename(a, b):
        raise AssertionError("rename %s -> %s" % (a, b))

    monkeypatch.setattr(os, "rename", no_rename)
    store = mqtt_ca.CaStore(str(tmp_path / "mqtt_ca.pem"))
    store.save(ca_pem)
    store.save(ca_pem)
    assert os.listdir(tmp_path) == ["mqtt_ca.pem.slots"]     # core/durable_file.py


def test_damaged_file_means_no_custom_ca(tmp_path):
    path = tmp_path / "mqtt_ca.pem"
    path.write_text("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
    assert mqtt_ca.CaStore(str(path)).status()["has_custom_cert"] is False


def test_validation_inside_micropython(ca_pem):
    with MicroVM(packages=("core", "meter", "services")) as vm:
        out, _ = vm.run("""
from services.mqtt import ca_store as mqtt_ca
pem = %r
print("@@", mqtt_ca.validate(pem) == pem.strip() + "\\n")
for bad in ("x", pem + pem, pem.replace("\\nM", "\\n*", 1)):
    try:
        mqtt_ca.validate(bad)
        print("@@ accepted")
    except mqtt_ca.CertError as e:
        print("@@ refused")
try:
    mqtt_ca.validate(pem + " " * 5000)
except mqtt_ca.TooLarge:
    print("@@ too large")
""" % ca_pem)
    assert [line[3:] for line in out.splitlines() if line.startswith("@@")] == [
        "True", "refused", "refused", "refused", "too large"]
