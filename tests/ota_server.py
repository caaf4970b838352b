"""A local update server for the OTA tests: a release folder (the repo's application files with a new version and
optional changes) behind http.server on 127.0.0.1, with faults a test can switch on per file."""

import http.server
import json
import os
import shutil
import threading
import time

from tools.ota_manifest import APP_FOLDERS, make_manifest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def make_release(dest, version, src=ROOT, changes=None):
    """Copy the application files of src to dest/<version>/ with core/version.py saying version, apply changes
    {path: text}, and write dest/manifest.json (base "<version>/"). Returns the manifest dict."""
    rel_dir = os.path.join(dest, version)
    os.makedirs(rel_dir, exist_ok=True)
    shutil.copy(os.path.join(src, "code.py"), os.path.join(rel_dir, "code.py"))
    for folder in APP_FOLDERS:
        if os.path.isdir(os.path.join(src, folder)):
            shutil.copytree(os.path.join(src, folder), os.path.join(rel_dir, folder), dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    all_changes = {"core/version.py": '"""Firmware version."""\n\nVERSION = "%s"\n' % version}
    all_changes.update(changes or {})
    for path, text in all_changes.items():
        os.makedirs(os.path.dirname(os.path.join(rel_dir, path)) or rel_dir, exist_ok=True)
        with open(os.path.join(rel_dir, path), "w") as f:
            f.write(text)
    manifest = make_manifest(rel_dir, version, base=version + "/", notes_de="Neue Version", notes_en="New version",
                             release_date="2026-11-30")
    write_manifest(dest, manifest)
    return manifest


def write_manifest(dest, manifest):
    with open(os.path.join(dest, "manifest.json"), "w") as f:
        json.dump(manifest, f)


class UpdateServer:
    """Serves folder on 127.0.0.1 (https with tls_certs); faults[path] = truncate | oversize | corrupt | stall | 404."""

    def __init__(self, folder, tls_certs=None):
        self.folder = folder
        self.faults = {}
        self.requests = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                path = self.path.lstrip("/")
                server.requests.append(path)
                fault = server.faults.get(path)
                try:
                    with open(os.path.join(server.folder, path), "rb") as f:
                        data = f.read()
                except OSError:
                    fault = "404"
                if fault == "404":
                    self.send_error(404)
                    return
                length = len(data)
                if fault == "corrupt":
                    data = bytes([data[0] ^ 1]) + data[1:]
                elif fault == "oversize":
                    data = data + b"# more\n" * 10
                    length = len(data)
                self.send_response(200)
                self.send_header("Content-Length", str(length))
                self.end_headers()
                if fault in ("truncate", "stall"):
                    self.wfile.write(data[: len(data) // 2])
                    self.wfile.flush()
                    if fault == "stall":
                        time.sleep(server.stall_s)
                    self.close_connection = True
                    return
                self.wfile.write(data)

        self.stall_s = 3.0
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.httpd.handle_error = lambda request, address: None   # a client that hangs up early is a test case
        self.port = self.httpd.server_address[1]
        self.url = "http://127.0.0.1:%d/manifest.json" % self.port
        if tls_certs is not None:  # https with a server certificate from tests/mqtt_peers.make_ca
            import ssl

            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(tls_certs["server.crt"], tls_certs["server.key"])
            self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
            self.url = "https://127.0.0.1:%d/manifest.json" % self.port
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
