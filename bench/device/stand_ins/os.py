"""CircuitPython's os on the device bench: the unix port's built-in os, with the drive's writing calls (remove, unlink,
rename, mkdir, rmdir) replaceable by the flash model (flashfs.install). A built-in module's attributes cannot be set,
and os is an extensible built-in, so this file wins the import; runner.py hands the built-in over with _bind()."""

WRITING = ("remove", "unlink", "rename", "mkdir", "rmdir")


def _bind(rt, hook=None):
    """Take every name of the built-in os rt; the writing calls from hook (a module or object) when it is given."""
    g = globals()
    for name in dir(rt):
        if not name.startswith("__"):
            g[name] = getattr(rt, name)
    if hook is not None:
        for name in WRITING:
            g[name] = getattr(hook, name)
