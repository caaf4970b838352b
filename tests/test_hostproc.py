"""The end-to-end test client honours 429 + Retry-After, so no test depends on how fast the machine sends requests."""

import http.server
import threading
import time

from tests.hostproc import http_request, retry_after_s


class _Budget(http.server.BaseHTTPRequestHandler):
    """Answers 429 with Retry-After: 1 to the first `refuse` requests, then 200."""

    refuse = 2
    seen = []

    def do_GET(self):
        _Budget.seen.append(time.monotonic())
        if len(_Budget.seen) <= _Budget.refuse:
            self.send_response(429)
            self.send_header("Retry-After", "1")
            body = b'{"error": "Too many requests"}'
        else:
            self.send_response(200)
            body = b'{"status": "ok"}'
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def _serve():
    _Budget.seen = []
    srv = http.server.HTTPServer(("127.0.0.1", 0), _Budget)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, "http://127.0.0.1:%d/" % srv.server_address[1]


def test_a_429_is_waited_out_for_retry_after_then_asked_again():
    srv, url = _serve()
    try:
        status, body, _ = http_request(url)
        assert status == 200 and body == b'{"status": "ok"}'
        assert len(_Budget.seen) == 3
        gaps = [b - a for a, b in zip(_Budget.seen, _Budget.seen[1:])]
        assert min(gaps) >= 0.9  # Retry-After: 1 honoured between attempts
    finally:
        srv.shutdown()
        srv.server_close()


def test_a_test_that_wants_the_429_itself_gets_it():
    srv, url = _serve()
    try:
        assert http_request(url, retry_429_for=0)[0] == 429
        assert len(_Budget.seen) == 1
    finally:
        srv.shutdown()
        srv.server_close()


def test_retry_after_parsing():
    assert retry_after_s({"Retry-After": "10"}) == 10.0
    assert retry_after_s({"Retry-After": " 3 "}) == 3.0
    assert retry_after_s({}) == 1.0
    assert retry_after_s({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 1.0
