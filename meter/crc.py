"""CRC-16/X-25 and CRC-16/KERMIT (reflected poly 0x1021) over buffers, table driven."""


def _table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x8408 if c & 1 else c >> 1
        t.append(c)
    return tuple(t)


# One table serves both: X-25 and KERMIT differ only in init and final xor.
_T = _table()


def crc16_x25(buf, start=0, end=None):
    """CRC-16/X-25 (init 0xFFFF, xorout 0xFFFF) of buf[start:end]; no slicing, no allocation."""
    if end is None:
        end = len(buf)
    t = _T
    crc = 0xFFFF
    for i in range(start, end):
        crc = (crc >> 8) ^ t[(crc ^ buf[i]) & 0xFF]
    return crc ^ 0xFFFF


def crc16_kermit(buf, start=0, end=None):
    """CRC-16/KERMIT (init 0, xorout 0) of buf[start:end], as some Holley DTZ541 send it."""
    if end is None:
        end = len(buf)
    t = _T
    crc = 0
    for i in range(start, end):
        crc = (crc >> 8) ^ t[(crc ^ buf[i]) & 0xFF]
    return crc
