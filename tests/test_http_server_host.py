"""The hardened server on the host runtime: hostile clients, size limits, malformed requests; alive stays fast."""

import json
import socket
import threading
import time

import pytest

from tests.hostproc import recv_until_closed
from tests.test_api_harness import body_of, header_of, raw, start_host, status_of, timed_get

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    h = start_host(tmp_path_factory, "http_server")
    yield h
    h.stop()


def _info_value(host, section, name):
    status, body, _h = host.get("/api/v1/system/info")
    assert status == 200
    for entry in body.get(section, []):
        if entry["name"] == name:
            return entry["value"]
    return None


# --- hostile clients ---

def _closer(port, stop, src=None):
    while not stop.is_set():
        s = socket.create_connection(("127.0.0.1", port), source_address=src)
        s.close()
        time.sleep(0.01)


def _slow(port, stop, src=None):
    """One byte every 300 ms: the server must cut it off, not wait for it."""
    while not stop.is_set():
        s = socket.create_connection(("127.0.0.1", port), source_address=src)
        try:
            for ch in b"GET /api/v1/system/alive HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n":
                if stop.is_set():
                    break
                s.sendall(bytes([ch]))
                time.sleep(0.3)
        except OSError:
            pass  # cut off by the server: that is the point
        finally:
            s.close()


def _half_body(port, stop, src=None):
    while not stop.is_set():
        s = socket.create_connection(("127.0.0.1", port), source_address=src)
        try:
            s.sendall(b"POST /api/v1/settings HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                      b"Content-Length: 100\r\n\r\n{\"device_name\": ")
            stop.wait(1.0)
        except OSError:
            pass
        finally:
            s.close()


def _non_reader(port, stop, src=None):
    """Asks for the largest answer (time zones, ~25 KB) and never reads it."""
    while not stop.is_set():
        s = socket.create_connection(("127.0.0.1", port), source_address=src)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
        try:
            s.sendall(b"GET /api/v1/system/timezones HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            stop.wait(1.0)
        except OSError:
            pass
        finally:
            s.close()


@pytest.mark.parametrize("kinds", [
    [_closer],
    [_slow],
    [_half_body],
    [_non_reader],
    [_closer, _slow, _slow, _half_body, _half_body, _non_reader, _non_reader],
], ids=["connect-close", "one-byte-per-300ms", "half-body", "never-reads", "all-at-once"])
def test_alive_answers_under_hostile_clients(host, kinds):
    cycles_before = _info_value(host, "supervisor", "cycles")
    stop = threading.Event()
    # One kind at a time from the honest client's own address; all at once from another (an attacker is another
    # host on the LAN): since issue 26 the server keeps a floor per address, and an address whose connections stall
    # is the one that waits (the owner's own address: test_the_owner_is_answered_beside_seven_stalling_...).
    src = ("127.0.0.2", 0) if len(kinds) > 1 else None
    threads = [threading.Thread(target=k, args=(host.port, stop, src), daemon=True) for k in kinds]
    for t in threads:
        t.start()
    times = []
    try:
        time.sleep(0.3)
        end = time.monotonic() + 3.0
        while time.monotonic() < end:
            took, code = timed_get(host.port)
            assert code == 200
            times.append(took)
            time.sleep(0.1)
    finally:
        stop.set()
        for t in threads:
            t.join(5)
    # Every honest request was answered (raw() gives up after 5 s); how fast is bench/bench_hostile.py's to say.
    assert times
    cycles_after = _info_value(host, "supervisor", "cycles")
    # The supervisor loop kept cycling (a loop held by a connection would show none in ~3 s; the count itself
    # depends on the machine's load, so the bound is loose).
    assert cycles_after - cycles_before > 10
    assert host.proc.poll() is None


def test_the_owner_is_answered_beside_seven_stalling_connections_from_its_own_address(host):
    """Issue 36 finding 7: seven hostile connections (connect-close, one byte per 300 ms, half bodies, answers never
    read) from the owner's own address cost the owner 5 of 39 requests: the address stalls, so the floor that keeps
    a slot for an address that behaves did not apply, and a newcomer whose request came a moment after its
    connection was refused. While one address holds every slot, its newcomer now waits in the momentary place for
    its request (until it stalls, stall_ms); accepting goes on past it (the next are answered at accept or refused):
    every request answered (failed 4-5 of 40 before)."""
    stop = threading.Event()
    kinds = [_closer, _slow, _slow, _half_body, _half_body, _non_reader, _non_reader]
    threads = [threading.Thread(target=k, args=(host.port, stop, None), daemon=True) for k in kinds]
    for t in threads:
        t.start()
    codes = []
    try:
        time.sleep(0.3)
        for i in range(40):
            try:
                # every other request comes a moment after its connection (a browser, a script's session): the
                # server then judges a newcomer that has said nothing yet
                s = socket.create_connection(("127.0.0.1", host.port), timeout=5)
                try:
                    if i % 2:
                        time.sleep(0.03)
                    s.sendall(b"GET /api/v1/system/alive HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                    codes.append(status_of(recv_until_closed(s)))
                finally:
                    s.close()
            except OSError as exc:
                codes.append(repr(exc))
            time.sleep(0.05)
    finally:
        stop.set()
        for t in threads:
            t.join(5)
    assert codes == [200] * 40, codes


def test_meter_keeps_being_read_under_hostile_clients(host):
    before = _info_value(host, "meter", "telegrams_ok")
    if before is None:
        pytest.skip("no meter pipeline wired in code.py yet")
    stop = threading.Event()
    threads = [threading.Thread(target=k, args=(host.port, stop), daemon=True) for k in (_slow, _half_body, _closer)]
    for t in threads:
        t.start()
    time.sleep(4)
    stop.set()
    for t in threads:
        t.join(5)
    assert _info_value(host, "meter", "telegrams_ok") > before


def test_slow_client_gets_408(host):
    s = socket.create_connection(("127.0.0.1", host.port), timeout=5)
    s.sendall(b"GET /api/v1/system/al")
    answer = b""
    while True:
        got = s.recv(4096)
        if not got:
            break
        answer += got
    s.close()
    assert status_of(answer) == 408
    assert json.loads(body_of(answer)) == {"error": "Request timeout", "code": "timeout"}


def test_half_body_gets_408(host):
    answer = raw(host.port, b"POST /api/v1/settings HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                            b"Content-Length: 40\r\n\r\n{\"ledEnable\":")
    assert status_of(answer) == 408
    assert host.get("/api/v1/settings")[1]["ledEnable"] is True


def test_connect_and_close_gets_nothing_and_costs_nothing(host):
    for _ in range(30):
        socket.create_connection(("127.0.0.1", host.port)).close()
    assert raw(host.port, b"", shut=True) == b""
    assert timed_get(host.port)[1] == 200


# --- limits and malformed requests ---

def test_body_over_limit_is_413(host):
    body = b'{"device_name": "' + b"x" * 9000 + b'"}'
    answer = raw(host.port, b"POST /api/v1/settings HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                            b"Content-Length: %d\r\n\r\n" % len(body) + body)
    assert status_of(answer) == 413
    assert "8192" in json.loads(body_of(answer))["error"]


def test_declared_huge_body_is_413_without_reading_it(host):
    answer = raw(host.port, b"POST /api/v1/settings HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                            b"Content-Length: 100000000\r\n\r\n")
    assert status_of(answer) == 413


def test_body_at_limit_is_read(host):
    pad = 8192 - len(b'{"device_name": ""}')
    body = b'{"device_name": "' + b"x" * pad + b'"}'
    assert len(body) == 8192
    answer = raw(host.port, b"POST /api/v1/settings HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                            b"Content-Length: 8192\r\n\r\n" + body)
    assert status_of(answer) == 400  # read whole, then refused by the settings rules, not by size
    assert json.loads(body_of(answer))["fields"]["device_name"] == "at most 31 characters"


def test_header_over_limit_is_431(host):
    answer = raw(host.port,
                 b"GET /api/v1/system/alive HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 3000 + b"\r\n\r\n")
    assert status_of(answer) == 431
    assert "error" in json.loads(body_of(answer))


@pytest.mark.parametrize("request_bytes", [
    b"GARBAGE\r\n\r\n",
    b"GET /api/v1/system/alive HTTP/1.1\r\nNoColonHeader\r\n\r\n",
    b"\xff\xfe GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
    b"POST /api/v1/settings HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: abc\r\n\r\n",
    b"POST /api/v1/settings HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: -5\r\n\r\n",
], ids=["no-request-line", "bad-header", "not-utf8", "length-not-number", "length-negative"])
def test_malformed_requests_are_400(host, request_bytes):
    answer = raw(host.port, request_bytes)
    assert status_of(answer) == 400
    assert "error" in json.loads(body_of(answer))


def test_chunked_request_body_is_411(host):
    answer = raw(host.port, b"POST /api/v1/settings HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n"
                            b"Content-Type: application/json\r\n\r\n2\r\n{}\r\n0\r\n\r\n")
    assert status_of(answer) == 411


def test_expect_100_continue(host):
    s = socket.create_connection(("127.0.0.1", host.port), timeout=5)
    body = b'{"device_name": "Continued"}'
    s.sendall(b"POST /api/v1/settings HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
              b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(body))
    first = s.recv(100)
    assert first == b"HTTP/1.1 100 Continue\r\n\r\n"
    s.sendall(body)
    answer = recv_until_closed(s)
    s.close()
    assert status_of(answer) == 200
    assert host.get("/api/v1/settings")[1]["device_name"] == "Continued"


def test_unknown_path_404_and_wrong_method_405(host):
    a = raw(host.port, b"GET /api/v1/nothing HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    assert status_of(a) == 404 and json.loads(body_of(a)) == {"error": "Not found", "code": "not_found"}
    a = raw(host.port, b"DELETE /api/v1/system/alive HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    assert status_of(a) == 405 and header_of(a, "Allow") == "GET"
    assert header_of(a, "Content-Type") == "application/json"
    a = raw(host.port, b"PUT /api/v1/settings HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n")
    assert status_of(a) == 405 and header_of(a, "Allow") == "GET, POST"


def test_query_values_are_percent_decoded(host):
    a = raw(host.port, b"GET /api/v1/system/wifi_scan?refresh=%74rue HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    assert status_of(a) == 200
    a = raw(host.port, b"GET /api/v1/system/wifi_scan?refresh=%ZZ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    assert status_of(a) == 400


def test_chunked_answer_streams_whole(host):
    a = raw(host.port, b"GET /api/v1/system/timezones HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    assert status_of(a) == 200 and header_of(a, "Transfer-Encoding") == "chunked"
    zones = json.loads(body_of(a))
    assert len(zones) > 400 and {"name": "Europe/Berlin", "utcOffsetMin": zones[0]["utcOffsetMin"] * 0 +
                                 [z for z in zones if z["name"] == "Europe/Berlin"][0]["utcOffsetMin"]} in zones


def test_server_counts_in_info(host):
    status, body, _h = host.get("/api/v1/system/info")
    assert status == 200
    names = {e["name"] for e in body["supervisor"]}
    assert "http.worst_poll_ms" in names


# --- parsing quirks, raw bytes over a real socket ---

def test_header_without_space_after_colon_is_accepted(host):
    a = raw(host.port, b"GET /api/v1/system/alive HTTP/1.1\r\nHost:127.0.0.1\r\nAccept:*/*\r\n\r\n")
    assert status_of(a) == 200 and json.loads(body_of(a))["alive"] is True


def test_whitespace_before_colon_is_400(host):
    a = raw(host.port, b"GET /api/v1/system/alive HTTP/1.1\r\nHost : x\r\n\r\n")
    assert status_of(a) == 400 and json.loads(body_of(a)) == {"error": "Malformed header line", "code": "bad_request"}


@pytest.mark.parametrize("sep", [b"\x0b", b"\x0c", b"\x1c", b"\xc2\x85", b"\xe2\x80\xa8"], ids=lambda b: b.hex())
def test_header_value_is_split_on_crlf_only(host, sep):
    a = raw(host.port, b"GET /api/v1/system/alive HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Note: a" + sep
            + b"Transfer-Encoding: chunked\r\n\r\n")
    assert status_of(a) == 200  # no smuggled Transfer-Encoding (that would be 411)


def test_conflicting_content_length_is_400_identical_is_one(host):
    a = raw(host.port, b"POST /api/v1/settings HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                       b"Content-Length: 2\r\nContent-Length: 27\r\n\r\n{\"device_name\": \"Twice\"}")
    assert status_of(a) == 400 and json.loads(body_of(a)) == {"error": "Invalid Content-Length", "code": "bad_request"}
    body = b'{"device_name": "Twice"}'
    a = raw(host.port, b"POST /api/v1/settings HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                       b"Content-Length: %d\r\nContent-Length: %d\r\n\r\n" % (len(body), len(body)) + body)
    assert status_of(a) == 200 and host.get("/api/v1/settings")[1]["device_name"] == "Twice"


def test_non_ascii_digits_in_content_length_are_400(host):
    a = raw(host.port, b"POST /api/v1/settings HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                       b"Content-Length: \xd9\xa2\r\n\r\n{}")  # U+0662, ARABIC-INDIC DIGIT TWO
    assert status_of(a) == 400 and json.loads(body_of(a)) == {"error": "Invalid Content-Length", "code": "bad_request"}


def test_non_ascii_digits_in_history_query_are_400(host):
    a = raw(host.port, b"GET /api/v1/history/lowRes?start=2024-01-01&days=%D9%A3 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    assert status_of(a) == 400 and "days" in json.loads(body_of(a))["error"]
