"""HTTP parsing quirks of services/api/server.py (and where services parse numbers from a request), in-process:
header lines split on CRLF only, Name:value, no space before the colon, conflicting Content-Length, Bearer
with several spaces or a tab, ASCII digits wherever a number comes from the request."""


import pytest
import socketpool
from adafruit_httpserver import GET, POST, Headers, JSONResponse, Route

from services.api.answers import ApiError
from services.api.http_parse import ascii_uint, bearer_token, content_length, parse_head, unquote
from services.api.server import HardenedServer
from services.api.service import HttpApi
from services.history.routes import BadRequest, parse_date, parse_days
from tests.inproc import exchange as raw_exchange, server_port, split_answer
from tests.steppedclock import SteppedClock

# Every character CPython's str.splitlines() takes as a line end besides CR and LF, as UTF-8 bytes.
SPLITLINES_ENDS = [b"\x0b", b"\x0c", b"\x1c", b"\x1d", b"\x1e", b"\xc2\x85", b"\xe2\x80\xa8", b"\xe2\x80\xa9"]


@pytest.fixture
def echo():
    """A server whose one route answers the headers and the body it saw."""
    def handler(request):
        return JSONResponse(request, {"headers": dict(request.headers.items()), "body": request.body.decode(),
                                      "q": request.query_params._storage})

    clock = SteppedClock()
    server = HardenedServer(socketpool.SocketPool(None), lambda r: handler(r), ticks=clock)
    server.start("127.0.0.1", 0)
    server.port = server._sock._sock.getsockname()[1]
    server.clock = clock
    yield server
    server.stop()


def exchange(server, data):
    """Send raw bytes, poll until the server closes; (status, body bytes)."""
    def poll():
        server.poll()
        server.clock.advance(10)  # lets the drain after an early 400 end

    status, _, body = split_answer(raw_exchange(server.port, data, poll))
    return status, body


# --- header lines ---

def test_name_colon_value_without_space_is_accepted(echo):
    status, body = exchange(echo, b"POST /x HTTP/1.1\r\nHost:x\r\nContent-Length:5\r\nX-A:\t b \r\n\r\nhello")
    assert status == 200
    assert b'"host": "x"' in body and b'"x-a": "b"' in body and b'"body": "hello"' in body


@pytest.mark.parametrize("sep", SPLITLINES_ENDS, ids=lambda b: b.hex())
def test_header_value_is_not_split_on_other_line_ends(echo, sep):
    # Split there, the value would smuggle a second header: Transfer-Encoding (411) or a body length.
    status, body = exchange(echo, b"GET /x HTTP/1.1\r\nHost: x\r\nX-Note: a" + sep
                            + b"Transfer-Encoding: chunked\r\n\r\n")
    assert status == 200
    assert b'"transfer-encoding"' not in body and b'"x-note": "a' in body


@pytest.mark.parametrize("head", [
    b"GET /x HTTP/1.1\r\nHost : x",            # whitespace between name and colon (RFC 9112 5.1)
    b"GET /x HTTP/1.1\r\nHost\t: x",
    b"GET /x HTTP/1.1\r\nHost: x\r\n folded",   # obsolete line folding
    b"GET /x HTTP/1.1\r\nHost: x\nX-B: y",     # bare LF inside the head
    b"GET /x HTTP/1.1\r\nHost: x\rX-B: y",     # bare CR
    b"GET /x HTTP/1.1\r\nX-A: a\x00b",         # NUL in a value
    b"GET /x HTTP/1.1\r\n: novalue",           # empty name
    b"GET /x HTTP/1.1\r\nX(A): b",             # not a token
    b"GET  /x HTTP/1.1\r\nHost: x",            # two spaces in the request line
    b"GET /x\x0b HTTP/1.1\r\nHost: x",          # a control in the target
    b"GET /x HTTP/2.0\r\nHost: x",
], ids=["space-colon", "tab-colon", "folded", "bare-lf", "bare-cr", "nul", "empty-name", "bad-name",
        "double-space", "vt-target", "version"])
def test_malformed_heads_are_400(echo, head):
    status, body = exchange(echo, head + b"\r\n\r\n")
    assert status == 400 and b"Malformed" in body


def test_parse_head_keeps_other_bytes_in_values():
    method, path, query, version, headers = parse_head(b"GET /a?b=1 HTTP/1.0\r\nX-A: 1\x0b2\x1c3 \t")
    assert (method, path, query, version) == ("GET", "/a", "b=1", "HTTP/1.0")
    assert headers.get("x-a") == "1\x0b2\x1c3" and len(headers) == 1
    with pytest.raises(ApiError):
        parse_head(b"GET /a HTTP/1.1\r\nX-A: \xff")  # not UTF-8


# --- Content-Length ---

def test_conflicting_content_length_is_400(echo):
    status, body = exchange(echo, b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n"
                                  b"hello!")
    assert status == 400 and b"Content-Length" in body
    status, _b = exchange(echo, b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 6\r\n\r\nhello!")
    assert status == 400


def test_identical_content_length_counts_once(echo):
    status, body = exchange(echo, b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\ncontent-length: 5\r\n\r\nhello")
    assert status == 200 and b'"body": "hello"' in body and b'"content-length": "5"' in body
    status, body = exchange(echo, b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 5\r\n\r\nhello")
    assert status == 200 and b'"body": "hello"' in body


@pytest.mark.parametrize("value", ["\u0665".encode(), "\u00b2".encode(), b"+5", b"5_0", b"0x5", b"", b"5 5",
                                   b"1234567890"],
                         ids=["arabic-indic", "superscript", "plus", "underscore", "hex", "empty", "space",
                              "ten-digits"])
def test_content_length_only_ascii_digits(echo, value):
    status, body = exchange(echo, b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: " + value + b"\r\n\r\nhello")
    assert status == 400 and b"Invalid Content-Length" in body


def test_content_length_function():
    h = Headers()
    assert content_length(h) == 0
    h.add("Content-Length", " 7 ")
    assert content_length(h) == 7
    h.add("Content-Length", "7,7")
    assert content_length(h) == 7
    h.add("Content-Length", "8")
    assert content_length(h) == -1


# --- numbers and tokens ---

def test_ascii_uint():
    assert ascii_uint("0") == 0 and ascii_uint("366", 4) == 366
    for bad in ("", " 1", "1 ", "+1", "-1", "1_0", "\u0661\u0662", "\u00b2", "12345", "1.0"):
        assert ascii_uint(bad, 4) is None, bad


def test_history_query_numbers_are_ascii_digits_only():
    assert parse_days("31") == 31 and parse_date("2024-02-29", "date") == parse_date("2024-02-29", "d")
    for bad in ("\u0663", "\u0661\u0662", "\u00b2", "+3", " 3"):
        with pytest.raises(BadRequest):
            parse_days(bad)
    for bad in ("\u0662\u0660\u0662\u0664-01-01", "2024-\u0660\u0661-01", "2024-01-\u00b9\u00b9", "2024-+1-01"):
        with pytest.raises(BadRequest):
            parse_date(bad, "date")


def test_percent_decoding_takes_hex_digits_only():
    assert unquote("a%20b+c") == "a b c" and unquote("%E2%82%ac") == "\u20ac"
    assert unquote("%+1") == "% 1" and unquote("%-1x") == "%-1x"  # int(" 1", 16) would have made a \x01


def test_bearer_token_parsing():
    assert bearer_token("Bearer abc") == "abc"
    assert bearer_token("bearer    abc") == "abc"
    assert bearer_token("Bearer\tabc") == "abc"
    assert bearer_token("BEARER \t abc ") == "abc"
    for bad in (None, "", "Bearer", "Bearer ", "Bearerabc", "Basic abc", "Bearer abc def", "Bearer abc\tdef"):
        assert bearer_token(bad) is None, bad


class _Settings:
    def get(self, key, default=None):
        return True if key == "api_auth_required" else default


class _Auth:
    def level(self, token):
        return 2 if token == "secret" else None

    def poll(self, now_ms):
        pass  # services.api.auth.Tokens expires its pending pair here


class _App:
    settings = _Settings()
    auth = _Auth()
    log = None
    mem_free = None
    device_id = "024d50000001"


def _api_exchange(api, data):
    return split_answer(raw_exchange(server_port(api), data, lambda: api.poll(0)))[0]


class _Routes:
    @staticmethod
    def routes(app):
        return [Route("/api/v1/thing", [GET, POST], lambda r: JSONResponse(r, {"ok": True}))]


@pytest.mark.parametrize("value,status", [
    (b"Bearer secret", 200), (b"Bearer   secret", 200), (b"Bearer\tsecret", 200), (b"bearer \t secret", 200),
    (b"Bearer", 401), (b"Bearer secret extra", 401), (b"Basic secret", 401),
], ids=["one-space", "three-spaces", "tab", "mixed", "no-token", "two-words", "basic"])
def test_authorization_header_through_the_api(value, status):
    api = HttpApi(socketpool.SocketPool(None), _App(), host="127.0.0.1", port=0, route_modules=[_Routes])
    api.start()
    try:
        assert _api_exchange(api, b"GET /api/v1/thing HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: " + value
                             + b"\r\n\r\n") == status
    finally:
        api.stop()
