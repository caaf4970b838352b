"""Improv Wi-Fi protocol (BLE flavour): RPC frames with their checksum, reassembly of split writes, states, errors."""

from micropython import const

SERVICE_UUID = "00467768-6228-2272-4663-277478268000"
SERVICE_DATA_UUID16 = const(0x4677)

# Current state characteristic and service data byte 0.
AUTHORIZATION_REQUIRED = const(0x01)
AUTHORIZED = const(0x02)
PROVISIONING = const(0x03)
PROVISIONED = const(0x04)

# Error characteristic.
NO_ERROR = const(0x00)
INVALID_RPC = const(0x01)
UNKNOWN_RPC = const(0x02)
UNABLE_TO_CONNECT = const(0x03)
NOT_AUTHORIZED = const(0x04)
UNKNOWN_ERROR = const(0xFF)

# RPC commands.
WIFI_SETTINGS = const(0x01)
IDENTIFY = const(0x02)
DEVICE_INFO = const(0x03)
SCAN_WIFI = const(0x04)

# Capabilities characteristic and service data byte 1.
CAP_IDENTIFY = const(0x01)
CAP_DEVICE_INFO = const(0x02)
CAP_SCAN_WIFI = const(0x04)

MAX_FRAME = const(258)   # command, length byte (<= 255), data, checksum


def checksum(buf, start, end):
    """Sum of buf[start:end] modulo 256."""
    s = 0
    for i in range(start, end):
        s += buf[i]
    return s & 0xFF


def encode(command, strings):
    """One RPC frame: command, data length, each string with its length byte, checksum."""
    size = 0
    for s in strings:
        size += 1 + len(s)
    if size > 255:
        raise ValueError("RPC data longer than 255 bytes")
    out = bytearray(size + 3)
    out[0] = command
    out[1] = size
    pos = 2
    for s in strings:
        out[pos] = len(s)
        out[pos + 1:pos + 1 + len(s)] = s
        pos += 1 + len(s)
    out[pos] = checksum(out, 0, pos)
    return bytes(out)


def strings(data):
    """The length-prefixed strings of an RPC frame's data, or None when the lengths do not add up."""
    out = []
    pos = 0
    n = len(data)
    while pos < n:
        length = data[pos]
        if pos + 1 + length > n:
            return None
        out.append(bytes(data[pos + 1:pos + 1 + length]))
        pos += 1 + length
    return out


def service_data(state, capabilities):
    """The 6 bytes of the advertisement's service data 0x4677: state, capabilities, 4 reserved."""
    return bytearray((state, capabilities, 0, 0, 0, 0))


class Reassembler:
    """Collects the bytes written to the RPC command characteristic (a phone splits frames over 20 bytes) into
    whole frames. take() returns (error, command, data): error is NO_ERROR or INVALID_RPC (bad checksum, overflow)."""

    def __init__(self):
        self._buf = bytearray(MAX_FRAME)
        self._n = 0

    def pending(self):
        """Bytes of an incomplete frame held."""
        return self._n

    def reset(self):
        self._n = 0

    def add(self, data):
        """Append written bytes; False (and the buffer emptied) when they overflow a frame."""
        n = len(data)
        if self._n + n > MAX_FRAME:
            self._n = 0
            return False
        self._buf[self._n:self._n + n] = data
        self._n += n
        return True

    def take(self):
        """The next whole frame as (error, command, data), or None while it is incomplete."""
        if self._n < 2:
            return None
        total = self._buf[1] + 3
        if self._n < total:
            return None
        buf = self._buf
        good = buf[total - 1] == checksum(buf, 0, total - 1)
        command = buf[0]
        data = bytes(buf[2:total - 1])
        rest = self._n - total
        buf[0:rest] = buf[total:self._n]
        self._n = rest
        if not good:
            return (INVALID_RPC, command, b"")
        return (NO_ERROR, command, data)
