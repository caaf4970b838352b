"""API tokens: a READ and a WRITE token kept as SHA-256 hashes on the flash, renewed in two phases."""

import binascii
import os

from core.elapsed import fresh
from core.durable_file import stored
from core.json_store import read_json_file, write_atomic
from core.sha256 import new_sha256

OPEN = 0
READ = 1
WRITE = 2
LEVEL_NAMES = ("none", "READ", "WRITE")

PENDING_MS = 60000   # a generated pair must be confirmed within this (spec: 60 s)
RECOVERY_MS = 120000  # a button press lets the page make a new pair without a token for this long (docs/api.md)
RECOVERY_DIGITS = 6   # the recovery code a press makes: six digits 1..9 (the LED blinks each as that many flashes)
RECOVERY_TRIES = 3    # wrong codes a window takes; the third closes it (3 guesses of 9**6 = 531,441 per press)
TOKEN_BYTES = 32     # 256 bits from the hardware RNG, sent as 64 hex digits


def digest(text):
    """SHA-256 digest (32 bytes) of a string."""
    h = new_sha256()
    h.update(text.encode() if isinstance(text, str) else bytes(text))
    return h.digest()


def sha256_hex(text):
    """Hex SHA-256 of a string, as stored in the token file."""
    return binascii.hexlify(digest(text)).decode()


def same(a, b):
    """Constant-time equality of two byte strings of the same length (digests): no early exit on a difference."""
    if a is None or b is None or len(a) != len(b):
        return False
    diff = 0
    for i in range(len(a)):
        diff |= a[i] ^ b[i]
    return diff == 0


def _valid_hash(value):
    if not isinstance(value, str) or len(value) != 64:
        return False
    for ch in value:
        if ch not in "0123456789abcdef":
            return False
    return True


class TokenError(Exception):
    """A refused confirm: status 409 (no pending pair, wrong token) or 410 (pending pair expired)."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status
        self.message = message


class Tokens:
    """Active token hashes (file at path) and at most one pending pair in RAM; urandom injected for tests."""

    def __init__(self, path, urandom=os.urandom):
        self.path = path
        self._urandom = urandom
        self._read = None      # SHA-256 digests of the active tokens
        self._write = None
        self._pending = None   # (read digest, write digest, ticks when generated)
        self._expired = False  # the last pending pair ran out unconfirmed (confirm then answers 410, not 409)
        self.load_error = None
        self.locked = False    # the token file is there but unreadable: authentication on, no token valid
        self._recovery = None  # ticks of the button press that opened the recovery window, or None
        self._code = None      # SHA-256 digest of the window's recovery code (the code itself is never kept here)
        self._tries = 0        # wrong recovery codes this window took
        # Whether authentication is on, kept with the tokens: a damaged settings.json falls back to its defaults,
        # and those must never switch authentication off (fail closed). Only a factory reset removes this file.
        self.required = False

    def load(self):
        """Read the stored hashes. No file at all is the factory state (no tokens, authentication off); a file that
        is there but unreadable (zeroed, torn, nested too deep, too large, not a token document) locks: authentication
        on, no token valid, until a button press opens the recovery window (fail closed: damage never opens)."""
        data = read_json_file(self.path)
        self._read = self._write = None
        self.required = False
        self.locked = False
        self.load_error = None
        if data is None and not stored(self.path):
            return
        if isinstance(data, dict) and _valid_hash(data.get("read")) and _valid_hash(data.get("write")):
            self._read = binascii.unhexlify(data["read"])
            self._write = binascii.unhexlify(data["write"])
            # true or false as this firmware writes it, absent as an older one did (settings.json decides then);
            # anything else ("true", 1, null) is damage, and damage never switches authentication off
            required = data["required"] if "required" in data else False
            self.required = required is not False
            if self.required and required is not True:
                self.load_error = "token file: required is neither true nor false: authentication on"
        else:
            self.load_error = "unreadable token file"
            self.locked = True
            self.required = True

    def configured(self):
        """True once a pair was confirmed: only then may authentication be switched on."""
        return self._write is not None

    def open_recovery(self, now_ms):
        """A button press on the device: for RECOVERY_MS the page may generate a pair without a token if it sends the
        code returned here, and confirm it. The caller shows the code at the device only (serial console, LED); only
        its digest stays here, so nothing that describes this object can tell it. A new press makes a new code."""
        code = self._new_code()
        self._recovery = now_ms
        self._code = digest(code)
        self._tries = 0
        return code

    def _new_code(self):
        """RECOVERY_DIGITS digits 1..9 from the hardware RNG, uniform (a byte of 252 or more is drawn again)."""
        digits = ""
        while len(digits) < RECOVERY_DIGITS:
            for b in self._urandom(RECOVERY_DIGITS):
                if b < 252 and len(digits) < RECOVERY_DIGITS:
                    digits += "123456789"[b % 9]
        return digits

    def recovering(self, now_ms):
        """True while the recovery window a button press opened lasts (wrap-safe; dropped once over)."""
        if self._recovery is not None and not fresh(self._recovery, now_ms, RECOVERY_MS):
            self.close_recovery()
        return self._recovery is not None

    def close_recovery(self):
        self._recovery = None
        self._code = None
        self._tries = 0

    def check_recovery(self, code, now_ms):
        """True when the window is open and code is its recovery code (compared in constant time over the digest).
        A wrong code counts; the RECOVERY_TRIES-th closes the window (the owner presses again for a new code). Spaces
        are ignored, so "123 456" is the same code; anything but text is wrong."""
        if not self.recovering(now_ms):
            return False
        ok = False
        if isinstance(code, str):
            code = code.replace(" ", "")
            ok = len(code) == RECOVERY_DIGITS and same(digest(code), self._code)
        if ok:
            return True
        self._tries += 1
        if self._tries >= RECOVERY_TRIES:
            self.close_recovery()
        return False

    def recovery_tries_left(self):
        """Wrong codes the open window still takes (0 once closed)."""
        return RECOVERY_TRIES - self._tries if self._recovery is not None else 0

    def level(self, token):
        """WRITE, READ or None for a presented token."""
        if not token or self._write is None:
            return None
        h = digest(token)
        if same(h, self._write):
            return WRITE
        if same(h, self._read):
            return READ
        return None

    def _new_token(self):
        return binascii.hexlify(self._urandom(TOKEN_BYTES)).decode()

    def generate(self, now_ms):
        """A new pending pair (read, write), valid PENDING_MS; it replaces an earlier pending pair."""
        read = self._new_token()
        write = self._new_token()
        self._pending = (digest(read), digest(write), now_ms)
        self._expired = False
        return read, write

    def _fresh(self, now_ms):
        """True while the pending pair is younger than PENDING_MS; a stamp that looks like the future is stale."""
        return fresh(self._pending[2], now_ms, PENDING_MS)

    def poll(self, now_ms):
        """Drop a pending pair and the recovery window once over, so the tick wrap (2**29 ms) can never make them
        valid again."""
        self.recovering(now_ms)
        if self._pending is not None and not self._fresh(now_ms):
            self._pending = None
            self._expired = True

    def pending(self, now_ms):
        """True while a generated pair waits for its confirm."""
        self.poll(now_ms)
        return self._pending is not None

    def confirm(self, new_write_token, now_ms):
        """Activate the pending pair if new_write_token is its WRITE token; raise TokenError otherwise."""
        self.poll(now_ms)
        p = self._pending
        if p is None:
            if self._expired:
                self._expired = False  # said once; a second confirm finds nothing pending (409)
                raise TokenError(410, "Pending tokens expired: generate a new pair")
            raise TokenError(409, "No pending tokens: call /api/v1/auth/tokens/generate first")
        if not isinstance(new_write_token, str) or not same(digest(new_write_token), p[1]):
            raise TokenError(409, "new_write_token does not match the pending tokens")
        self._store(p[0], p[1], self.required)
        self._read, self._write = p[0], p[1]
        self._pending = None
        self.close_recovery()   # used: one pair per press
        self.locked = False
        self.load_error = None

    def _store(self, read, write, required):
        write_atomic(self.path, {"read": binascii.hexlify(read).decode(), "write": binascii.hexlify(write).decode(),
                                 "required": required})

    def set_required(self, flag):
        """Store whether authentication is on (with a confirmed pair only; OSError when the drive refuses)."""
        flag = flag is True
        if self._write is None or flag == self.required:
            return
        self._store(self._read, self._write, flag)
        self.required = flag

    def describe(self):
        """Small dict for /system/info (no secrets)."""
        return {"configured": self.configured(), "pending": self._pending is not None, "required": self.required,
                "locked": self.locked, "recovery_open": self._recovery is not None}
