"""CircuitPython's hashlib for the device bench: hashlib.new(name, data) with sha1 and sha256, as on the S3.

The unix port's built-in hashlib is MicroPython's (sha256 only, no new()); runner.py hands it over as _builtin.
SHA-1 (the WebSocket handshake's accept key, once per session) is computed here in Python, which the bench counts
as firmware time although the device does it in C.
"""

import struct

_builtin = None   # the port's built-in hashlib, set by runner.py


class _Sha1:
    """hashlib's SHA-1 object: update(), digest()."""

    def __init__(self, data=b""):
        self._data = bytearray(data)

    def update(self, data):
        self._data.extend(data)

    def digest(self):
        h = [0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0]
        msg = bytes(self._data)
        n = len(msg)
        msg += b"\x80" + b"\x00" * ((55 - n) % 64) + struct.pack(">Q", n * 8)
        mask = 0xFFFFFFFF
        for at in range(0, len(msg), 64):
            w = list(struct.unpack(">16I", msg[at:at + 64]))
            for i in range(16, 80):
                x = w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16]
                w.append(((x << 1) | (x >> 31)) & mask)
            a, b, c, d, e = h
            for i in range(80):
                if i < 20:
                    f, k = (b & c) | (~b & d), 0x5A827999
                elif i < 40:
                    f, k = b ^ c ^ d, 0x6ED9EBA1
                elif i < 60:
                    f, k = (b & c) | (b & d) | (c & d), 0x8F1BBCDC
                else:
                    f, k = b ^ c ^ d, 0xCA62C1D6
                t = ((((a << 5) | (a >> 27)) & mask) + (f & mask) + e + k + w[i]) & mask
                a, b, c, d, e = t, a, ((b << 30) | (b >> 2)) & mask, c, d
            h = [(v + x) & mask for v, x in zip(h, (a, b, c, d, e))]
        return struct.pack(">5I", *h)


def new(name, data=b""):
    """hashlib.new("sha1" | "sha256", data), CircuitPython's spelling."""
    if name == "sha1":
        return _Sha1(data)
    if name == "sha256":
        return _builtin.sha256(data)
    raise ValueError("unsupported hash type")
