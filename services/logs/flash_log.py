"""Persistent CSV log on the flash: lines batched in RAM, appended in one write, two files rotated at a size bound."""

import os

from core.elapsed import fresh
from core.files import exists, remove_quiet
from core.module import Module

HEADER = "time,uptime_s,level,message\n"
_LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40}


def csv_field(text):
    """One CSV field (RFC 4180): quoted when it holds a comma, quote or line break."""
    if "," in text or '"' in text or "\n" in text or "\r" in text:
        return '"' + text.replace('"', '""') + '"'
    return text


def iso_utc(secs):
    """YYYY-MM-DDTHH:MM:SSZ of epoch seconds."""
    from core.tz import to_civil

    y, m, d, hh, mm, ss = to_civil(int(secs))
    return "%04d-%02d-%02dT%02d:%02d:%02dZ" % (y, m, d, hh, mm, ss)


class FlashLog(Module):
    """Sink of core.log.Log (entries carry uptime ms); wall_time() -> epoch seconds or None while the clock is unsynced.

    NOR flash without wear levelling: each append rewrites the file's last sector plus FAT and directory sectors,
    so lines wait in RAM until batch_bytes gather or flush_ms passes (or flush() on reboot, button, reset).
    The files live in a folder of their own: the entry rewritten at every flush is in the folder's cluster, not in
    the root directory's sectors beside code.py and boot.py (docs/history.md, "Flash budget").
    """

    name = "flash_log"
    poll_every_ms = 500     # writes are batched to spare the flash
    path = "logs/log.csv"
    old_path = "logs/log.1.csv"
    legacy = ("log.1.csv", "log.csv")  # firmware before 2026-11 kept them at the drive root; oldest first
    max_bytes = 32768       # per file: the log never takes more than twice this on the drive
    batch_bytes = 2048
    flush_ms = 3600000
    max_buffer = 8192       # RAM bound for unwritten lines; the oldest are dropped (and counted) beyond it
    min_level = "info"

    def __init__(self, wall_time=None):
        Module.__init__(self)
        self._wall = wall_time
        self._lines = []
        self._buffered = 0
        self._waiting_since = None   # ticks of the poll that first saw unwritten lines
        self._folder = False

    def sink(self, entry):
        """Take one log entry (uptime ms, level, text) into the batch."""
        up_ms, level, text = entry
        if _LEVELS.get(level, 40) < _LEVELS[self.min_level]:
            return
        when = ""
        if self._wall is not None:
            try:
                secs = self._wall()
                if secs is not None:
                    when = iso_utc(secs)
            except Exception:
                pass
        line = "%s,%d,%s,%s\n" % (when, up_ms // 1000, level, csv_field(text))
        self._lines.append(line)
        self._buffered += len(line)
        while self._buffered > self.max_buffer and self._lines:
            self._buffered -= len(self._lines.pop(0))
            self.count("dropped")

    def poll(self, now_ms):
        if not self._lines or self._waiting_since is None:
            # The hour counts from the first waiting line, restamped every poll while none waits: a stamp from the
            # last flush could be days old, and the tick wrap would then hold new lines in RAM for up to ~3 days.
            self._waiting_since = now_ms
        due = self._lines and not fresh(self._waiting_since, now_ms, self.flush_ms)
        if self._buffered >= self.batch_bytes or due:
            self.flush()
            self._waiting_since = now_ms

    def flush(self):
        """Append the batch in one write; rotate first when the file would pass max_bytes."""
        if not self._lines:
            return
        data = "".join(self._lines)
        slash = self.path.rfind("/")
        if not self._folder and slash > 0:
            if not exists(self.path[:slash]):
                os.mkdir(self.path[:slash])
            self._folder = True
        try:
            size = os.stat(self.path)[6]
        except OSError:
            size = 0
        if size and size + len(data) > self.max_bytes:
            remove_quiet(self.old_path)
            os.rename(self.path, self.old_path)
            self.count("rotations")
            size = 0
            for old in self.legacy:
                remove_quiet(old)  # older than what a rotation keeps anyway
        with open(self.path, "a") as f:
            if not size:
                f.write(HEADER)
            f.write(data)
        self._lines = []
        self._buffered = 0
        self.count("flushes")

    def stop(self):
        try:
            self.flush()
        except Exception:
            pass

    def chunks(self, size=512):
        """The log as CSV pieces: header, an older firmware's files, older file, current file, lines not yet written."""
        yield HEADER
        for path in self.legacy + (self.old_path, self.path):
            try:
                f = open(path)
            except OSError:
                continue
            with f:
                first = True
                while True:
                    piece = f.read(size)
                    if not piece:
                        break
                    if first:
                        first = False
                        if piece.startswith(HEADER):
                            piece = piece[len(HEADER):]
                    yield piece
        for line in list(self._lines):
            yield line
