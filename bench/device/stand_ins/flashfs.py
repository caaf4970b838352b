"""The device bench's CIRCUITPY on NOR flash: every write, remove, rename and mkdir the firmware makes on the drive is
charged as a stall on the device clock (_hostenv.stall), as flash_model.py counts sectors and the chip's figures.

install(figure, builtin_os) replaces builtins.open (modules look builtins up at each call, and this port lets them be
overridden: MICROPY_CAN_OVERRIDE_BUILTINS) and the writing calls of the os stand-in (hw/os.py). The host's own file
calls and the model's bookkeeping are not the firmware's time: the step's clock is paused around them, and the
chip's stall is charged instead (the few microseconds of FatFs's C code on the device are left out).
Paths starting with "." (the stand-ins' own files) and absolute paths are not the drive's.
"""

import builtins

import _hostenv
import flash_model

figure = None          # "typ" or "max": the stall charged to the clock; both are counted
model = None
_open = None           # the built-in open
_os = None             # the built-in os
step = {}              # drive path -> [erases, typ us, max us] since take_step()
stall_us = {"typ": 0, "max": 0}
ops = {"open": 0, "write": 0, "remove": 0, "rename": 0, "mkdir": 0, "rmdir": 0}


def _erased(path, kind, sectors):
    typ = flash_model.stall_us(sectors, "typ")
    top = flash_model.stall_us(sectors, "max")
    e = step.get(path)
    if e is None:
        e = step[path] = [0, 0, 0]
    e[0] += sectors
    e[1] += typ
    e[2] += top
    stall_us["typ"] += typ
    stall_us["max"] += top
    _hostenv.stall(typ if figure == "typ" else top)


def take_step():
    """The stalls since the last call, by drive path ({} when nothing was written), and start afresh."""
    global step
    got = step
    step = {}
    return got


def _drive(path):
    """The drive-relative path, or None for a path that is not the firmware's drive."""
    if not isinstance(path, str) or path.startswith(".") or path.startswith("/"):
        return None
    return path


def _pause():
    if _hostenv._step_t0 is None:
        return False
    _hostenv.pause()
    return True


def _resume(paused):
    if paused:
        _hostenv.resume()


def _size(path):
    try:
        return _os.stat(path)[6]
    except OSError:
        return None


class _File:
    """A drive file open for writing: the host file, and FatFs's view of it in the model."""

    def __init__(self, f, of, append, size):
        self._f = f
        self._of = of
        self._append = append
        self._pos = size or 0      # append mode: the host's tell() is not the file's end before the first write
        self._closed = False

    def write(self, data):
        paused = _pause()
        try:
            pos = self._pos if self._append else self._f.tell()
            n = self._f.write(data)
            if n is None:
                n = len(data)
            if n:
                ops["write"] += 1
                self._of.write(pos, n)
                self._pos = pos + n
            return n
        finally:
            _resume(paused)

    def flush(self):
        paused = _pause()
        try:
            self._f.flush()
            self._of.sync()
        finally:
            _resume(paused)

    def close(self):
        if self._closed:
            return
        paused = _pause()
        try:
            self._closed = True
            self._f.close()
            self._of.close()
        finally:
            _resume(paused)

    def seek(self, *args):
        return self._f.seek(*args)

    def tell(self):
        return self._f.tell()

    def read(self, *args):
        return self._f.read(*args)

    def readinto(self, *args):
        return self._f.readinto(*args)

    def readline(self, *args):
        return self._f.readline(*args)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __iter__(self):
        return iter(self._f)

    def __getattr__(self, name):
        return getattr(self._f, name)


def open(file, mode="r", *args, **kwargs):
    """builtins.open: a file opened for writing on the drive comes back counted."""
    if "w" not in mode and "a" not in mode and "+" not in mode and "x" not in mode:
        return _open(file, mode, *args, **kwargs)
    path = _drive(file)
    if path is None:
        return _open(file, mode, *args, **kwargs)
    paused = _pause()
    try:
        size = _size(file)
        f = _open(file, mode, *args, **kwargs)
        ops["open"] += 1
        return _File(f, model.open(path, mode, size), "a" in mode, size)
    finally:
        _resume(paused)


def remove(path):
    paused = _pause()
    try:
        size = _size(path)
        _os.remove(path)
        if _drive(path) is not None:
            ops["remove"] += 1
            model.remove(path, size or 0)
    finally:
        _resume(paused)


unlink = remove


def rename(src, dst):
    paused = _pause()
    try:
        _os.rename(src, dst)
        if _drive(src) is not None and _drive(dst) is not None:
            ops["rename"] += 1
            model.rename(src, dst)
    finally:
        _resume(paused)


def mkdir(path, *args):
    paused = _pause()
    try:
        _os.mkdir(path, *args)
        if _drive(path) is not None:
            ops["mkdir"] += 1
            model.mkdir(path)
    finally:
        _resume(paused)


def rmdir(path):
    paused = _pause()
    try:
        _os.rmdir(path)
        if _drive(path) is not None:
            ops["rmdir"] += 1
            model.rmdir(path)
    finally:
        _resume(paused)


def install(fig, builtin_os):
    """Charge the drive's writes from now on, `fig` ("typ" or "max") on the clock."""
    global figure, model, _open, _os
    import os as stand_in

    if fig not in flash_model.FIGURES:
        raise ValueError("flash figure %r: typ or max" % fig)
    figure = fig
    _os = builtin_os
    model = flash_model.FlashModel(_erased)
    _open = builtins.open
    builtins.open = open
    import flashfs

    stand_in._bind(builtin_os, flashfs)    # remove, unlink, rename, mkdir, rmdir from here


def summary():
    """Counts and stalls so far (device us at both figures), for the runner's result."""
    return {"figure": figure, "erases": model.erases, "programs": model.programs, "by_kind": model.by_kind,
            "stall_us": stall_us, "ops": ops}
