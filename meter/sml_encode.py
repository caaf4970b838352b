"""SML encoder (simulated meter, tests): TL fields, integers of 1-8 bytes, GetList.Res, transport v1 with escapes."""

from meter.crc import crc16_x25

_ESC = b"\x1b\x1b\x1b\x1b"
NONE = b"\x01"  # an omitted optional element
OCTET, BOOL, INT, UINT, LIST = 0x00, 0x40, 0x50, 0x60, 0x70


def tl(kind, length):
    """TL bytes; for non-lists length is the payload size (the TL itself is added), for lists the element count."""
    if kind == LIST:
        k = 1
        while length >> (4 * k):
            k += 1
        total = length
    else:
        k = 1
        while (length + k) >> (4 * k):
            k += 1
        total = length + k
    out = bytearray(k)
    for i in range(k):
        nib = (total >> (4 * (k - 1 - i))) & 0x0F
        more = 0x80 if i < k - 1 else 0
        out[i] = more | nib | (kind if i == 0 else 0)
    return bytes(out)


def octet(data):
    """Octet string."""
    return tl(OCTET, len(data)) + bytes(data)


def _width(v, signed):
    w = 1
    while True:
        lo = -(1 << (8 * w - 1)) if signed else 0
        hi = (1 << (8 * w - 1)) - 1 if signed else (1 << (8 * w)) - 1
        if lo <= v <= hi:
            return w
        w += 1
        if w > 8:
            raise ValueError("integer does not fit 8 bytes")


def integer(v, signed=True, width=None):
    """Signed (type 5) or unsigned (type 6) integer, big-endian, width bytes (1-8; smallest when None)."""
    if not signed and v < 0:
        raise ValueError("negative unsigned")
    w = _width(v, signed) if width is None else width
    if w < 1 or w > 8 or _width(v, signed) > w:
        raise ValueError("width does not fit the value")
    u = v & ((1 << (8 * w)) - 1)
    body = bytes((u >> (8 * (w - 1 - i))) & 0xFF for i in range(w))
    return tl(INT if signed else UINT, w) + body


def lst(items):
    """List of already encoded elements."""
    return tl(LIST, len(items)) + b"".join(items)


def obis_name(code, b=0, f=0xFF, a=1):
    """6-byte object name of a short code "C.D.E"."""
    c, d, e = (int(x) for x in code.split("."))
    return bytes((a, b, c, d, e, f))


def entry(name, value, unit=None, scaler=None, signed=True, width=None, status=None, val_time=None):
    """SML_ListEntry; value is an int (encoded as integer) or bytes (octet string)."""
    val = octet(value) if isinstance(value, (bytes, bytearray)) else integer(value, signed, width)
    return lst([
        octet(name),
        NONE if status is None else integer(status, False),
        NONE if val_time is None else val_time,
        NONE if unit is None else integer(unit, False, 1),
        NONE if scaler is None else integer(scaler, True, 1),
        val,
        NONE,
    ])


def message(trans_id, tag, body, group=0, abort=0):
    """SML_Message with its CRC (X.25 bytes low first, as the transport's)."""
    head = lst([octet(trans_id), integer(group, False, 1), integer(abort, False, 1),
                lst([integer(tag, False, 2 if tag < 0x10000 else 4), body])])
    # lst() counted 4 elements; the message has 6: rewrite the list TL.
    head = tl(LIST, 6) + head[1:]
    c = crc16_x25(head)
    return head + bytes((0x63, c & 0xFF, c >> 8, 0x00))


def open_response(server_id, file_id=b"\x00\x01"):
    return lst([NONE, NONE, octet(file_id), octet(server_id), NONE, NONE])


def get_list_response(server_id, entries, sensor_time=None):
    return lst([NONE, octet(server_id), NONE, NONE if sensor_time is None else sensor_time, lst(entries), NONE, NONE])


def close_response():
    return lst([NONE])


def sml_file(server_id, entries, seq=0):
    """The three messages a household meter sends: OpenResponse, GetList.Res, CloseResponse."""
    t = seq & 0xFFFF
    return (message(bytes((t >> 8, t & 0xFF, 0)), 0x0101, open_response(server_id))
            + message(bytes((t >> 8, t & 0xFF, 1)), 0x0701, get_list_response(server_id, entries))
            + message(bytes((t >> 8, t & 0xFF, 2)), 0x0201, close_response()))


def transport(payload):
    """Wrap SML messages in transport v1: start escape, escaped data on the 4-byte grid, fill, end escape, CRC."""
    fill = (-len(payload)) % 4
    data = bytes(payload) + b"\x00" * fill
    out = bytearray(b"\x1b\x1b\x1b\x1b\x01\x01\x01\x01")
    for i in range(0, len(data), 4):
        block = data[i:i + 4]
        if block == _ESC:
            out += _ESC  # escaped data: the block appears twice
        out += block
    out += b"\x1b\x1b\x1b\x1b\x1a" + bytes((fill,))
    c = crc16_x25(out)
    out += bytes((c & 0xFF, c >> 8))
    return bytes(out)
