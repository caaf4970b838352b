"""A local update server for the OTA tests: a release folder (the repo's application files with a new version and
optional changes) behind http.server on 127.0.0.1, with faults a test can switch on per file. Releases are signed
with a test key made for this test run (never the project's release key, whose private half is not in the repo)."""

import http.server
import json
import os
import shutil
import threading
import time

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tools.ota_keygen import public_hex
from tools.ota_manifest import APP_FOLDERS, make_manifest, signature_hex

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEST_KEY = Ed25519PrivateKey.generate()     # signs the test releases; trusted by the drives the tests set up


def keys_text(*keys):
    """The text of an ota_keys.txt trusting keys (default: the test key)."""
    return "# test keys\n" + "".join(public_hex(k) + "\n" for k in (keys or (TEST_KEY,)))


def pubkey_file(folder, key=None):
    """A file with the public key of key (default: the test key), for the host runtime's --ota-pubkey."""
    path = os.path.join(folder, "ota_test_pubkey.txt")
    with open(path, "w") as f:
        f.write(public_hex(key or TEST_KEY) + "\n")
    return path


def make_release(dest, version, src=ROOT, changes=None, key=TEST_KEY, min_version=""):
    """Copy the application files of src to dest/<version>/ with core/version.py saying version, apply changes
    {path: text}, and write dest/manifest.json (base "<version>/") signed by key (None: unsigned). Returns the
    manifest dict."""
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
                             release_date="2026-11-30", min_version=min_version)
    write_manifest(dest, manifest, key)
    return manifest


def write_manifest(dest, manifest, key=TEST_KEY):
    """dest/manifest.json (a dict, or the exact text) and its signature by key; key None removes the signature."""
    data = manifest if isinstance(manifest, str) else json.dumps(manifest)
    with open(os.path.join(dest, "manifest.json"), "w") as f:
        f.write(data)
    sig = os.path.join(dest, "manifest.json.sig")
    if key is None:
        if os.path.exists(sig):
            os.remove(sig)
        return
    with open(sig, "w") as f:
        f.write(signature_hex(data.encode(), key) + "\n")


class UpdateServer:
    """Serves folder on 127.0.0.1 (https with tls_certs); faults[path] = truncate | oversize | corrupt | stall | trickle
    | 404."""

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
                if fault == "trickle":   # one byte now and then, never stalling long enough to look dead
                    try:
                        for i in range(len(data)):
                            self.wfile.write(data[i:i + 1])
                            self.wfile.flush()
                            time.sleep(server.trickle_s)
                    except OSError:
                        pass
                    self.close_connection = True
                    return
                if fault in ("truncate", "stall"):
                    self.wfile.write(data[: len(data) // 2])
                    self.wfile.flush()
                    if fault == "stall":
                        time.sleep(server.stall_s)
                    self.close_connection = True
                    return
                self.wfile.write(data)

        self.stall_s = 3.0
        self.trickle_s = 0.02
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
