"""Release signatures: the trusted keys file beside boot.py, and a check of a manifest's detached signature that
spreads its work over polls (docs/ota.md, "Signed releases")."""

import binascii

from services.ota.ed25519 import Verifier
from services.ota.manifest import KEYS_FILE
from core.sha256 import new_sha256

# What a release key signs: this prefix and the SHA-256 of the exact manifest bytes (38 bytes). Signing the digest
# keeps SHA-512, which CircuitPython lacks and which runs in pure Python here, to one block.
CONTEXT = b"MPOTA1"
SIG_SUFFIX = ".sig"       # the signature of <url> is at <url>.sig: 128 hex digits (64 bytes)
MAX_KEYS = 8
_SLICE = 4096             # manifest bytes hashed per step


class SignatureProblem(ValueError):
    """Keys or a signature that cannot be used; the message says why."""


def parse_keys(text):
    """The public keys (32 bytes each) in the text of a keys file: 64 hex digits a line, # comments."""
    keys = []
    for line in text.split("\n"):
        line = line.split("#")[0].strip()
        if not line:
            continue
        if len(line) != 64:
            raise SignatureProblem("%s: a key is 64 hex digits, not %r" % (KEYS_FILE, line[:70]))
        try:
            key = binascii.unhexlify(line.lower())
        except ValueError:
            raise SignatureProblem("%s: not hex: %r" % (KEYS_FILE, line))
        if key not in keys:
            keys.append(key)
    if len(keys) > MAX_KEYS:
        raise SignatureProblem("%s: more than %d keys" % (KEYS_FILE, MAX_KEYS))
    return keys


def load_keys(path=KEYS_FILE):
    """The trusted keys; SignatureProblem when the file is missing, unreadable or holds none (fail closed)."""
    try:
        with open(path) as f:
            text = f.read(4096)
    except OSError:
        raise SignatureProblem("no trusted update keys (%s is missing beside boot.py): every update is refused "
                               "because no signature can be checked; add the release key over USB" % path)
    keys = parse_keys(text)
    if not keys:
        raise SignatureProblem("%s holds no key: every update is refused because no signature can be checked"
                               % path)
    return keys


def parse_signature(data):
    """The 64 signature bytes of a .sig file (128 hex digits, white space around them allowed)."""
    text = bytes(data).strip()
    if len(text) != 128:
        raise SignatureProblem("the signature file must hold 128 hex digits (it has %d bytes)" % len(text))
    try:
        return binascii.unhexlify(text.lower())
    except ValueError:
        raise SignatureProblem("the signature file is not hex")


def signed_message(digest):
    """The bytes a release key signs for a manifest whose SHA-256 is digest."""
    return CONTEXT + bytes(digest)


class ManifestSignatureCheck:
    """Is data (the exact manifest bytes) signed by one of keys? step() until True; then ok, key_index, error."""

    def __init__(self, data, signature, keys):
        self._data = data
        self._sig = signature
        self._keys = keys
        self._h = new_sha256()
        self._pos = 0
        self._msg = None
        self._i = 0
        self._v = None
        self.ok = False
        self.key_index = -1
        self.error = ""
        self._why = ""

    def step(self):
        """A bounded slice of work; True when the verdict is in."""
        if self._msg is None:
            end = self._pos + _SLICE
            self._h.update(memoryview(self._data)[self._pos:end])
            self._pos = end
            if end >= len(self._data):
                self._msg = signed_message(self._h.digest())
                self._data = None
            return False
        if self._v is None:
            if self._i >= len(self._keys):
                self.error = "the signature matches no trusted key (%d in %s)%s" % (
                    len(self._keys), KEYS_FILE, (": " + self._why) if self._why else "")
                return True
            self._v = Verifier(self._keys[self._i], self._msg, self._sig)
        if not self._v.step():
            return False
        if self._v.ok:
            self.ok = True
            self.key_index = self._i
            return True
        if self._v.error != "signature does not match" and not self._why:
            self._why = self._v.error   # malformed (S out of range, wrong length) or a key that is no curve point
        self._v = None
        self._i += 1
        return False
