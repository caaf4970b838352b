"""SHA-256 and size checked while bytes stream to a file (never a whole file in RAM); hashing a file in slices."""

from core.sha256 import hex_digest, new_sha256  # noqa: F401  (hex_digest: callers import it from here too)


class DownloadError(Exception):
    """A download that must not be installed: reason is a short code (corrupted, truncated, oversized, network,
    drive_full, http, manifest), the message says more."""

    def __init__(self, reason, message):
        super().__init__(message)
        self.reason = reason
        self.message = message


class HashingWriter:
    """Writes the chunks it is given to f while hashing and counting them; finish() checks size and SHA-256.
    f: a file opened "wb" (or anything with write/close)."""

    def __init__(self, f, size, sha256, name=""):
        self._f = f
        self._h = new_sha256()
        self.expected_size = size
        self.expected_sha = sha256
        self.name = name
        self.written = 0

    def write(self, chunk):
        """Append a chunk (bytes or memoryview); more bytes than announced stop at once."""
        n = len(chunk)
        if self.written + n > self.expected_size:
            raise DownloadError("oversized", "%s: more than the announced %d bytes" % (self.name, self.expected_size))
        self._h.update(chunk)
        try:
            self._f.write(chunk)
        except OSError as exc:
            if exc.args and exc.args[0] == 28:  # ENOSPC
                raise DownloadError("drive_full", "%s: the drive is full" % self.name)
            raise DownloadError("drive", "%s: write failed: %s" % (self.name, exc))
        self.written += n

    def finish(self):
        """Close the file and check the download is complete and intact."""
        try:
            self._f.close()
        except OSError as exc:
            raise DownloadError("drive", "%s: close failed: %s" % (self.name, exc))
        if self.written != self.expected_size:
            raise DownloadError("truncated", "%s: %d of %d bytes" % (self.name, self.written, self.expected_size))
        got = hex_digest(self._h)
        if got != self.expected_sha:
            raise DownloadError("corrupted", "%s: SHA-256 %s… differs from the manifest's %s…"
                                % (self.name, got[:12], self.expected_sha[:12]))

    def abort(self):
        try:
            self._f.close()
        except OSError:
            pass


class MemorySink:
    """Collects a small body (the manifest) up to limit bytes."""

    def __init__(self, limit):
        self.limit = limit
        self.data = bytearray()

    def write(self, chunk):
        if len(self.data) + len(chunk) > self.limit:
            raise DownloadError("manifest", "manifest larger than %d bytes" % self.limit)
        self.data.extend(chunk)

    def finish(self):
        pass

    def close(self):
        pass   # a HashingWriter round it closes it: a manifest pinned by size and SHA-256 (the compiled form's)

    def abort(self):
        pass


class FileHasher:
    """(size, sha256 hex) of a file, a slice per step() so a poll stays short; size is None for a missing file."""

    def __init__(self, path, buf):
        self._buf = buf
        self._h = new_sha256()
        self.size = 0
        self.sha = None
        try:
            self._f = open(path, "rb")
        except OSError:
            self._f = None
            self.size = None

    def step(self):
        """Hash one buffer's worth; True when done."""
        if self._f is None:
            return True
        n = self._f.readinto(self._buf)
        if n:
            self._h.update(memoryview(self._buf)[:n])
            self.size += n
            return False
        self._f.close()
        self._f = None
        self.sha = hex_digest(self._h)
        return True
