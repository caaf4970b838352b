"""Ed25519 signature check (RFC 8032, section 5.1.7) in pure Python, as a state machine: step() does a bounded
slice of work, so a poll stays short on the device; SHA-512 falls back to pure Python (CircuitPython has none)."""

import binascii
import hashlib


P = 2 ** 255 - 19
L = 2 ** 252 + 27742317777372353535851937790883648493
D = 37095705934669439343138083508754565189542113879843219016388785533085940283555
D2 = 2 * D % P
SQRT_M1 = 19681161376707505956807079304988542015446066515923890162744021073123829784752
_BX = 15112221349535400772501151409588531511454012693041857206046113283949847762202
_BY = 46316835694926478169428394003475163141307993866256225615783033603165251855960
B = (_BX, _BY, 1, _BX * _BY % P)
_M64 = 0xFFFFFFFFFFFFFFFF
WINDOWS_PER_STEP = 1    # 2-bit joint windows per step(): two doublings and one addition each
POW_BITS_PER_STEP = 16  # exponent bits per step() of a modular power (inverse, square root)
SHA_ROUNDS_PER_STEP = 8  # pure-Python SHA-512 rounds (or message schedule words) per step()


class SignatureError(ValueError):
    """A public key or signature that is malformed (not a check that failed)."""


# ------------------------------------------------------------------ SHA-512

# FIPS 180-4: the first 64 bits of the fractional parts of the cube roots of the first 80 primes (K) and of the
# square roots of the first 8 primes (initial H)
_K_HEX = (  # one string (adjacent literals)
    "428a2f98d728ae227137449123ef65cdb5c0fbcfec4d3b2fe9b5dba58189dbbc3956c25bf348b53859f111f1b605d019"
    "923f82a4af194f9bab1c5ed5da6d8118d807aa98a303024212835b0145706fbe243185be4ee4b28c550c7dc3d5ffb4e2"
    "72be5d74f27b896f80deb1fe3b1696b19bdc06a725c71235c19bf174cf692694e49b69c19ef14ad2efbe4786384f25e3"
    "0fc19dc68b8cd5b5240ca1cc77ac9c652de92c6f592b02754a7484aa6ea6e4835cb0a9dcbd41fbd476f988da831153b5"
    "983e5152ee66dfaba831c66d2db43210b00327c898fb213fbf597fc7beef0ee4c6e00bf33da88fc2d5a79147930aa725"
    "06ca6351e003826f142929670a0e6e7027b70a8546d22ffc2e1b21385c26c9264d2c6dfc5ac42aed53380d139d95b3df"
    "650a73548baf63de766a0abb3c77b2a881c2c92e47edaee692722c851482353ba2bfe8a14cf10364a81a664bbc423001"
    "c24b8b70d0f89791c76c51a30654be30d192e819d6ef5218d69906245565a910f40e35855771202a106aa07032bbd1b8"
    "19a4c116b8d2d0c81e376c085141ab532748774cdf8eeb9934b0bcb5e19b48a8391c0cb3c5c95a634ed8aa4ae3418acb"
    "5b9cca4f7763e373682e6ff3d6b2b8a3748f82ee5defb2fc78a5636f43172f6084c87814a1f0ab728cc702081a6439ec"
    "90befffa23631e28a4506cebde82bde9bef9a3f7b2c67915c67178f2e372532bca273eceea26619cd186b8c721c0c207"
    "eada7dd6cde0eb1ef57d4f7fee6ed17806f067aa72176fba0a637dc5a2c898a6113f9804bef90dae1b710b35131c471b"
    "28db77f523047d8432caab7b40c724933c9ebe0a15c9bebc431d67c49c100d4c4cc5d4becb3e42b6597f299cfc657e2a"
    "5fcb6fab3ad6faec6c44198c4a475817"
)
_H0_HEX = (
    "6a09e667f3bcc908bb67ae8584caa73b3c6ef372fe94f82ba54ff53a5f1d36f1510e527fade682d19b05688c2b3e6c1f"
    "1f83d9abfb41bd6b5be0cd19137e2179"
)


def _rotr(x, n):
    return ((x >> n) | (x << (64 - n))) & _M64


class Sha512:
    """SHA-512 (FIPS 180-4) in pure Python: update(data), digest(). Slow; used for a block or two."""

    def __init__(self):
        h0 = binascii.unhexlify(_H0_HEX)
        self._h = [int.from_bytes(h0[i:i + 8], "big") for i in range(0, 64, 8)]
        self._buf = b""
        self._n = 0

    def update(self, data):
        data = bytes(data)
        self._n += len(data)
        buf = self._buf + data
        i = 0
        while len(buf) - i >= 128:
            self._block(buf[i:i + 128])
            i += 128
        self._buf = buf[i:]

    def _block(self, block):
        for _ in self._block_steps(block):
            pass

    def _block_steps(self, block):
        """Generator: one 128-byte block, SHA_ROUNDS_PER_STEP rounds (or schedule words) per yield."""
        k = binascii.unhexlify(_K_HEX)
        w = [int.from_bytes(block[i:i + 8], "big") for i in range(0, 128, 8)]
        for t in range(16, 80):
            a, b = w[t - 15], w[t - 2]
            s0 = _rotr(a, 1) ^ _rotr(a, 8) ^ (a >> 7)
            s1 = _rotr(b, 19) ^ _rotr(b, 61) ^ (b >> 6)
            w.append((w[t - 16] + s0 + w[t - 7] + s1) & _M64)
            if t % SHA_ROUNDS_PER_STEP == 0:
                yield "sha512"
        a, b, c, d, e, f, g, h = self._h
        for t in range(80):
            t1 = (h + (_rotr(e, 14) ^ _rotr(e, 18) ^ _rotr(e, 41)) + ((e & f) ^ (~e & g))
                  + int.from_bytes(k[8 * t:8 * t + 8], "big") + w[t]) & _M64
            t2 = ((_rotr(a, 28) ^ _rotr(a, 34) ^ _rotr(a, 39)) + ((a & b) ^ (a & c) ^ (b & c))) & _M64
            h, g, f, e, d, c, b, a = g, f, e, (d + t1) & _M64, c, b, a, (t1 + t2) & _M64
            if t % SHA_ROUNDS_PER_STEP == SHA_ROUNDS_PER_STEP - 1:
                yield "sha512"
        self._h = [(x + y) & _M64 for x, y in zip(self._h, (a, b, c, d, e, f, g, h))]

    def digest_steps(self, out):
        """Generator: out[0] = the digest of everything given to update() so far, a slice per yield."""
        n = self._n
        tail = self._buf + b"\x80" + b"\x00" * ((111 - len(self._buf)) % 128) + (n * 8).to_bytes(16, "big")
        h = self._h
        for i in range(0, len(tail), 128):
            for label in self._block_steps(tail[i:i + 128]):
                yield label
        out[0] = b"".join(x.to_bytes(8, "big") for x in self._h)
        self._h = h

    def digest(self):
        n = self._n
        tail = self._buf + b"\x80" + b"\x00" * ((111 - len(self._buf)) % 128) + (n * 8).to_bytes(16, "big")
        h = self._h
        for i in range(0, len(tail), 128):
            self._block(tail[i:i + 128])
        out = b"".join(x.to_bytes(8, "big") for x in self._h)
        self._h = h
        return out


def sha512(data=b""):
    """A SHA-512 object: hashlib's when the build has it, else the pure-Python one."""
    new = getattr(hashlib, "new", None)
    try:
        if new is not None:
            h = new("sha512")
        else:
            h = hashlib.sha512()  # type: ignore[attr-defined]
    except (AttributeError, ValueError):
        h = Sha512()
    h.update(data)
    return h


# ------------------------------------------------------------------ curve arithmetic (extended coordinates)

def _add(p, q):
    """p + q on edwards25519 (add-2008-hwcd-3, a = -1)."""
    x1, y1, z1, t1 = p
    x2, y2, z2, t2 = q
    a = (y1 - x1) * (y2 - x2) % P
    b = (y1 + x1) * (y2 + x2) % P
    c = t1 * D2 % P * t2 % P
    d = 2 * z1 * z2 % P
    e, f, g, h = b - a, d - c, d + c, b + a
    return (e * f % P, g * h % P, f * g % P, e * h % P)


def _double(p):
    """2p (dbl-2008-hwcd, RFC 8032 section 5.1.4)."""
    x1, y1, z1, _t = p
    a = x1 * x1 % P
    b = y1 * y1 % P
    c = 2 * z1 * z1 % P
    h = a + b
    s = x1 + y1
    e = h - s * s % P
    g = a - b
    f = c + g
    return (e * f % P, g * h % P, f * g % P, e * h % P)


def _neg(p):
    x, y, z, t = p
    return ((P - x) % P, y, z, (P - t) % P)


def _pow_steps(x, e, out):
    """Generator: out[0] = x ** e mod P, POW_BITS_PER_STEP exponent bits per yield (the C pow in pieces)."""
    n = POW_BITS_PER_STEP
    top = (256 + n - 1) // n * n   # every exponent here is below 2**256 (MicroPython has no int.bit_length)
    r = 1
    while top > 0:
        top -= n
        r = pow(r, 1 << n, P) * pow(x, (e >> top) & ((1 << n) - 1), P) % P
        yield "pow"
    out[0] = r


def _decode_point_steps(s, out):
    """Generator: out[0] = the point encoded in 32 bytes s (RFC 8032 5.1.3); SignatureError when invalid."""
    if len(s) != 32:
        raise SignatureError("a point is 32 bytes")
    y = int.from_bytes(s, "little")
    sign = y >> 255
    y &= (1 << 255) - 1
    if y >= P:
        raise SignatureError("point not canonical")
    u = (y * y - 1) % P
    v = (D * y * y + 1) % P
    # x = u v^3 (u v^7)^((p-5)/8): one power for the square root of u/v (RFC 8032 5.1.3 step 2)
    v3 = v * v % P * v % P
    box = [0]
    for label in _pow_steps(u * v3 % P * v3 % P * v % P, (P - 5) // 8, box):
        yield label
    x = u * v3 % P * box[0] % P
    vx2 = v * x % P * x % P
    if vx2 != u:
        if vx2 != (P - u) % P:
            raise SignatureError("not a curve point")
        x = x * SQRT_M1 % P
    if x == 0 and sign:
        raise SignatureError("point not canonical")
    if x & 1 != sign:
        x = P - x
    out[0] = (x, y, 1, x * y % P)


class Verifier:
    """Checks one signature: step() until it returns True, then ok (bool) and error (why not)."""

    def __init__(self, public_key, message, signature):
        self.ok = False
        self.error = ""
        self.steps = 0
        self._gen = self._run(bytes(public_key), bytes(message), bytes(signature))

    def step(self):
        """Advance a bounded slice; True when the verdict is in."""
        if self._gen is None:
            return True
        self.steps += 1
        try:
            next(self._gen)
            return False
        except StopIteration:
            pass
        except SignatureError as exc:
            self.ok = False
            self.error = str(exc)
        self._gen = None
        return True

    def run(self):
        """The whole check at once (tests, tools); returns ok."""
        while not self.step():
            pass
        return self.ok

    def _run(self, pub, msg, sig):
        if len(pub) != 32:
            raise SignatureError("a public key is 32 bytes")
        if len(sig) != 64:
            raise SignatureError("a signature is 64 bytes")
        r_bytes = sig[:32]
        s = int.from_bytes(sig[32:], "little")
        if s >= L:
            raise SignatureError("signature S out of range")
        box = [None]
        for label in _decode_point_steps(pub, box):
            yield label
        neg_a = _neg(box[0])
        h = sha512()
        h.update(r_bytes + pub)
        h.update(msg)
        if isinstance(h, Sha512):   # the pure-Python one (the device): in slices
            box = [None]
            for label in h.digest_steps(box):
                yield label
            digest = box[0]
        else:
            digest = h.digest()
        k = int.from_bytes(digest, "little") % L
        yield "scalar"
        # table[i * 4 + j] = i*B + j*(-A), i, j in 0..3: a joint 2-bit window for S*B - k*A
        b2 = _double(B)
        a2 = _double(neg_a)
        bs = (None, B, b2, _add(b2, B))
        as_ = (None, neg_a, a2, _add(a2, neg_a))
        table = [None] * 16
        for i in range(4):
            for j in range(4):
                if i == 0:
                    table[j] = as_[j]
                elif j == 0:
                    table[i * 4] = bs[i]
                else:
                    table[i * 4 + j] = _add(bs[i], as_[j])
            yield "table"
        acc = (0, 1, 1, 0)
        shift = 254
        while shift > 0:
            for _ in range(WINDOWS_PER_STEP):
                if shift <= 0:
                    break
                shift -= 2
                acc = _double(_double(acc))
                idx = ((s >> shift) & 3) * 4 + ((k >> shift) & 3)
                if idx:
                    acc = _add(acc, table[idx])
            yield "ladder"
        table = None
        box = [0]
        for label in _pow_steps(acc[2], P - 2, box):
            yield label
        zinv = box[0]
        x = acc[0] * zinv % P
        y = acc[1] * zinv % P
        got = (y | ((x & 1) << 255)).to_bytes(32, "little")
        self.ok = got == r_bytes
        if not self.ok:
            self.error = "signature does not match"


def verify(public_key, message, signature):
    """True when signature is a valid Ed25519 signature of message by public_key (all at once)."""
    return Verifier(public_key, message, signature).run()
