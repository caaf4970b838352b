"""Device truth: every device file compiles with mpy-cross, imports nothing CircuitPython lacks, pure modules run
in a real MicroPython VM, and ruff and mypy (against circuitpython-stubs) are clean."""

import ast
import glob
import os
import subprocess
import sys

import pytest

from tools.mpvm import MicroVM

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)
DEVICE_DIRS = ("core", "drivers", "meter", "services")
PURE_DIRS = ("core", "meter")
FORBIDDEN = {"threading", "zoneinfo", "datetime", "dataclasses", "enum", "abc", "pathlib", "asyncio",
             "subprocess", "typing", "tomllib", "hmac", "secrets", "logging", "copy", "functools"}
HARDWARE = {"board", "busio", "digitalio", "microcontroller", "neopixel", "wifi", "socketpool", "storage",
            "supervisor", "rtc", "watchdog", "_bleio", "mdns", "ssl", "adafruit_ble", "adafruit_httpserver",
            "adafruit_minimqtt"}


def device_files():
    files = [os.path.join(ROOT, "code.py"), os.path.join(ROOT, "boot.py")]
    for d in DEVICE_DIRS:
        files += sorted(glob.glob(os.path.join(ROOT, d, "**", "*.py"), recursive=True))
    return files


def rel(path):
    return os.path.relpath(path, ROOT)


@pytest.mark.parametrize("path", device_files(), ids=rel)
def test_compiles_with_mpy_cross(path, tmp_path):
    out = subprocess.run([os.path.join(BIN, "mpy-cross"), "-o", str(tmp_path / "x.mpy"), path],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def _imports(tree):
    """Top-level module names imported anywhere, except inside try blocks that catch ImportError."""
    guarded = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try):
            for h in node.handlers:
                names = {getattr(h.type, "id", None)} | {getattr(e, "id", None) for e in getattr(h.type, "elts", [])}
                if names & {"ImportError", "Exception"}:
                    for sub in node.body:
                        for n in ast.walk(sub):
                            guarded.add(id(n))
    found = []
    for node in ast.walk(tree):
        if id(node) in guarded:
            continue
        if isinstance(node, ast.Import):
            found += [(a.name.split(".")[0], node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module.split(".")[0], node.lineno))
    return found


@pytest.mark.parametrize("path", device_files(), ids=rel)
def test_uses_nothing_circuitpython_lacks(path):
    src = open(path).read()
    tree = ast.parse(src)
    bad = [(m, line) for m, line in _imports(tree) if m in FORBIDDEN]
    assert not bad, "%s imports what CircuitPython lacks: %s" % (rel(path), bad)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "os":
            assert node.attr not in ("replace", "path", "makedirs", "walk", "scandir"), \
                "%s:%d uses os.%s" % (rel(path), node.lineno, node.attr)
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "from_bytes":
            assert not any(k.arg == "signed" for k in node.keywords), \
                "%s:%d: MicroPython ignores int.from_bytes(signed=)" % (rel(path), node.lineno)


def pure_modules():
    mods = []
    for d in PURE_DIRS:
        for f in sorted(glob.glob(os.path.join(ROOT, d, "*.py"))):
            name = os.path.basename(f)[:-3]
            if name != "__init__":
                mods.append("%s.%s" % (d, name))
    return mods


@pytest.mark.parametrize("path", [f for d in PURE_DIRS for f in sorted(glob.glob(os.path.join(ROOT, d, "*.py")))],
                         ids=rel)
def test_pure_modules_import_no_hardware(path):
    hw = [(m, line) for m, line in _imports(ast.parse(open(path).read())) if m in HARDWARE]
    assert not hw, "%s is in a pure package but imports hardware: %s" % (rel(path), hw)


@pytest.fixture(scope="module")
def vm():
    with MicroVM() as v:
        yield v


def test_every_pure_module_imports_in_micropython(vm):
    mods = pure_modules()
    code = "\n".join("import %s" % m for m in mods) + "\nprint('imported', %d)" % len(mods)
    out, _fuel = vm.run(code)
    assert "imported %d" % len(mods) in out


def test_bus_and_supervisor_run_in_micropython(vm):
    out, _fuel = vm.run("""
from core.bus import Bus, Ring
from core.module import Module, OK, WARN
from core.supervisor import Supervisor
bus = Bus()
ring = bus.subscribe("t", 3)
for i in range(10):
    bus.publish("t", i)
assert ring.dropped == 7 and ring.pop() == 7 and bus.latest("t") == 9

class Clock:
    now = (1 << 29) - 1500
    def __call__(self):
        return self.now

class Bad(Module):
    name = "bad"
    polls = 0
    def poll(self, now):
        self.polls += 1
        if self.polls == 2:
            raise ValueError("x")

clock = Clock()
fed = []
class WD:
    def feed(self):
        fed.append(1)
bad = Bad()
sup = Supervisor(clock, watchdog=WD(), gc_collect=lambda: None)
sup.add(bad)
for i in range(5):
    sup.step()
    clock.now = (clock.now + 400) % (1 << 29)
d = sup.describe()["modules"]["bad"]
assert d["faults"] == 1 and d["restarts"] == 1, d
assert len(fed) == 5
print("supervisor ok")
""")
    assert "supervisor ok" in out


def test_ruff_is_clean():
    out = subprocess.run([os.path.join(BIN, "ruff"), "check", "--no-cache", ROOT], capture_output=True, text=True,
                         cwd=ROOT)
    assert out.returncode == 0, out.stdout[-4000:]


def test_mypy_against_circuitpython_stubs():
    targets = [rel(f) for f in device_files()]
    out = subprocess.run([os.path.join(BIN, "mypy"), "--no-incremental", "--cache-dir", "/dev/null", *targets],
                         capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stdout[-4000:]
