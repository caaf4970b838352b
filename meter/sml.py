"""SML transport v1 check (CRC, escapes, fill) and in-place SML_GetList.Res decoding into a reusable result."""

from micropython import const

from meter import obis
from meter.crc import crc16_kermit, crc16_x25

_ESC = b"\x1b\x1b\x1b\x1b"
_TAG_GET_LIST_RES = const(0x0701)
_MAX_SID = const(32)
_SLOT_POWER = const(2)  # obis.ROWS[2] is 16.7.0 (checked by the tests)

# Error texts are constants: setting one allocates nothing.
E_SHORT = "too short"
E_FRAME = "bad transport frame"
E_CRC = "crc mismatch"
E_ESCAPE = "bad escape"
E_FILL = "bad fill"
E_STRUCT = "bad structure"
E_TRUNC = "truncated"


class SmlResult:
    """Reusable decoder output: per OBIS slot a mantissa and exponent, a bitmask of slots present, server id."""

    def __init__(self):
        self.mant = [0] * obis.N
        self.exp = [0] * obis.N
        self.mask = 0
        self.sid = bytearray(_MAX_SID)
        self.sid_len = 0
        self.crc = None  # "x25", "kermit" or None (messages without transport)
        self.error = None
        self.unit_mismatch = 0
        self.dzg_fixed = 0

    def clear(self):
        """Forget the previous telegram (no allocation)."""
        self.mask = 0
        self.sid_len = 0
        self.crc = None
        self.error = None
        self.unit_mismatch = 0
        self.dzg_fixed = 0

    def has(self, i):
        """True when slot i was decoded."""
        return (self.mask >> i) & 1 == 1

    def server_id(self):
        """Server id as lower-case hex text, or None (allocates: call at the edge)."""
        if not self.sid_len:
            return None
        return "".join("%02x" % self.sid[i] for i in range(self.sid_len))

    def values(self):
        """Dict short code -> (mantissa, exp10) of the decoded slots (allocates: call at the edge)."""
        out = {}
        codes = obis.CODES
        for i in range(obis.N):
            if (self.mask >> i) & 1:
                out[codes[i]] = (self.mant[i], self.exp[i])
        return out


def _skip(b, p, end):
    """Position after one SML element at p (lists walked iteratively), or -1 when it does not fit."""
    todo = 1
    while todo:
        if p >= end:
            return -1
        tl = b[p]
        ln = tl & 0x0F
        q = p + 1
        while tl & 0x80:
            if q >= end:
                return -1
            tl = b[q]
            q += 1
            ln = (ln << 4) | (tl & 0x0F)
        todo -= 1
        if b[p] & 0x70 == 0x70:
            todo += ln
            p = q
        else:
            if ln < q - p:
                return -1  # a length that does not even cover its TL bytes (e.g. 0x00 here)
            p += ln
    return p if p <= end else -1


def check_frame(b, n):
    """Verify the transport frame in b[0:n]; return "x25"/"kermit" or an error text starting with "!"."""
    if n < 16:
        return "!" + E_SHORT
    for i in range(4):
        if b[i] != 0x1B or b[4 + i] != 0x01 or b[n - 8 + i] != 0x1B:
            return "!" + E_FRAME
    if b[n - 4] != 0x1A:
        return "!" + E_FRAME
    got = b[n - 2] | (b[n - 1] << 8)  # X.25 travels low byte first
    if crc16_x25(b, 0, n - 2) == got:
        return "x25"
    # Some Holley DTZ541 send CRC-16/KERMIT; its byte order differs between sources, accept both.
    k = crc16_kermit(b, 0, n - 2)
    if k == got or k == (b[n - 2] << 8 | b[n - 1]):
        return "kermit"
    return "!" + E_CRC


def unescape(b, start, end):
    """Collapse escaped 1b1b1b1b pairs on the 4-byte grid in b[start:end] in place; new end or -1."""
    p = b.find(_ESC, start, end)
    while p >= 0:
        if (p - start) & 3 == 0:
            if p + 8 > end or b[p + 4] != 0x1B or b[p + 5] != 0x1B or b[p + 6] != 0x1B or b[p + 7] != 0x1B:
                return -1  # an escape that is neither data nor the end: broken frame
            mv = memoryview(b)
            mv[p + 4:end - 4] = mv[p + 8:end]
            end -= 4
            p = b.find(_ESC, p + 4, end)
        else:
            p = b.find(_ESC, p + 1, end)
    return end


def decode_frame(b, n, out, dzg=False):
    """Decode the transport frame b[0:n] (a bytearray; escapes are collapsed in place) into out; True on success."""
    out.clear()
    c = check_frame(b, n)
    if c[0] == "!":
        out.error = c[1:]
        return False
    out.crc = c
    fill = b[n - 3]
    end = n - 8
    if b.find(_ESC, 8, end) >= 0:
        end = unescape(b, 8, end)
        if end < 0:
            out.error = E_ESCAPE
            return False
    # The fill count should be 0..3, but DZG meters send 4 (dzg-1.hex); the fill bytes must still be zeros.
    if end - fill < 8:
        out.error = E_FILL
        return False
    for i in range(end - fill, end):
        if b[i]:
            out.error = E_FILL
            return False
    ok = decode_messages(b, 8, end - fill, out, dzg)
    out.crc = c
    return ok


def decode_messages(b, p, end, out, dzg=False):
    """Decode the SML messages in b[p:end] (no transport) into out; True when the structure is complete."""
    crc = out.crc
    out.clear()
    out.crc = crc
    try:
        r = _messages(b, p, end, out, dzg)
    except IndexError:
        r = E_TRUNC
    if r is not None:
        out.error = r
        out.mask = 0
        return False
    return True


def _messages(b, p, end, out, dzg):
    """Walk every message; return None or an error text. Values land in out only via _list."""
    seen = 0
    while p < end:
        tl = b[p]
        if tl == 0x00:
            p += 1  # fill between messages, as libsml tolerates
            continue
        if tl != 0x76:
            return E_STRUCT
        p += 1
        for _ in range(3):  # transactionId, groupNo, abortOnError
            p = _skip(b, p, end)
            if p < 0:
                return E_TRUNC
        if b[p] != 0x72:
            return E_STRUCT
        p += 1
        tl = b[p]
        if tl & 0xF0 != 0x60 or tl & 0x0F < 2 or tl & 0x0F > 5:
            return E_STRUCT
        tag = 0
        for i in range(p + 1, p + (tl & 0x0F)):
            tag = (tag << 8) | b[i]
        p += tl & 0x0F
        if tag == _TAG_GET_LIST_RES:
            p = _get_list(b, p, end, out, dzg)
            if p < 0:
                return E_STRUCT
        else:
            p = _skip(b, p, end)
            if p < 0:
                return E_TRUNC
        p = _skip(b, p, end)  # message CRC: the transport CRC already covers the bytes
        if p < 0 or p >= end or b[p] != 0x00:
            return E_STRUCT
        p += 1
        seen += 1
    if p != end or not seen:
        return E_STRUCT
    return None


def _get_list(b, p, end, out, dzg):
    """Parse an SML_GetList.Res body at p; return the position after it or -1."""
    if b[p] != 0x77:
        return -1
    p = _skip(b, p + 1, end)  # clientId
    if p < 0:
        return -1
    tl = b[p]
    if tl & 0xF0 == 0x00 and tl > 1:  # serverId as a short octet string (TL counts itself)
        n = tl - 1
        if n > _MAX_SID:
            n = _MAX_SID
        sid = out.sid
        for i in range(n):
            sid[i] = b[p + 1 + i]
        out.sid_len = n
    p = _skip(b, p, end)  # serverId
    if p < 0:
        return -1
    p = _skip(b, p, end)  # listName
    if p < 0:
        return -1
    p = _skip(b, p, end)  # actSensorTime
    if p < 0:
        return -1
    p = _list(b, p, end, out, dzg)
    if p < 0:
        return -1
    p = _skip(b, p, end)  # listSignature
    if p < 0:
        return -1
    return _skip(b, p, end)  # actGatewayTime


def _list(b, p, end, out, dzg):
    """Parse the valList (list of SML_ListEntry) at p into out; return the next position or -1."""
    tl = b[p]
    if tl & 0x70 != 0x70:
        return -1
    cnt = tl & 0x0F
    p += 1
    while tl & 0x80:  # multi-byte TL: the length continues in the low nibble of the next byte
        tl = b[p]
        p += 1
        cnt = (cnt << 4) | (tl & 0x0F)
    slots = obis.SLOT
    units = obis.SML_UNIT
    mant = out.mant
    exp = out.exp
    ffmask = 0  # slots already filled from an F=0xFF code (the current value beats billing periods)
    while cnt:
        cnt -= 1
        if b[p] != 0x77:
            return -1
        p += 1
        # objName: a 6-byte octet string A B C D E F
        slot = -1
        if b[p] == 0x07:
            if b[p + 1] == 1:
                slot = slots.get((b[p + 3] << 16) | (b[p + 4] << 8) | b[p + 5], -1)
            f = b[p + 6]
            p += 7
        else:
            p = _skip(b, p, end)
            if p < 0:
                return -1
            f = 0
        # status and valTime: skipped; Holley's valTime is a bare uint32 instead of a list, _skip takes both
        t = b[p]
        if t == 0x01:
            p += 1
        else:
            p = _skip(b, p, end)
            if p < 0:
                return -1
        t = b[p]
        if t == 0x01:
            p += 1
        else:
            p = _skip(b, p, end)
            if p < 0:
                return -1
        # unit
        t = b[p]
        if t == 0x62:
            unit = b[p + 1]
            p += 2
        elif t == 0x01:
            unit = -1
            p += 1
        else:
            unit = -2
            p = _skip(b, p, end)
            if p < 0:
                return -1
        # scaler (int8)
        t = b[p]
        if t == 0x52:
            sc = b[p + 1]
            if sc > 127:
                sc -= 256
            p += 2
        elif t == 0x01:
            sc = 0
            p += 1
        else:
            sc = 0
            unit = -2
            p = _skip(b, p, end)
            if p < 0:
                return -1
        # value: an integer of 1..8 bytes is all we use; anything else is skipped
        t = b[p]
        ln = t & 0x0F
        if t & 0x80 == 0 and (t & 0x70 == 0x50 or t & 0x70 == 0x60) and 2 <= ln <= 9:
            q = p + ln
            if q > end:
                return -1
            if slot >= 0:
                v = 0
                for i in range(p + 1, q):
                    v = (v << 8) | b[i]
                if t & 0x70 == 0x50 and b[p + 1] & 0x80:
                    # libsml's DZG workaround: these meters send 16.7.0 as a 1-2 byte signed int meaning unsigned
                    if dzg and slot == _SLOT_POWER and ln <= 3:
                        out.dzg_fixed += 1
                    else:
                        v -= 1 << (8 * (ln - 1))
            p = q
        else:
            slot = -1
            p = _skip(b, p, end)
            if p < 0:
                return -1
        # valueSignature
        t = b[p]
        if t == 0x01:
            p += 1
        else:
            p = _skip(b, p, end)
            if p < 0:
                return -1
        if p > end:
            return -1
        if slot >= 0:
            if unit != units[slot] and unit != -1:
                out.unit_mismatch += 1
            elif f == 0xFF or not (ffmask >> slot) & 1:
                mant[slot] = v
                exp[slot] = sc
                out.mask |= 1 << slot
                if f == 0xFF:
                    ffmask |= 1 << slot
    return p
