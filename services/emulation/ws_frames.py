"""WebSocket (RFC 6455) pieces a server needs: the handshake's accept key, client frames in, unmasked frames out.

Why not adafruit_httpserver's Websocket: it reads with blocking recv_into calls and keeps an HTTP slot; the emulated
Shelly's session lives outside the two HTTP slots and is read without ever waiting (shelly_ws.py)."""

import binascii
import hashlib

from micropython import const

_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
CONTINUATION = const(0)
TEXT = const(1)
BINARY = const(2)
CLOSE = const(8)
PING = const(9)
PONG = const(10)


class FrameError(Exception):
    """The client broke the protocol (unmasked frame, oversize, bad opcode): close the session."""


def accept_key(key):
    """Sec-WebSocket-Accept for a client's Sec-WebSocket-Key (text)."""
    data = key.strip().encode() + _GUID
    try:
        digest = hashlib.new("sha1", data).digest()     # CircuitPython's only spelling
    except AttributeError:
        digest = hashlib.sha1(data).digest()            # MicroPython's (the VM tests)
    return binascii.b2a_base64(digest).strip().decode()


def parse(buf, n, max_payload):
    """(opcode, fin, payload bytes, frame length) of the first whole frame in buf[:n], or None while incomplete.

    Client frames must be masked (RFC 6455 5.1); a payload longer than max_payload is refused, not buffered."""
    if n < 2:
        return None
    b0, b1 = buf[0], buf[1]
    if b0 & 0x70:
        raise FrameError("reserved bits set")
    if not b1 & 0x80:
        raise FrameError("unmasked client frame")
    size = b1 & 0x7F
    pos = 2
    if size == 126:
        if n < 4:
            return None
        size = (buf[2] << 8) | buf[3]
        pos = 4
    elif size == 127:
        raise FrameError("frame too large")
    if size > max_payload:
        raise FrameError("frame too large")
    if n < pos + 4 + size:
        return None
    mask = bytes(buf[pos:pos + 4])
    pos += 4
    payload = bytearray(buf[pos:pos + size])
    for i in range(size):
        payload[i] ^= mask[i & 3]
    return b0 & 0x0F, bool(b0 & 0x80), bytes(payload), pos + size


def header(opcode, size):
    """The head of an unmasked server frame (FIN set) whose payload is size bytes long."""
    if size < 126:
        return bytes((0x80 | opcode, size))
    if size < 65536:
        return bytes((0x80 | opcode, 126, size >> 8, size & 0xFF))
    return bytes((0x80 | opcode, 127, 0, 0, 0, 0, (size >> 24) & 0xFF, (size >> 16) & 0xFF, (size >> 8) & 0xFF,
                  size & 0xFF))


def frame(opcode, payload):
    """A whole unmasked server frame (FIN set) carrying payload (bytes)."""
    return header(opcode, len(payload)) + payload
