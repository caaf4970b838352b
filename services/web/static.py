"""Static files of the web interface: pre-compressed files from web/, listed in web/files.tsv, streamed from flash."""

from adafruit_httpserver import GET, ChunkedResponse, Response, Route

from micropython import const

MANIFEST = "web/files.tsv"
_SLICE = const(512)   # bytes read per open of the file: the server pulls the next slice when < 512 bytes are pending
opener = open         # how files are opened (the MicroPython VM bench serves them from RAM)


def read_manifest(path=MANIFEST):
    """[(url path, file, etag, content type, cache-control, content-security-policy)] from the build's manifest
    (the build writes the policy with the hashes of the page's inline script and style; "" when a line has none);
    [] when there is none.

    The manifest is the allowlist: only the files it names are served, so no request path ever reaches open().
    """
    entries = []
    try:
        with opener(path, "r") as f:
            for line in f:
                parts = line.rstrip("\r\n").split("\t")
                if len(parts) in (5, 6) and parts[0].startswith("/") and not line.startswith("#"):
                    entries.append(tuple(parts) if len(parts) == 6 else tuple(parts) + ("",))
    except OSError:
        pass
    return entries


def _matches(header, etag):
    """True when an If-None-Match header names etag (a list, weak validators and * included)."""
    if header is None:
        return False
    for tag in header.split(","):
        tag = tag.strip()
        if tag.startswith("W/"):
            tag = tag[2:]
        if tag == etag or tag == "*":
            return True
    return False


def slices(path, size=_SLICE):
    """The file's bytes as slices of one reused buffer; the file is open only while one slice is read.

    Nothing is held open across a yield: a client that goes away leaves no open file behind, and the heap cost is
    the buffer plus a file object, whatever the file's size.
    """
    buf = bytearray(size)
    view = memoryview(buf)
    pos = 0
    while True:
        with opener(path, "rb") as f:
            f.seek(pos)
            n = f.readinto(buf)
        if not n:
            return
        pos += n
        yield view[:n]  # the server copies it into the connection's output before asking for the next one
        if n < size:
            return


def _handler(file, etag, ctype, cache, csp=""):
    path = "web/" + file

    def serve(request):
        headers = {"ETag": etag, "Cache-Control": cache, "Vary": "Accept-Encoding"}
        if csp:
            headers["Content-Security-Policy"] = csp
        if _matches(request.headers.get("If-None-Match"), etag):
            return Response(request, b"", status=(304, "Not Modified"), headers=headers)
        try:
            opener(path, "rb").close()
        except OSError:
            return Response(request, b"web interface file missing: " + path.encode(), status=(404, "Not Found"),
                            content_type="text/plain")
        if file.endswith(".gz"):
            headers["Content-Encoding"] = "gzip"
        return ChunkedResponse(request, lambda: slices(path), headers=headers, content_type=ctype)

    return serve


def routes(app=None, manifest=MANIFEST):
    """A GET route for each file of the manifest (read once, at start)."""
    out = []
    for url, file, etag, ctype, cache, csp in read_manifest(manifest):
        out.append(Route(url, GET, _handler(file, etag, ctype, cache, csp)))
    return out
