"""Letting imported modules go: CircuitPython keeps every imported module's code in the heap until it is dropped."""

import gc
import sys


def unload(*prefixes, collect=True):
    """Drop the modules named by prefixes (a name, or a package and everything below it) from sys.modules and
    from their parent packages, so their code is freed once nothing else refers to it; returns how many.

    collect=False leaves the collection to the next import: CircuitPython collects after every module it imports
    (py/builtinimport.c), so a collection here right before one is paid twice (the start wires feature after
    feature)."""
    names = [name for name in sys.modules
             if any(name == p or name.startswith(p + ".") for p in prefixes)]
    for name in names:
        del sys.modules[name]
        parent, _, leaf = name.rpartition(".")
        pkg = sys.modules.get(parent) if parent else None
        if pkg is not None and leaf in getattr(pkg, "__dict__", {}):
            try:
                delattr(pkg, leaf)
            except (AttributeError, TypeError):
                pass
    if names and collect:
        gc.collect()
    return len(names)

