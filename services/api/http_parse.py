"""Strict HTTP/1.1 request parsing for the hardened server: the head, Content-Length, percent-decoding, numbers
and tokens from headers and queries (adafruit_httpserver's own parser is too lenient, docs/api.md)."""

from adafruit_httpserver import Headers, QueryParams, Request

from services.api.answers import ApiError

# RFC 9110 tchar: the bytes of a method or a header name.
_TCHAR = b"!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_HEX = "0123456789abcdef"


def ascii_uint(text, max_digits=9):
    """The value of text when it is 1..max_digits ASCII digits and nothing else, else None.

    int() alone is too kind for request input: CPython's takes "\u0661\u0662" (Arabic-Indic digits) as 12, a
    sign, surrounding whitespace and underscores; str.isdigit() also passes superscripts int() then refuses.
    """
    if not text or len(text) > max_digits:
        return None
    for ch in text:
        if ch < "0" or ch > "9":
            return None
    return int(text)


def bearer_token(header):
    """The token of an Authorization header "Bearer <token>", or None.

    The scheme is case-insensitive and one or more spaces or tabs may precede the token (RFC 9110 11.4 and
    11.6.2 with RFC 6750 2.1); anything after the token (a second word) makes the header invalid.
    """
    if header is None:
        return None
    value = header.strip(" \t")
    if len(value) < 8 or value[:6].lower() != "bearer" or value[6] not in " \t":
        return None
    token = value[7:].strip(" \t")
    if not token:
        return None
    for ch in token:
        if ch == " " or ch == "\t":
            return None
    return token


def _is_token(data):
    """True when data (bytes) is a non-empty RFC 9110 token (a method or a header name)."""
    if not data:
        return False
    for b in data:
        if b not in _TCHAR:
            return False
    return True


def parse_head(head):
    """(method, path, query string, version, Headers) of a request head (bytes, without the blank line).

    Strict where leniency lets one request mean two things to two parsers (RFC 9112 2.2, 3, 5): lines end only
    at CRLF, and a bare CR or LF, a NUL, a folded line, whitespace before a colon or a name that is not a token
    is a 400 (ApiError). Values lose only the spaces and tabs around them and keep every other byte: they are
    never split on the other characters str.splitlines() treats as line ends (\\x0b \\x0c \\x1c-\\x1e
    \\x85 U+2028 U+2029), as adafruit_httpserver 4.8.2's Headers does.
    """
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not _is_token(parts[0]) or parts[2] not in (b"HTTP/1.1", b"HTTP/1.0"):
        raise ApiError(400, "Malformed request line")
    target = parts[1]
    if not target:
        raise ApiError(400, "Malformed request line")
    for b in target:
        if b <= 32 or b >= 127:  # controls, spaces and non-ASCII must be percent-encoded
            raise ApiError(400, "Malformed request line")
    headers = Headers()
    for i in range(1, len(lines)):
        line = lines[i]
        colon = line.find(b":")
        # A folded line or "Name :" fails the token check (RFC 9112 5.1 and 5.2 ask for a 400).
        if colon <= 0 or not _is_token(line[:colon]):
            raise ApiError(400, "Malformed header line")
        value = line[colon + 1:].strip(b" \t")
        if b"\r" in value or b"\n" in value or b"\x00" in value:
            raise ApiError(400, "Malformed header line")
        try:
            headers.add(line[:colon].decode(), value.decode())
        except UnicodeError:
            raise ApiError(400, "Header is not valid UTF-8")
    target = target.decode()
    mark = target.find("?")
    if mark < 0:
        return parts[0].decode(), target, "", parts[2].decode(), headers
    return parts[0].decode(), target[:mark], target[mark + 1:], parts[2].decode(), headers


def content_length(headers):
    """The declared body size: 0 when absent, -1 when not plain ASCII digits or when values disagree.

    Repeated identical values ("5, 5" or two lines of 5) count once, as RFC 9110 8.6 allows; different values
    would let a proxy and this server see different bodies.
    """
    size = None
    for value in headers.get_list("Content-Length"):
        for part in value.split(","):
            n = ascii_uint(part.strip(" \t"))
            if n is None or (size is not None and n != size):
                return -1
            size = n
    return 0 if size is None else size


def _hex_digit(b):
    """Value of one ASCII hex digit (a byte), or -1."""
    return _HEX.find(chr(b).lower()) if b < 128 else -1


def unquote(text):
    """Percent-decode a query value (adafruit_httpserver 4.8 leaves it encoded); '+' is a space."""
    if "%" not in text and "+" not in text:
        return text
    raw = text.replace("+", " ").encode()
    out = bytearray()
    i = 0
    n = len(raw)
    while i < n:
        c = raw[i]
        if c == 37 and i + 2 < n:  # '%' followed by two hex digits (int(x, 16) would also take "+1" or " 1")
            hi = _hex_digit(raw[i + 1])
            lo = _hex_digit(raw[i + 2])
            if hi >= 0 and lo >= 0:
                out.append(hi * 16 + lo)
                i += 3
                continue
        out.append(c)
        i += 1
    try:
        return out.decode()
    except UnicodeError:
        raise ApiError(400, "Query is not valid UTF-8")


class ParsedRequest(Request):
    """adafruit_httpserver's Request filled from parse_head() instead of its own parser, whose Headers split
    header lines with str.splitlines() and need ": " after a name (so "Name:value" was refused)."""

    def __init__(self, server, connection, client_address, method, path, query_string, version, headers):
        # Request.__init__ would parse raw_request again: set what it sets, from our parse.
        self.server = server
        self.connection = connection
        self.client_address = client_address
        self.raw_request = b""
        self._form_data = None
        self._cookies = None
        self.method = method
        self.path = path
        self.query_params = QueryParams(query_string)
        self.http_version = version
        self.headers = headers
