"""DNS wire format for the captive portal: answer one query in place, every A question with one fixed address."""

from micropython import const

_HEADER = const(12)
_ANSWER = const(16)      # name pointer, type, class, TTL, length, IPv4
_TYPE_A = const(1)
_TYPE_ANY = const(255)
_CLASS_IN = const(1)
_NOTIMP = const(4)
TTL_S = 60               # short: a phone that leaves the setup network must not keep 192.168.4.1 for long


def question_end(q, n):
    """Offset after the first question of the query q[:n], or 0 when it is malformed (pointers, overrun)."""
    pos = _HEADER
    total = 0
    while pos < n:
        length = q[pos]
        if length == 0:
            end = pos + 5   # the root label, type and class
            return end if end <= n else 0
        if length & 0xC0:
            return 0         # a question never needs compression
        total += length + 1
        if total > 255:
            return 0
        pos += length + 1
    return 0


def answer_into(q, n, out, ip4):
    """Write the answer to the DNS query q[:n] into out; return its length, or 0 to drop the datagram.

    A and ANY questions of class IN get ip4 (4 bytes) with the AA flag; other types get an empty NOERROR answer so
    clients fall back to IPv4; opcodes other than QUERY get NOTIMP. Responses and malformed packets are dropped.
    """
    if n < _HEADER + 5:
        return 0
    flags = (q[2] << 8) | q[3]
    if flags & 0x8000 or q[4] != 0 or q[5] == 0:
        return 0             # a response, or no question
    end = question_end(q, n)
    if not end:
        return 0
    opcode = (flags >> 11) & 0x0F
    qtype = (q[end - 4] << 8) | q[end - 3]
    qclass = ((q[end - 2] << 8) | q[end - 1]) & 0x7FFF
    answer = opcode == 0 and qtype in (_TYPE_A, _TYPE_ANY) and qclass in (_CLASS_IN, _TYPE_ANY)
    size = end + (_ANSWER if answer else 0)
    if size > len(out):
        return 0
    out[0] = q[0]
    out[1] = q[1]
    out[2] = 0x84 | (opcode << 3) | (q[2] & 0x01)   # QR, AA, the opcode, RD copied
    out[3] = 0 if opcode == 0 else _NOTIMP
    out[4] = 0
    out[5] = 1
    out[6] = 0
    out[7] = 1 if answer else 0
    for i in range(8, _HEADER):
        out[i] = 0
    out[_HEADER:end] = memoryview(q)[_HEADER:end]
    if answer:
        a = end
        out[a] = 0xC0        # pointer to the question's name at offset 12
        out[a + 1] = _HEADER
        out[a + 2] = 0
        out[a + 3] = _TYPE_A
        out[a + 4] = 0
        out[a + 5] = _CLASS_IN
        out[a + 6] = 0
        out[a + 7] = 0
        out[a + 8] = TTL_S >> 8
        out[a + 9] = TTL_S & 0xFF
        out[a + 10] = 0
        out[a + 11] = 4
        out[a + 12:a + 16] = ip4
    return size
