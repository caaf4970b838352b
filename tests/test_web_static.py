"""services/web/static.py on the hardened server: gzip files from the manifest, ETag/304, the allowlist, streaming
in slices with bounded buffering, the open static paths in the token table, and the committed build's budget."""

import gzip
import hashlib
import os
import socket

import pytest

from services.api.auth import OPEN, READ, WRITE
from services.api.service import required_level
from services.web import static
from tests.hostproc import ROOT
from tests.test_api_harness import body_of, status_of
from tests.test_http_server import Harness, read_all

PAGE = b"<!doctype html><title>x</title>" + bytes(range(256)) * 300   # 77 KB: many slices


def _drive(tmp_path, files, manifest):
    os.makedirs(tmp_path / "web", exist_ok=True)
    for name, data in files.items():
        (tmp_path / "web" / name).write_bytes(data)
    (tmp_path / "web" / "files.tsv").write_text(manifest)


@pytest.fixture
def site(tmp_path, monkeypatch):
    gz = gzip.compress(PAGE, mtime=0)
    _drive(tmp_path, {"index.html.gz": gz, "secret.txt": b"no"},
           '/\tindex.html.gz\t"abc"\ttext/html; charset=utf-8\tno-cache\n')
    monkeypatch.chdir(tmp_path)
    h = Harness(static.routes())
    h.gz = gz
    yield h
    h.stop()


def _get(h, path, extra=b""):
    s = h.connect()
    s.sendall(b"GET " + path.encode() + b" HTTP/1.1\r\nHost: x\r\n" + extra + b"\r\n")
    return read_all(s, h, polls=200)


def test_index_is_served_gzip_with_etag_and_cache_control(site):
    answer = _get(site, "/")
    head = answer.split(b"\r\n\r\n", 1)[0].lower()
    assert status_of(answer) == 200
    assert b"content-encoding: gzip" in head
    assert b'etag: "abc"' in head
    assert b"cache-control: no-cache" in head
    assert b"content-type: text/html; charset=utf-8" in head
    body = body_of(answer)
    assert body == site.gz
    assert gzip.decompress(body) == PAGE


def test_matching_etag_is_304_without_body(site):
    for header in (b'If-None-Match: "abc"\r\n', b'If-None-Match: "zzz", W/"abc"\r\n'):
        answer = _get(site, "/", header)
        assert status_of(answer) == 304
        assert body_of(answer) == b""
        assert b'etag: "abc"' in answer.lower()
    assert status_of(_get(site, "/", b'If-None-Match: "old"\r\n')) == 200


def test_only_manifest_files_are_served(site):
    for path in ("/index.html.gz", "/secret.txt", "/files.tsv", "/web/secret.txt", "/../web/secret.txt", "/x"):
        assert status_of(_get(site, path)) == 404, path


def test_missing_file_is_404_and_missing_manifest_serves_nothing(tmp_path, monkeypatch):
    _drive(tmp_path, {}, '/\tindex.html.gz\t"abc"\ttext/html\tno-cache\n')
    monkeypatch.chdir(tmp_path)
    h = Harness(static.routes())
    try:
        assert status_of(_get(h, "/")) == 404
    finally:
        h.stop()
    os.remove(tmp_path / "web" / "files.tsv")
    assert static.routes() == []


def test_slices_reuse_one_buffer_and_close_the_file_between_them(tmp_path, monkeypatch):
    path = tmp_path / "f.bin"
    path.write_bytes(PAGE)
    opened = []
    real = static.opener

    def spy(p, mode):
        f = real(p, mode)
        opened.append(f)
        return f

    monkeypatch.setattr(static, "opener", spy)
    out = b""
    buffers = set()
    for piece in static.slices(str(path)):
        assert len(piece) <= 512
        assert all(f.closed for f in opened)   # nothing open while the server holds the slice
        buffers.add(id(piece.obj))
        out += bytes(piece)
    assert out == PAGE
    assert len(buffers) == 1
    assert len(opened) == len(PAGE) // 512 + 1


def test_slow_reader_keeps_the_pending_output_small(site):
    """A client that reads slowly: the server pulls slices only as the socket takes bytes, never the whole file."""
    s = socket.create_connection(("127.0.0.1", site.port), timeout=2)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    worst = 0
    got = b""
    s.settimeout(0.02)
    for _ in range(3000):
        site.server.poll()
        for c in site.server._conns:
            worst = max(worst, len(c.out))
        try:
            piece = s.recv(1024)
        except socket.timeout:
            continue
        if not piece:
            break
        got += piece
    s.close()
    assert body_of(got) == site.gz
    assert worst <= 2048, worst   # head + one 512-byte slice and its chunk framing, not 40 KB


def test_static_paths_need_no_token_but_the_api_does():
    assert required_level("GET", "/") == OPEN
    assert required_level("GET", "/index.html") == OPEN
    assert required_level("GET", "/api/v1/settings") == READ
    assert required_level("GET", "/api/v1/history/latest") == READ
    assert required_level("POST", "/") == WRITE
    assert required_level("POST", "/api/v1/settings") == WRITE
    assert required_level("GET", "/api/v1/system/alive") == OPEN


def test_committed_build_is_within_budget_and_its_etag_matches():
    manifest = static.read_manifest(os.path.join(ROOT, "web", "files.tsv"))
    assert [e[0] for e in manifest] == ["/", "/money.js"]   # the money view's file, loaded when it opens (issue 29)
    total = 0
    for url, name, etag, _ctype, _cache, csp in manifest:
        if url == "/money.js":
            with open(os.path.join(ROOT, "web", name), "rb") as f:
                assert etag == '"%s"' % hashlib.sha256(f.read()).hexdigest()[:16]
            continue
        assert "frame-ancestors 'none'" in csp and "sha256-" in csp and "'strict-dynamic'" in csp
        with open(os.path.join(ROOT, "web", name), "rb") as f:
            data = f.read()
        total += len(data)
        assert etag == '"%s"' % hashlib.sha256(data).hexdigest()[:16]
        page = gzip.decompress(data)
        # No external requests: the only URLs are XML namespace names (SVG, MathML, XHTML), never fetched.
        for ns in (b"http://www.w3.org/2000/svg", b"http://www.w3.org/1998/Math/MathML", b"http://www.w3.org/1999/xhtml"):
            page = page.replace(ns, b"")
        assert b"http://" not in page and b"https://" not in page and b"//" + b"cdn" not in page
    assert total <= 66 * 1024


def test_the_built_interface_keeps_its_budget():
    """The budget (issue 20, raised in issue 28 with first-paint figures, docs/web.md): the whole interface (one
    gzipped file, the only request for the page) is at most 66 KB (67,584 bytes, as web-src/build.mjs and bench_web
    count it), and web/files.tsv names this file's ETag."""
    path = os.path.join(ROOT, "web", "index.html.gz")
    data = open(path, "rb").read()
    assert len(data) <= 66 * 1024, len(data)
    assert gzip.decompress(data).startswith(b"<!doctype html>")
    with open(os.path.join(ROOT, "web", "files.tsv"), encoding="utf-8") as f:
        assert hashlib.sha256(data).hexdigest()[:16] in f.read()
