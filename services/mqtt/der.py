"""A small DER walker that tells an X.509 certificate from anything else (a private key, garbage) by its structure."""

from micropython import const

_INTEGER = const(0x02)
_BIT_STRING = const(0x03)
_OCTET_STRING = const(0x04)
_SEQUENCE = const(0x30)
_UTC_TIME = const(0x17)
_GENERALIZED_TIME = const(0x18)
_VERSION = const(0xA0)       # [0] EXPLICIT Version
_EXTENSIONS = const(0xA3)    # [3] EXPLICIT Extensions
_CONSTRUCTED = const(0x20)
_MAX_DEPTH = const(24)       # a certificate nests about 8 deep; the cap bounds the recursion on hostile input
# After subjectPublicKeyInfo, in this order, each at most once: issuerUniqueID [1], subjectUniqueID [2], extensions.
_OPTIONAL_TAIL = (0x81, 0x82, _EXTENSIONS)


class DerError(ValueError):
    """Not exactly one well-formed DER certificate; the message says what is wrong."""


class PrivateKeyError(ValueError):
    """The DER is a private key (PKCS#1, PKCS#8, SEC1, DSA or encrypted PKCS#8), not a certificate."""


def element(der, pos, end):
    """(tag, content start, content end) of the DER element at der[pos:end]; DerError unless it fits exactly there.

    Definite lengths only, minimally encoded, at most 3 length octets (a certificate here is a few KB).
    """
    if end - pos < 2:
        raise DerError("truncated at byte %d" % pos)
    tag = der[pos]
    if tag & 0x1F == 0x1F:
        raise DerError("multi-byte tag at byte %d" % pos)
    n = der[pos + 1]
    pos += 2
    if n & 0x80:
        k = n & 0x7F
        if k == 0:
            raise DerError("indefinite length at byte %d (BER, not DER)" % (pos - 2))
        if k > 3 or end - pos < k:
            raise DerError("length at byte %d runs past the data" % (pos - 2))
        if der[pos] == 0:
            raise DerError("length at byte %d is not minimally encoded" % (pos - 2))
        n = 0
        for i in range(k):
            n = (n << 8) | der[pos + i]
        if n < 0x80:
            raise DerError("length at byte %d is not minimally encoded" % (pos - 2))
        pos += k
    if end - pos < n:
        raise DerError("truncated: an element at byte %d needs %d bytes, %d are left" % (pos, n, end - pos))
    return tag, pos, pos + n


def _walk(der, pos, end, depth):
    """Check that der[pos:end] is a run of well-formed elements, descending into constructed ones."""
    if depth > _MAX_DEPTH:
        raise DerError("nested too deep")
    while pos < end:
        tag, start, stop = element(der, pos, end)
        if tag & _CONSTRUCTED:
            _walk(der, start, stop, depth + 1)
        pos = stop


def _expect(der, pos, end, tag, what):
    """(content start, content end) of the element at pos, which must carry tag; DerError naming what otherwise."""
    got, start, stop = element(der, pos, end)
    if got != tag:
        raise DerError("%s: expected tag 0x%02x at byte %d, found 0x%02x" % (what, tag, pos, got))
    return start, stop


def _sequence_of(der, start, end, tags, what):
    """Check that der[start:end] holds exactly one element of each tag in tags, in order."""
    pos = start
    for tag in tags:
        if pos >= end:
            raise DerError("%s: an element is missing" % what)
        pos = _expect(der, pos, end, tag, what)[1]
    if pos != end:
        raise DerError("%s: unexpected data at byte %d" % (what, pos))


def _tbs_certificate(der, pos, end):
    """Check the fields of TBSCertificate (RFC 5280 4.1) at der[pos:end]."""
    tag, start, stop = element(der, pos, end)
    if tag == _VERSION:
        v_start, v_stop = _expect(der, start, stop, _INTEGER, "version")
        if v_stop != stop or v_stop - v_start != 1 or der[v_start] > 2:
            raise DerError("version: must be v1, v2 or v3")
        pos = stop
    start, stop = _expect(der, pos, end, _INTEGER, "serialNumber")
    if stop == start:
        raise DerError("serialNumber: empty")
    pos = stop
    pos = _expect(der, pos, end, _SEQUENCE, "signature")[1]
    pos = _expect(der, pos, end, _SEQUENCE, "issuer")[1]
    start, pos = _expect(der, pos, end, _SEQUENCE, "validity")
    _validity(der, start, pos)
    pos = _expect(der, pos, end, _SEQUENCE, "subject")[1]
    start, pos = _expect(der, pos, end, _SEQUENCE, "subjectPublicKeyInfo")
    _sequence_of(der, start, pos, (_SEQUENCE, _BIT_STRING), "subjectPublicKeyInfo")
    i = 0
    while pos < end:
        tag, start, stop = element(der, pos, end)
        while i < len(_OPTIONAL_TAIL) and _OPTIONAL_TAIL[i] != tag:
            i += 1
        if i == len(_OPTIONAL_TAIL):
            raise DerError("tbsCertificate: unexpected tag 0x%02x at byte %d" % (tag, pos))
        if tag == _EXTENSIONS:
            _sequence_of(der, start, stop, (_SEQUENCE,), "extensions")
        i += 1
        pos = stop


def _validity(der, start, end):
    pos = start
    for what in ("notBefore", "notAfter"):
        if pos >= end:
            raise DerError("validity: %s is missing" % what)
        tag, _start, pos = element(der, pos, end)
        if tag != _UTC_TIME and tag != _GENERALIZED_TIME:
            raise DerError("validity: %s is not a time" % what)
    if pos != end:
        raise DerError("validity: unexpected data at byte %d" % pos)


def check_certificate(der):
    """None when der (bytes) is exactly one DER X.509 certificate; raises PrivateKeyError or DerError otherwise."""
    end = len(der)
    tag, start, stop = element(der, 0, end)
    if tag != _SEQUENCE:
        raise DerError("not a DER SEQUENCE")
    if stop != end:
        raise DerError("trailing data after the certificate (%d bytes)" % (end - stop))
    if start == stop:
        raise DerError("empty SEQUENCE")
    _walk(der, start, stop, 1)
    first, tbs_start, tbs_end = element(der, start, stop)
    if first == _INTEGER:  # PKCS#1, PKCS#8, SEC1 and DSA keys all open with a version INTEGER
        raise PrivateKeyError("private key")
    if first != _SEQUENCE:
        raise DerError("tbsCertificate: expected a SEQUENCE, found tag 0x%02x" % first)
    if tbs_end < stop and der[tbs_end] == _OCTET_STRING:  # EncryptedPrivateKeyInfo {AlgorithmIdentifier, OCTET}
        raise PrivateKeyError("encrypted private key")
    _sequence_of(der, tbs_end, stop, (_SEQUENCE, _BIT_STRING), "signatureAlgorithm, signatureValue")
    _start, sig_start, sig_end = element(der, element(der, tbs_end, stop)[2], stop)
    if sig_end - sig_start < 2 or der[sig_start] > 7:
        raise DerError("signatureValue: not a BIT STRING with a signature")
    _tbs_certificate(der, tbs_start, tbs_end)
