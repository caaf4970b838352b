"""A local stand-in of the two public day-ahead price APIs (energy-charts /price, aWATTar /v1/marketdata) on
127.0.0.1, http or https (a certificate from tests/mqtt_peers.make_ca), answering from tests/price_answers/ or a
body a test sets, with faults: html, stall (accepts, never answers), trickle, close (no answer)."""

import http.server
import os
import ssl as _ssl
import threading
import time

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "price_answers")
ENERGY_CHARTS = "energy_charts_2026-10-24_25.json"
AWATTAR = "awattar_2026-03-29_30.json"


def capture(name):
    with open(os.path.join(HERE, name), "rb") as f:
        return f.read()


class PriceServer:
    """body: bytes served for every GET (default the energy-charts capture); fault: None, "html", "stall",
    "close", "500"; requests: paths asked."""

    def __init__(self, body=None, tls_certs=None):
        self.body = body if body is not None else capture(ENERGY_CHARTS)
        self.fault = None
        self.requests = []
        srv = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                srv.requests.append(self.path)
                if srv.fault == "stall":
                    time.sleep(5)
                    return
                if srv.fault == "close":
                    return
                if srv.fault == "500":
                    self.send_response(500)
                    self.end_headers()
                    return
                body = b"<!DOCTYPE html><html><body>Maintenance</body></html>" if srv.fault == "html" else srv.body
                self.send_response(200)
                self.send_header("Content-Type", "text/html" if srv.fault == "html" else "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        scheme = "http"
        if tls_certs is not None:
            ctx = _ssl.SSLContext(_ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(tls_certs["server.crt"], tls_certs["server.key"])
            self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
            scheme = "https"
        self.base = "%s://127.0.0.1:%d" % (scheme, self.port)
        self.energy_charts_url = self.base + "/price?bzn=DE-LU&start={start}&end={end}"
        self.awattar_url = self.base + "/v1/marketdata?start={start_ms}&end={end_ms}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
