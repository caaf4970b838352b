"""SML transport v1 check (CRC, escapes, fill) and in-place SML_GetList.Res decoding into a reusable result."""

from micropython import const

from meter import obis
from meter.crc import _T, crc16_kermit, crc16_x25

_ESC = b"\x1b\x1b\x1b\x1b"
_START = b"\x1b\x1b\x1b\x1b\x01\x01\x01\x01"
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
        self.shape = 0  # D0 only: fingerprint of codes and digit counts (see meter.d0)

    def clear(self):
        """Forget the previous telegram (no allocation)."""
        self.mask = 0
        self.sid_len = 0
        self.crc = None
        self.error = None
        self.unit_mismatch = 0
        self.dzg_fixed = 0
        self.shape = 0

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
    if p < 0:
        return -1  # chained calls pass an earlier failure through
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
    """Verify start, end escape and CRC of the transport frame in b[0:n]; return "x25", "kermit" or None."""
    if n < 16:
        return None
    for i in range(4):
        if b[i] != 0x1B or b[4 + i] != 0x01 or b[n - 8 + i] != 0x1B:
            return None
    if b[n - 4] != 0x1A:
        return None
    got = b[n - 2] | (b[n - 1] << 8)  # X.25 travels low byte first
    if crc16_x25(b, 0, n - 2) == got:
        return "x25"
    # Some Holley DTZ541 send CRC-16/KERMIT; its byte order differs between sources, accept both.
    k = crc16_kermit(b, 0, n - 2)
    if k == got or k == (b[n - 2] << 8 | b[n - 1]):
        return "kermit"
    return None


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


def decode_frame(b, n, out, dzg=False, crc=None):
    """Decode the transport frame b[0:n] (a bytearray; escapes are collapsed in place) into out; True on success.

    crc: None tries X.25, then KERMIT; "x25" or "kermit" accepts only that one. Callers that know their
    meter should pin it: every extra CRC accepted is another chance for a damaged frame to pass.
    The CRC loop is inlined and the message walk is one function: on MicroPython every call whose frame
    exceeds a few words allocates that frame on the heap, and the budget is 512 bytes per telegram.
    """
    out.clear()
    if n < 16:
        out.error = E_SHORT
        return False
    if b.find(_START, 0, 8) != 0 or b.find(_ESC, n - 8, n - 4) != n - 8 or b[n - 4] != 0x1A:
        out.error = E_FRAME
        return False
    t = _T
    c = 0xFFFF
    for x in memoryview(b)[:n - 2]:  # iterating a view costs a third less than indexing
        c = (c >> 8) ^ t[(c ^ x) & 0xFF]
    if c ^ 0xFFFF == b[n - 2] | (b[n - 1] << 8) and crc != "kermit":  # X.25 travels low byte first
        out.crc = "x25"
    else:
        out.crc = check_frame(b, n) if crc != "x25" else None
        if out.crc is None or (crc is not None and out.crc != crc):
            out.crc = None
            out.error = E_CRC
            return False
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
    return decode_messages(b, 8, end - fill, out, dzg)


def decode_messages(b, p, end, out, dzg=False):
    """Decode the SML messages in b[p:end] (no transport) into out; True when the structure is complete."""
    c = out.crc
    out.clear()
    out.crc = c
    r = _walk(b, p, end, out, dzg)
    if r is not None:
        out.error = r
        out.mask = 0
        return False
    return True


def _walk(b, p, end, out, dzg):
    """Walk every message and the GetList.Res value lists; return None or an error text."""
    slots = obis.SLOT
    units = obis.SML_UNIT
    mant = out.mant
    exp = out.exp
    ffmask = 0  # slots filled from an F=0xFF code (the current value beats billing-period values)
    seen = 0
    try:
        while p < end:
            tl = b[p]
            if tl == 0x00:
                p += 1  # fill between messages, as libsml tolerates
                continue
            if tl != 0x76:
                return E_STRUCT
            # transactionId, groupNo, abortOnError
            p = _skip(b, _skip(b, _skip(b, p + 1, end), end), end)
            if p < 0 or b[p] != 0x72:
                return E_STRUCT
            tl = b[p + 1]
            if tl & 0xF0 != 0x60 or tl & 0x0F < 2 or tl & 0x0F > 5:
                return E_STRUCT
            tag = 0
            for i in range(p + 2, p + 1 + (tl & 0x0F)):
                tag = (tag << 8) | b[i]
            p += 1 + (tl & 0x0F)
            if tag != _TAG_GET_LIST_RES:
                p = _skip(b, p, end)
                if p < 0:
                    return E_TRUNC
            else:
                # SML_GetList.Res: clientId, serverId, listName, actSensorTime, valList, listSignature, gwTime
                if b[p] != 0x77:
                    return E_STRUCT
                p = _skip(b, p + 1, end)
                if p < 0:
                    return E_TRUNC
                tl = b[p]
                if tl & 0xF0 == 0x00 and tl > 1:  # serverId as a short octet string (TL counts itself)
                    k = tl - 1
                    if k > _MAX_SID:
                        k = _MAX_SID
                    sid = out.sid
                    for i in range(k):
                        sid[i] = b[p + 1 + i]
                    out.sid_len = k
                p = _skip(b, _skip(b, _skip(b, p, end), end), end)
                if p < 0:
                    return E_TRUNC
                tl = b[p]
                if tl & 0x70 != 0x70:
                    return E_STRUCT
                cnt = tl & 0x0F
                p += 1
                while tl & 0x80:  # multi-byte TL: the count continues in the low nibble of the next byte
                    tl = b[p]
                    p += 1
                    cnt = (cnt << 4) | (tl & 0x0F)
                while cnt:
                    cnt -= 1
                    if b[p] != 0x77:
                        return E_STRUCT
                    # objName: a 6-byte octet string A B C D E F
                    slot = -1
                    f = 0
                    if b[p + 1] == 0x07:
                        if b[p + 2] == 1:
                            slot = slots.get((b[p + 4] << 16) | (b[p + 5] << 8) | b[p + 6], -1)
                        f = b[p + 7]
                        p += 8
                    else:
                        p = _skip(b, p + 1, end)
                    # status, then valTime (Holley sends a bare uint32 instead of the list: _skip takes both)
                    if p >= 0 and b[p] == 0x01:
                        p += 1
                    else:
                        p = _skip(b, p, end)
                    if p >= 0 and b[p] == 0x01:
                        p += 1
                    else:
                        p = _skip(b, p, end)
                    if p < 0:
                        return E_TRUNC
                    # unit (uint8)
                    tl = b[p]
                    if tl == 0x62:
                        unit = b[p + 1]
                        p += 2
                    elif tl == 0x01:
                        unit = -1
                        p += 1
                    else:
                        unit = -2
                        p = _skip(b, p, end)
                        if p < 0:
                            return E_TRUNC
                    # scaler (int8)
                    tl = b[p]
                    sc = 0
                    if tl == 0x52:
                        sc = b[p + 1]
                        if sc > 127:
                            sc -= 256
                        p += 2
                    elif tl == 0x01:
                        p += 1
                    else:
                        unit = -2
                        p = _skip(b, p, end)
                        if p < 0:
                            return E_TRUNC
                    # value: an integer of 1..8 bytes is all we take; anything else is skipped
                    tl = b[p]
                    k = tl & 0x0F
                    v = 0
                    if tl & 0x80 == 0 and (tl & 0x70 == 0x50 or tl & 0x70 == 0x60) and 2 <= k <= 9:
                        if p + k > end:
                            return E_TRUNC
                        if slot >= 0:
                            for i in range(p + 1, p + k):
                                v = (v << 8) | b[i]
                            if tl & 0x70 == 0x50 and b[p + 1] & 0x80:
                                # libsml's DZG workaround: 16.7.0 sent as a 1-2 byte signed int that means unsigned
                                if dzg and slot == _SLOT_POWER and k <= 3:
                                    out.dzg_fixed += 1
                                else:
                                    v -= 1 << (8 * (k - 1))
                        p += k
                    else:
                        slot = -1
                        p = _skip(b, p, end)
                        if p < 0:
                            return E_TRUNC
                    # valueSignature
                    if b[p] == 0x01:
                        p += 1
                    else:
                        p = _skip(b, p, end)
                        if p < 0:
                            return E_TRUNC
                    if p > end:
                        return E_TRUNC
                    if slot >= 0:
                        if unit != units[slot] and unit != -1:
                            out.unit_mismatch += 1
                        elif f == 0xFF or not (ffmask >> slot) & 1:
                            mant[slot] = v
                            exp[slot] = sc
                            out.mask |= 1 << slot
                            if f == 0xFF:
                                ffmask |= 1 << slot
                # listSignature, actGatewayTime
                p = _skip(b, _skip(b, p, end), end)
                if p < 0:
                    return E_TRUNC
            # message CRC (the transport CRC already covers these bytes), endOfSmlMsg
            p = _skip(b, p, end)
            if p < 0 or p >= end or b[p] != 0x00:
                return E_STRUCT
            p += 1
            seen += 1
    except IndexError:
        return E_TRUNC
    if p != end or not seen:
        return E_STRUCT
    return None
