"""Text rules for settings values: host names, control characters, UTF-16 surrogates from JSON escapes."""


def is_hostname(text):
    """True for a DNS name of ASCII letters, digits and inner dashes (labels 1-63, at most 253 characters)."""
    if len(text) > 253:
        return False
    for label in text.split("."):
        if not 1 <= len(label) <= 63 or label[0] == "-" or label[-1] == "-":
            return False
        for ch in label:
            if not (ch.isalpha() or ch.isdigit() or ch == "-") or ord(ch) > 127:
                return False
    return True


def printable(text):
    """False when text holds a C0 or C1 control character or DEL (no place in a name or an MQTT string)."""
    for ch in text:
        c = ord(ch)
        if c < 32 or 127 <= c < 160:
            return False
    return True


def ascii_printable(text):
    for ch in text:
        c = ord(ch)
        if c < 32 or c > 126:
            return False
    return True


def join_surrogates(text):
    """(text with UTF-16 surrogate pairs joined, None), or (None, reason) when a lone surrogate is in it.

    A JSON string may carry any code point as a "\\ud83d\\ude00" escape pair. CPython's json joins the pair and
    keeps a lone "\\ud800" as a surrogate that no UTF-8 encoder accepts; MicroPython's json joins nothing and
    stores each half as 3 bytes (CESU-8). Either way the text cannot go to the radio, the broker or the flash
    as UTF-8: join the pairs, refuse the rest.
    """
    for ch in text:
        if 0xD800 <= ord(ch) <= 0xDFFF:
            break
    else:
        return text, None  # the usual case: nothing allocated
    out = []
    high = 0
    for ch in text:
        c = ord(ch)
        if high:
            if not 0xDC00 <= c <= 0xDFFF:
                return None, "must be valid Unicode (lone UTF-16 surrogate \\u%04x)" % high
            out.append(chr(0x10000 + ((high - 0xD800) << 10) + (c - 0xDC00)))
            high = 0
        elif 0xD800 <= c <= 0xDBFF:
            high = c
        elif 0xDC00 <= c <= 0xDFFF:
            return None, "must be valid Unicode (lone UTF-16 surrogate \\u%04x)" % c
        else:
            out.append(ch)
    if high:
        return None, "must be valid Unicode (lone UTF-16 surrogate \\u%04x)" % high
    return "".join(out), None


def escaped(text):
    """text with each UTF-16 surrogate written out as the six characters \\udxxx."""
    out = []
    for ch in text:
        c = ord(ch)
        out.append("\\u%04x" % c if 0xD800 <= c <= 0xDFFF else ch)
    return "".join(out)
