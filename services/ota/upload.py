"""A release uploaded from a file: a ustar archive (manifest.json, manifest.json.sig, then the files) read piece by
piece as the pieces arrive, each member streamed into a sink; nothing is held whole in RAM (docs/ota.md)."""

from micropython import const

from services.ota.stream import DownloadError, MemorySink

_BLOCK = const(512)
MANIFEST = "manifest.json"
SIGNATURE = "manifest.json.sig"


class ArchiveError(ValueError):
    """An archive that is not a well-formed ustar stream of regular files."""


def _octal(field):
    text = bytes(field).rstrip(b"\0 ").lstrip(b" ")
    if not text:
        return 0
    n = 0
    for c in text:
        if c < 48 or c > 55:
            raise ArchiveError("bad number in a tar header")
        n = n * 8 + c - 48
    return n


def parse_header(head):
    """(name, size) of a 512-byte ustar header, or None for an end-of-archive (all zero) block."""
    if not any(head):
        return None
    want = _octal(head[148:156])
    got = sum(head[:148]) + 8 * 32 + sum(head[156:])
    if want != got:
        raise ArchiveError("tar header checksum wrong (not a tar archive, or damaged)")
    kind = head[156]
    if kind not in (0, 48):   # '\0' or '0': a regular file; no links, folders or long-name records
        raise ArchiveError("only regular files may be in the archive (type %r)" % chr(kind))
    name = bytes(head[:100]).split(b"\0")[0]
    prefix = bytes(head[345:500]).split(b"\0")[0] if head[257:262] == b"ustar" else b""
    if prefix:
        name = prefix + b"/" + name
    try:
        text = name.decode()
    except UnicodeError:
        raise ArchiveError("a file name in the archive is not text")
    if text.startswith("./"):
        text = text[2:]
    return text, _octal(head[124:136])


class ArchiveReader:
    """feed(data, start) takes bytes of the archive; member(name, size) -> a sink (write/finish/abort) is called at
    each header, end() at the end-of-archive block; pause() -> True makes feed stop (it returns what it took)."""

    def __init__(self, member, end, pause=None):
        self._member = member
        self._end = end
        self._pause = pause
        self._head = bytearray()
        self._sink = None
        self._left = 0
        self._pad = 0
        self.ended = False

    def feed(self, data):
        """Take bytes from data; returns how many were taken (fewer when pause() said so or the archive ended)."""
        mv = memoryview(data)
        pos = 0
        n = len(mv)
        while pos < n and not self.ended:
            if self._sink is not None:
                take = min(self._left, n - pos)
                if take:
                    self._sink.write(mv[pos:pos + take])
                    pos += take
                    self._left -= take
                if self._left == 0:
                    sink = self._sink
                    self._sink = None
                    sink.finish()
                continue
            if self._pad:
                take = min(self._pad, n - pos)
                pos += take
                self._pad -= take
                continue
            if self._pause is not None and self._pause():
                break
            take = min(_BLOCK - len(self._head), n - pos)
            self._head.extend(mv[pos:pos + take])
            pos += take
            if len(self._head) < _BLOCK:
                continue
            head = self._head
            self._head = bytearray()
            parsed = parse_header(head)
            if parsed is None:
                self.ended = True
                self._end()
                break
            name, size = parsed
            self._sink = self._member(name, size)
            self._left = size
            self._pad = (-size) % _BLOCK
            if size == 0:
                sink = self._sink
                self._sink = None
                sink.finish()
        return pos

    def abort(self):
        if self._sink is not None:
            try:
                self._sink.abort()
            except Exception:
                pass
            self._sink = None


class Collect(MemorySink):
    """A small archive member kept in RAM (the manifest, its signature); done(data) when complete."""

    def __init__(self, limit, what, done):
        MemorySink.__init__(self, limit)
        self._what = what
        self._done = done

    def write(self, chunk):
        if len(self.data) + len(chunk) > self.limit:
            raise DownloadError("oversized", "%s larger than %d bytes" % (self._what, self.limit))
        self.data.extend(chunk)

    def finish(self):
        self._done(bytes(self.data))


class Staged:
    """An uploaded file streamed into ota/stage through the size and SHA-256 check; done(path) when verified."""

    def __init__(self, writer, path, done):
        self._w = writer
        self._path = path
        self._done = done

    def write(self, chunk):
        self._w.write(chunk)

    def finish(self):
        self._w.finish()
        self._done(self._path)

    def abort(self):
        self._w.abort()


class Upload:
    """The state of one upload (POST /ota/upload pieces)."""

    def __init__(self, now, keys):
        self.received = 0
        self.last = now
        self.keys = keys
        self.manifest_data = None
        self.manifest = None     # the verified, validated manifest
        self.files = None        # {path: (size, sha256)} of the verified manifest
        self.staged = []
        self.verifying = False
        self.complete = False    # every file staged: commit at the next poll
        self.reader = None
