"""python -m tools.ota_keygen DIR: make an Ed25519 key pair for signing releases (docs/ota.md, "Signed releases").

Writes DIR/ota_private_key.pem (PKCS#8, readable by you only: keep it off the device and out of the repository) and
DIR/ota_public_key.txt (64 hex digits: the line to put into ota_keys.txt beside boot.py, over USB)."""

import argparse
import os
import sys

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

PRIVATE = "ota_private_key.pem"
PUBLIC = "ota_public_key.txt"


def public_hex(private_key):
    """The 64 hex digits of a private key's public key."""
    return private_key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()


def load_private(path):
    """The Ed25519 private key in a PEM file written by this tool."""
    with open(path, "rb") as f:
        key = serialization.load_pem_private_key(f.read(), password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError("%s is not an Ed25519 private key" % path)
    return key


def make_pair(folder):
    """Write a new key pair into folder (never over an existing private key); returns (private path, public hex)."""
    os.makedirs(folder, exist_ok=True)
    priv_path = os.path.join(folder, PRIVATE)
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    fd = os.open(priv_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)   # O_EXCL: never replace a key
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    pub = public_hex(key)
    with open(os.path.join(folder, PUBLIC), "w") as f:
        f.write(pub + "\n")
    return priv_path, pub


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m tools.ota_keygen", description=__doc__.split("\n")[0])
    p.add_argument("dir")
    a = p.parse_args(argv)
    try:
        priv, pub = make_pair(a.dir)
    except FileExistsError:
        print("%s already holds %s: not replaced" % (a.dir, PRIVATE), file=sys.stderr)
        return 1
    print("private key: %s (keep it secret)\npublic key:  %s (add this line to ota_keys.txt)" % (priv, pub))
    return 0


if __name__ == "__main__":
    sys.exit(main())
