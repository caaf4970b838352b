"""services/mqtt/der.py and the CA upload: only exactly one X.509 certificate passes; keys and crafted DER are refused.

Certificates and keys come from the openssl CLI (RSA, EC, Ed25519; PKCS#8, PKCS#1, SEC1, encrypted PKCS#8);
the crafted DER is built from a real certificate with a small TLV helper that is independent of the code under test.
"""

import base64
import os
import subprocess

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.mqtt import ca_store
from services.mqtt.der import DerError, PrivateKeyError, check_certificate
from tools.mpvm import MicroVM


def _openssl(cwd, *args):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def pems(tmp_path_factory):
    """name -> PEM text of real certificates, keys and other objects made by openssl."""
    d = str(tmp_path_factory.mktemp("der"))
    _openssl(d, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "rsa.key", "-out", "rsa.crt", "-days",
             "2", "-subj", "/C=DE/O=Meter Plus/CN=RSA Test CA", "-addext", "basicConstraints=critical,CA:TRUE")
    _openssl(d, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:secp384r1", "-nodes", "-keyout",
             "ec.key", "-out", "ec.crt", "-days", "2", "-subj", "/CN=EC Test CA")
    _openssl(d, "req", "-x509", "-newkey", "ed25519", "-nodes", "-keyout", "ed.key", "-out", "ed.crt", "-days", "2",
             "-subj", "/CN=Ed25519 Test CA")
    _openssl(d, "req", "-new", "-key", "rsa.key", "-out", "rsa.csr", "-subj", "/CN=request")
    _openssl(d, "x509", "-req", "-in", "rsa.csr", "-signkey", "rsa.key", "-out", "v1.crt", "-days", "2")
    _openssl(d, "rsa", "-in", "rsa.key", "-traditional", "-out", "rsa_pkcs1.key")
    _openssl(d, "ec", "-in", "ec.key", "-out", "ec_sec1.key")
    _openssl(d, "pkcs8", "-topk8", "-in", "rsa.key", "-v2", "aes256", "-passout", "pass:secret", "-out", "enc.key")
    _openssl(d, "pkey", "-in", "ec.key", "-pubout", "-out", "ec.pub")
    _openssl(d, "ca", "-gencrl", "-keyfile", "rsa.key", "-cert", "rsa.crt", "-out", "x.crl", "-config", _ca_conf(d))
    out = {}
    for name in os.listdir(d):
        if name.split(".")[-1] in ("crt", "key", "csr", "pub", "crl"):
            out[name] = open(os.path.join(d, name)).read()
    return out


def _ca_conf(d):
    open(os.path.join(d, "index.txt"), "w").close()
    path = os.path.join(d, "ca.cnf")
    with open(path, "w") as f:
        f.write("[ca]\ndefault_ca = x\n[x]\ndatabase = %s/index.txt\ndefault_md = sha256\ndefault_crl_days = 1\n" % d)
    return path


def der_of(pem):
    lines = pem.strip().splitlines()
    return base64.b64decode("".join(lines[1:-1]))


def as_pem(der, label="CERTIFICATE"):
    b64 = base64.b64encode(der).decode()
    body = "\n".join(b64[i:i + 64] for i in range(0, len(b64), 64))
    return "-----BEGIN %s-----\n%s\n-----END %s-----\n" % (label, body, label)


# --- a TLV helper for the tests (independent of services/mqtt/der.py) ---

def tlv(tag, content, length_octets=None):
    """DER element; length_octets forces the long form with that many octets (non-minimal when not needed)."""
    n = len(content)
    if length_octets is None:
        if n < 0x80:
            head = bytes([n])
        else:
            raw = n.to_bytes((n.bit_length() + 7) // 8, "big")
            head = bytes([0x80 | len(raw)]) + raw
    else:
        head = bytes([0x80 | length_octets]) + n.to_bytes(length_octets, "big")
    return bytes([tag]) + head + content


def children(der):
    """[(tag, content)] of the elements in der (definite lengths)."""
    out = []
    i = 0
    while i < len(der):
        tag, n = der[i], der[i + 1]
        i += 2
        if n & 0x80:
            k = n & 0x7F
            n = int.from_bytes(der[i:i + k], "big")
            i += k
        out.append((tag, der[i:i + n]))
        i += n
    return out


def rebuild(cert, tbs=None, alg=None, sig=None, extra=b"", outer_tag=0x30):
    (_t, body), = children(cert)
    (t1, c1), (t2, c2), (t3, c3) = children(body)
    parts = (tbs if tbs is not None else tlv(t1, c1)) + (alg if alg is not None else tlv(t2, c2)) + \
        (sig if sig is not None else tlv(t3, c3)) + extra
    return tlv(outer_tag, parts)


def tbs_fields(cert):
    (_t, body), = children(cert)
    return children(children(body)[0][1])


def with_tbs(cert, fields):
    return rebuild(cert, tbs=tlv(0x30, b"".join(tlv(t, c) for t, c in fields)))


# --- real objects ---

@pytest.mark.parametrize("name", ["rsa.crt", "ec.crt", "ed.crt", "v1.crt"])
def test_real_certificates_accepted(pems, name):
    check_certificate(der_of(pems[name]))
    assert ca_store.validate(pems[name]) == pems[name].strip() + "\n"


def test_v1_certificate_has_no_version_field(pems):
    assert tbs_fields(der_of(pems["v1.crt"]))[0][0] == 0x02  # serialNumber first: the optional [0] is absent


@pytest.mark.parametrize("name", ["rsa.key", "ec.key", "ed.key", "rsa_pkcs1.key", "ec_sec1.key", "enc.key"])
def test_private_keys_refused_with_their_own_label_or_disguised(pems, name):
    for text in (pems[name], as_pem(der_of(pems[name]))):
        with pytest.raises(ca_store.CertError) as ei:
            ca_store.validate(text)
        assert "private key was sent" in str(ei.value) and "not stored" in str(ei.value)
    with pytest.raises(PrivateKeyError):
        check_certificate(der_of(pems[name]))


def test_certificate_with_its_key_in_one_upload_is_refused_as_a_key(pems):
    with pytest.raises(ca_store.CertError, match="private key was sent"):
        ca_store.validate(pems["rsa.crt"] + pems["rsa.key"])


@pytest.mark.parametrize("name", ["rsa.csr", "ec.pub", "x.crl"])
def test_other_der_objects_labelled_certificate_refused(pems, name):
    with pytest.raises(DerError):
        check_certificate(der_of(pems[name]))
    with pytest.raises(ca_store.CertError, match="not a DER X.509 certificate"):
        ca_store.validate(as_pem(der_of(pems[name])))


def test_two_certificates_refused(pems):
    with pytest.raises(ca_store.CertError, match="exactly one"):
        ca_store.validate(pems["rsa.crt"] + pems["ec.crt"])
    two_in_one = der_of(pems["rsa.crt"]) + der_of(pems["ec.crt"])
    with pytest.raises(ca_store.CertError, match="trailing data"):
        ca_store.validate(as_pem(two_in_one))


# --- crafted DER ---

def crafted(cert):
    (_t, body), = children(cert)
    (t1, c1), (t2, c2), (t3, c3) = children(body)
    fields = tbs_fields(cert)
    return {
        "MAA=": b"\x30\x00",
        "empty": b"",
        "one byte": b"\x30",
        "truncated by one": cert[:-1],
        "truncated half": cert[:len(cert) // 2],
        "trailing zero": cert + b"\x00",
        "trailing sequence": cert + b"\x30\x00",
        "outer not a sequence": rebuild(cert, outer_tag=0x31),
        "outer length non-minimal": tlv(0x30, body, length_octets=3),
        "inner length non-minimal": rebuild(cert, alg=tlv(t2, c2, length_octets=1)),
        "length with leading zero": rebuild(cert, alg=tlv(t2, c2, length_octets=2)),
        "five length octets": b"\x30\x85\x00\x00\x00\x00\x02" + b"\x00\x00",
        "indefinite length": b"\x30\x80" + body + b"\x00\x00",
        "multi-byte tag": rebuild(cert, extra=b"\x1f\x81\x00\x00"),
        "signature as octet string": rebuild(cert, sig=tlv(0x04, c3)),
        "signature missing": tlv(0x30, tlv(t1, c1) + tlv(t2, c2)),
        "extra element": rebuild(cert, extra=tlv(0x05, b"")),
        "tbs is a set": rebuild(cert, tbs=tlv(0x31, c1)),
        "empty bit string": rebuild(cert, sig=tlv(0x03, b"")),
        "bit string unused bits 8": rebuild(cert, sig=tlv(0x03, b"\x08" + c3[1:])),
        "no serial": with_tbs(cert, fields[:1] + fields[2:]),
        "bad version": with_tbs(cert, [(0xA0, tlv(0x02, b"\x05"))] + fields[1:]),
        "no subjectPublicKeyInfo": with_tbs(cert, fields[:6] + fields[7:]),
        "validity with one time": with_tbs(cert, fields[:4] + [(0x30, tlv(*children(fields[4][1])[0]))] + fields[5:]),
        "validity with a number": with_tbs(cert, fields[:4] + [(0x30, tlv(0x02, b"\x01") * 2)] + fields[5:]),
        "extensions twice": with_tbs(cert, fields + [fields[-1]]),
        "unknown tail field": with_tbs(cert, fields + [(0xA5, b"")]),
        "spki without key": with_tbs(cert, fields[:6] + [(0x30, tlv(*children(fields[6][1])[0]))] + fields[7:]),
        "nested too deep": _deep(60),
    }


def _deep(n):
    out = b""
    for _ in range(n):
        out = tlv(0x30, out)
    return out


def test_crafted_der_refused(pems):
    cert = der_of(pems["rsa.crt"])
    assert [t for t, _c in tbs_fields(cert)][:7] == [0xA0, 0x02, 0x30, 0x30, 0x30, 0x30, 0x30]
    assert tbs_fields(cert)[-1][0] == 0xA3 and rebuild(cert) == cert  # the helper rebuilds the real one exactly
    for name, der in crafted(cert).items():
        with pytest.raises(DerError):
            check_certificate(der)
            pytest.fail("accepted: %s" % name)
        with pytest.raises(ca_store.CertError):
            ca_store.validate(as_pem(der) if der else "-----BEGIN CERTIFICATE-----\nMA==\n-----END CERTIFICATE-----")


@pytest.mark.parametrize("text, reason", [
    ("-----BEGIN CERTIFICATE-----\nMAA=\n-----END CERTIFICATE-----", "empty SEQUENCE"),
    (as_pem(b"\x30\x03\x02\x01\x00"), "private key was sent"),
    (as_pem(b"\x30\x81\x03\x02\x01\x00"), "not minimally encoded"),
])
def test_reasons_say_what_is_wrong(text, reason):
    with pytest.raises(ca_store.CertError, match=reason):
        ca_store.validate(text)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_mutation_is_refused_cleanly_or_still_a_certificate(pems, data):
    cert = bytearray(der_of(pems["ec.crt"]))
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(cert) - 1))
        cert[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(cert)))
    try:
        check_certificate(bytes(cert[:cut]))
    except (DerError, PrivateKeyError):
        pass


# --- inside MicroPython ---

VM_CODE = r"""
from services.mqtt.der import check_certificate, DerError, PrivateKeyError
from services.mqtt import ca_store
cases = %r
for name, der in cases:
    try:
        check_certificate(der)
        print(name, "ok")
    except PrivateKeyError:
        print(name, "key")
    except DerError:
        print(name, "bad")
try:
    ca_store.validate("-----BEGIN CERTIFICATE-----\nMAA=\n-----END CERTIFICATE-----")
except ca_store.CertError as e:
    print("MAA= pem", e)
"""


def test_the_walker_inside_micropython(pems):
    cases = [(n, der_of(pems[n])) for n in ("rsa.crt", "ec.crt", "ed.crt", "v1.crt", "rsa.key", "rsa_pkcs1.key",
                                             "ec_sec1.key", "enc.key", "rsa.csr", "ec.pub")]
    cases += sorted(crafted(der_of(pems["ec.crt"])).items())
    with MicroVM(packages=("core", "services")) as vm:
        out, _fuel = vm.run(VM_CODE % (cases,))
    got = dict(line.rsplit(" ", 1) for line in out.strip().splitlines()[:-1])
    for n in ("rsa.crt", "ec.crt", "ed.crt", "v1.crt"):
        assert got.pop(n) == "ok"
    for n in ("rsa.key", "rsa_pkcs1.key", "ec_sec1.key", "enc.key"):
        assert got.pop(n) == "key"
    assert set(got.values()) == {"bad"} and len(got) == 2 + len(crafted(der_of(pems["ec.crt"])))
    assert out.strip().splitlines()[-1] == "MAA= pem certificate body is not a DER X.509 certificate: empty SEQUENCE"
