"""mDNS wire format (RFC 6762/1035): names compared in place through compression pointers, records written with it."""

from micropython import const

_MAX_HOPS = const(16)        # compression pointers followed per name: a loop of pointers ends here
_MAX_NAME = const(255)

TYPE_A = const(1)
TYPE_PTR = const(12)
TYPE_TXT = const(16)
TYPE_SRV = const(33)
TYPE_ANY = const(255)
CLASS_IN = const(1)
CACHE_FLUSH = const(0x8000)  # rrclass top bit in a response; in a question it is the QU (unicast response) bit


def encode_name(text):
    """'a.b.local' -> the uncompressed wire name, lower case (our own names; peers may send any case)."""
    out = bytearray()
    for label in text.rstrip(".").split("."):
        raw = label.lower().encode()
        if not raw or len(raw) > 63:
            raise ValueError("bad label")
        out.append(len(raw))
        out.extend(raw)
    out.append(0)
    if len(out) > _MAX_NAME:
        raise ValueError("name too long")
    return bytes(out)


def encode_txt(items):
    """['k=v', ...] -> TXT rdata (one length-prefixed string each; an empty list is one empty string)."""
    out = bytearray()
    for item in items:
        raw = item.encode()
        if len(raw) > 255:
            raise ValueError("TXT string too long")
        out.append(len(raw))
        out.extend(raw)
    if not out:
        out.append(0)
    return bytes(out)


def skip_name(buf, n, pos):
    """Offset after the name at pos in buf[:n], or -1 when it runs over the end or is malformed."""
    total = 0
    while pos < n:
        length = buf[pos]
        if length == 0:
            return pos + 1
        if length & 0xC0 == 0xC0:
            return pos + 2 if pos + 2 <= n else -1
        if length & 0xC0:
            return -1
        total += length + 1
        if total > _MAX_NAME:
            return -1
        pos += length + 1
    return -1


def name_equals(buf, n, pos, target):
    """Whether the (maybe compressed) name at pos in buf[:n] is target (an uncompressed lower-case wire name)."""
    t = 0
    hops = 0
    tn = len(target)
    while pos < n:
        length = buf[pos]
        if length & 0xC0 == 0xC0:
            if pos + 1 >= n or hops >= _MAX_HOPS:
                return False
            pos = ((length & 0x3F) << 8) | buf[pos + 1]
            hops += 1
            continue
        if length & 0xC0 or t >= tn or target[t] != length:
            return False
        if length == 0:
            return True
        if pos + 1 + length > n:
            return False
        for i in range(1, length + 1):
            c = buf[pos + i]
            if 65 <= c <= 90:
                c += 32
            if c != target[t + i]:
                return False
        t += length + 1
        pos += length + 1
    return False


def name_hash(buf, n, pos):
    """A 24-bit hash of the (maybe compressed) name at pos, case folded; -1 when malformed. Our names' hashes are
    computed once, so a question or record for another host's name is told apart with one walk over it instead of
    one comparison per record we hold (a busy network's foreign traffic is most of what arrives)."""
    h = 0
    hops = 0
    total = 0
    while pos < n:
        length = buf[pos]
        if length & 0xC0 == 0xC0:
            if pos + 1 >= n or hops >= _MAX_HOPS:
                return -1
            pos = ((length & 0x3F) << 8) | buf[pos + 1]
            hops += 1
            continue
        if length & 0xC0:
            return -1
        if length == 0:
            return h
        total += length + 1
        if total > _MAX_NAME or pos + 1 + length > n:
            return -1
        h = (h * 31 + length) & 0xFFFFFF
        for i in range(pos + 1, pos + 1 + length):
            c = buf[i]
            if 65 <= c <= 90:
                c += 32
            h = (h * 31 + c) & 0xFFFFFF
        pos += length + 1
    return -1


def compare_bytes(a, a0, a1, b):
    """Lexicographic order of a[a0:a1] against b: -1, 0 or 1 (RFC 6762 8.2 tie-breaking), without slicing."""
    la = a1 - a0
    lb = len(b)
    for i in range(la if la < lb else lb):
        x = a[a0 + i]
        y = b[i]
        if x != y:
            return -1 if x < y else 1
    if la == lb:
        return 0
    return -1 if la < lb else 1


class Writer:
    """Writes names and records into out (a bytearray) up to limit, compressing names against those already in it.

    Compression: every suffix of every name written is remembered with its offset (a small dict per packet,
    built only when there is something to answer), so a later name that ends the same way becomes a pointer.
    """

    def __init__(self, out):
        self.out = out
        self.pos = 0
        self.limit = len(out)
        self._seen = {}

    def reset(self, limit, start):
        self.pos = start
        self.limit = limit if limit < len(self.out) else len(self.out)
        self._seen.clear()

    def fits(self, size):
        return self.pos + size <= self.limit

    def u16(self, v):
        o = self.out
        p = self.pos
        o[p] = (v >> 8) & 0xFF
        o[p + 1] = v & 0xFF
        self.pos = p + 2

    def name(self, wire):
        """Write wire (uncompressed) with a pointer to its longest suffix already in the packet; False if full."""
        seen = self._seen
        i = 0
        while wire[i] != 0:
            off = seen.get(wire[i:])
            if off is not None:
                if not self.fits(i + 2):
                    return False
                self._raw(wire, i)
                self.u16(0xC000 | off)
                return True
            i += wire[i] + 1
        if not self.fits(len(wire)):
            return False
        self._raw(wire, len(wire) - 1)
        self.out[self.pos] = 0
        self.pos += 1
        return True

    def _raw(self, wire, upto):
        # the labels wire[:upto], each suffix remembered where it starts (pointers reach 14 bits)
        i = 0
        base = self.pos
        while i < upto:
            if base + i < 0x3FFF:
                self._seen[wire[i:]] = base + i
            i += wire[i] + 1
        self.out[base:base + upto] = wire[:upto]
        self.pos = base + upto

    def record(self, rec, rrclass, ttl):
        """One resource record (see Record); False (and nothing kept) when it does not fit."""
        start = self.pos
        seen = len(self._seen)
        if not self.name(rec.name) or not self.fits(10):
            return self._undo(start, seen)
        self.u16(rec.rtype)
        self.u16(rrclass)
        self.u16(ttl >> 16)
        self.u16(ttl & 0xFFFF)
        len_at = self.pos
        self.pos += 2
        data_at = self.pos
        rdata = rec.rdata
        if rec.name_at >= 0:
            if not self.fits(rec.name_at):
                return self._undo(start, seen)
            self.out[self.pos:self.pos + rec.name_at] = rdata[:rec.name_at]
            self.pos += rec.name_at
            if not self.name(rdata[rec.name_at:]):
                return self._undo(start, seen)
        else:
            if not self.fits(len(rdata)):
                return self._undo(start, seen)
            self.out[self.pos:self.pos + len(rdata)] = rdata
            self.pos += len(rdata)
        size = self.pos - data_at
        self.out[len_at] = size >> 8
        self.out[len_at + 1] = size & 0xFF
        return True

    def _undo(self, start, seen):
        self.pos = start
        if len(self._seen) != seen:   # forget suffixes that pointed into what was taken back
            for k in [k for k, v in self._seen.items() if v >= start]:
                del self._seen[k]
        return False


class Record:
    """One record we own: name (wire), rtype, unique (cache-flush, probed), ttl (s), rdata; name_at: where a name
    starts inside rdata (PTR 0, SRV 6, else -1) so it can be compressed and compared through pointers."""

    def __init__(self, name, rtype, unique, ttl, rdata, name_at=-1):
        self.name = name
        self.hash = name_hash(name, len(name), 0)
        self.rtype = rtype
        self.unique = unique
        self.ttl = ttl
        self.rdata = rdata
        self.name_at = name_at
        self.sent_ms = None      # when it was last multicast (RFC 6762 6: at most once a second)
        self.extra = ()          # records that go along as additionals (PTR -> SRV, TXT, A; SRV -> A)

    def rdata_equals(self, buf, n, pos, rdlen):
        """Whether the rdata at buf[pos:pos+rdlen] is ours (names inside compared through pointers)."""
        rdata = self.rdata
        if self.name_at < 0:
            if rdlen != len(rdata) or pos + rdlen > n:
                return False
            return compare_bytes(buf, pos, pos + rdlen, rdata) == 0
        k = self.name_at
        if pos + k > n or compare_bytes(buf, pos, pos + k, rdata[:k]) != 0:
            return False
        return name_equals(buf, n, pos + k, rdata[k:])
