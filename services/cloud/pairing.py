"""The cloud pairing: the token the app hands over, kept only as a SHA-256 (never stored or echoed in clear)."""

from core.durable_file import remove_all
from core.json_store import read_json_file, write_atomic
from core.sha256 import hex_digest, new_sha256

PREFIX = b"meterplus-pair:"   # domain separation: the cloud computes the same from the token it issued


def token_hash(token):
    """Hex SHA-256 of the pairing token: what the device stores and presents to the cloud (docs/cloud.md)."""
    h = new_sha256()
    h.update(PREFIX + token.encode())
    return hex_digest(h)


def valid_token(token):
    """1 to 64 ASCII letters, digits, - or _."""
    if not isinstance(token, str) or not 1 <= len(token) <= 64:
        return False
    for ch in token:
        if ord(ch) > 127 or not (ch.isalpha() or ch.isdigit() or ch in "-_"):
            return False
    return True


class Pairing:
    """The stored pairing in path (JSON {"token_sha256": hex}); survives restarts and updates, not a factory
    reset."""

    def __init__(self, path):
        self.path = path
        self.token_sha256 = None
        self.changes = 0       # bumped on pair/unpair: the cloud service reconnects with the new credential

    def load(self):
        doc = read_json_file(self.path)
        h = doc.get("token_sha256") if isinstance(doc, dict) else None
        self.token_sha256 = h if isinstance(h, str) and len(h) == 64 else None

    @property
    def paired(self):
        return self.token_sha256 is not None

    def pair(self, token):
        """Store the hash of a valid token (ValueError otherwise)."""
        if not valid_token(token):
            raise ValueError("pairing token must be 1 to 64 letters, digits, - or _")
        h = token_hash(token)
        write_atomic(self.path, {"token_sha256": h})
        self.token_sha256 = h
        self.changes += 1

    def unpair(self):
        remove_all(self.path)  # with the copies a cut save may have left
        self.token_sha256 = None
        self.changes += 1
