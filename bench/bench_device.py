"""Device bench: code.py on CircuitPython's own interpreter with the ESP32-S3's number model, heap and poll figures.

CircuitPython's unix port is built once from a CircuitPython source tree (CIRCUITPY_SRC, or --src) with the
variant in bench/device/meterplus_s3 (32-bit, object representation C, single floats) into a cache, then
code.py runs there with the hardware stand-ins (bench/device/stand_ins + host/cp) for --seconds with replayed SML
telegrams, HTTP requests, a Modbus client and an MQTT broker (bench/device/runner.py). Prints the heap after
building, the heap held while running, the smallest heap that boots (bisection with -X heapsize), per-module costs
and the longest poll. README.md ("Device bench") says how to get the source.

    make bench-device CIRCUITPY_SRC=~/src/circuitpython          (or: python -m bench.bench_device --src DIR)
"""

import argparse
import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VARIANT = os.path.join(REPO, "bench", "device", "meterplus_s3")
CIRCUITPYTHON_TAG = "10.2.1"
CACHE = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "meterplus")
# The host stand-ins that run unchanged on CircuitPython's unix port; bench/device/stand_ins has the others.
HOST_STAND_INS = ("board", "busio", "supervisor", "storage", "neopixel", "wifi", "_bleio",
                  "microcontroller")
# Device libraries as requirements.txt names them, copied from the pinned host install.
LIBRARIES = ("adafruit_ticks", "adafruit_httpserver", "adafruit_minimqtt", "adafruit_connection_manager",
             "adafruit_ble")
FIRMWARE = ("code.py", "boot.py", "settings.toml", "core", "drivers", "meter", "services", "web")
SUBMODULES = ("tools/huffman", "lib/mp3", "lib/quirc", "extmod/ulab", "lib/adafruit_floppy")
BOOT_SECONDS = 12


class Skip(Exception):
    """The bench cannot run here (no CircuitPython source); the message says what to do."""


def source_tree(path):
    """The CircuitPython source folder, checked for what the unix build needs."""
    if not path:
        raise Skip("no CircuitPython source: set CIRCUITPY_SRC to a clone of adafruit/circuitpython at %s "
                   "(README.md, 'Device bench')" % CIRCUITPYTHON_TAG)
    if not os.path.isfile(os.path.join(path, "ports", "unix", "Makefile")):
        raise Skip("%s is not a CircuitPython source tree (no ports/unix/Makefile)" % path)
    missing = [m for m in SUBMODULES if not os.listdir(os.path.join(path, m))]
    if missing:
        raise Skip("%s lacks the submodules %s: git submodule update --init --depth 1 %s"
                   % (path, ", ".join(missing), " ".join(missing)))
    return os.path.abspath(path)


def variant_digest():
    h = hashlib.sha256()
    for name in sorted(os.listdir(VARIANT)):
        with open(os.path.join(VARIANT, name), "rb") as f:
            h.update(name.encode() + f.read())
    return h.hexdigest()[:12]


def build(src, log=print):
    """Path of the unix-port interpreter for this source and variant, built into the cache the first time.

    CircuitPython's mpy-cross is built beside it (mpy_cross_of() finds it): the device's libraries are .mpy files.
    """
    with open(os.path.join(src, "py", "mpconfig.h"), "rb") as f:
        key = hashlib.sha256(f.read() + src.encode()).hexdigest()[:12] + "-" + variant_digest()
    out = os.path.join(CACHE, "cp-unix-" + key)
    binary = os.path.join(out, "micropython")
    if os.path.exists(binary) and os.path.exists(mpy_cross_of(binary)):
        return binary
    log("building CircuitPython's unix port and mpy-cross (once, into %s) ..." % out)
    env = dict(os.environ)
    env.setdefault("CP_VERSION", CIRCUITPYTHON_TAG)   # a source archive has no git tags to read it from
    try:
        import polib  # noqa: F401  (the translation step of the build needs it)
    except ImportError:
        raise Skip("the CircuitPython build needs polib: pip install polib") from None
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    cmd = ["make", "-C", os.path.join(src, "ports", "unix"), "VARIANT_DIR=" + VARIANT, "BUILD=" + out,
           "-j%d" % (os.cpu_count() or 2)]
    res = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if res.returncode != 0 or not os.path.exists(binary):
        sys.stderr.write(res.stdout[-4000:])
        raise SystemExit("CircuitPython unix build failed (needs gcc-multilib for the 32-bit build)")
    cmd = ["make", "-C", os.path.join(src, "mpy-cross"), "BUILD=" + os.path.join(out, "mpy-cross-build"),
           "-j%d" % (os.cpu_count() or 2)]
    res = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if res.returncode != 0:
        sys.stderr.write(res.stdout[-4000:])
        raise SystemExit("CircuitPython mpy-cross build failed")
    return binary


FROZEN_PACKAGES = ("core", "drivers", "meter", "services")


def build_frozen(src, binary, log=print):
    """An interpreter with the firmware and the device libraries frozen in (their code runs from the image, as a
    CircuitPython build with frozen modules runs it from flash): what the heap holds then is data only."""
    mods = tempfile.mkdtemp(prefix="meterplus-frozen-")
    try:
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyi", "*.dat")
        for name in FROZEN_PACKAGES:
            shutil.copytree(os.path.join(REPO, name), os.path.join(mods, name), ignore=ignore)
        copy_libraries(mods, ignore)
        h = hashlib.sha256(variant_digest().encode() + binary.encode())
        for path in sorted(glob.glob(os.path.join(mods, "**", "*.py"), recursive=True)):
            with open(path, "rb") as f:
                h.update(os.path.relpath(path, mods).encode() + f.read())
        out = os.path.join(CACHE, "cp-unix-frozen-" + h.hexdigest()[:16])
        frozen_binary = os.path.join(out, "micropython")
        if os.path.exists(frozen_binary):
            return frozen_binary
        log("building the interpreter with the firmware frozen in (into %s) ..." % out)
        variant = os.path.join(out, "variant")
        shutil.copytree(VARIANT, variant)
        shutil.copytree(mods, os.path.join(out, "modules"))
        with open(os.path.join(out, "manifest.py"), "w") as f:
            f.write("freeze(%r)\n" % os.path.join(out, "modules"))
        with open(os.path.join(variant, "mpconfigvariant.mk"), "a") as f:
            f.write("FROZEN_MANIFEST := %s\n" % os.path.join(out, "manifest.py"))
        fake_lib = os.path.join(out, "no-micropython-lib")   # the build insists on it; the manifest needs nothing
        os.makedirs(fake_lib)
        with open(os.path.join(fake_lib, "README.md"), "w") as f:
            f.write("unused\n")
        env = dict(os.environ)
        env.setdefault("CP_VERSION", CIRCUITPYTHON_TAG)
        env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
        cmd = ["make", "-C", os.path.join(src, "ports", "unix"), "VARIANT_DIR=" + variant,
               "BUILD=" + os.path.join(out, "build"), "MICROPY_MPYCROSS=" + mpy_cross_of(binary),
               "MPY_LIB_DIR=" + fake_lib, "-j%d" % (os.cpu_count() or 2)]
        res = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        built = os.path.join(out, "build", "micropython")
        if res.returncode != 0 or not os.path.exists(built):
            sys.stderr.write(res.stdout[-4000:])
            raise SystemExit("CircuitPython unix build with frozen modules failed")
        shutil.copy(built, frozen_binary)
        return frozen_binary
    finally:
        shutil.rmtree(mods, ignore_errors=True)


def mpy_cross_of(binary):
    """CircuitPython's mpy-cross built beside the interpreter."""
    return os.path.join(os.path.dirname(binary), "mpy-cross-build", "mpy-cross")


def compile_mpy(binary, folder):
    """Replace every .py under folder by its .mpy (what circup installs for libraries; what a drive may hold)."""
    tool = mpy_cross_of(binary)
    for path in glob.glob(os.path.join(folder, "**", "*.py"), recursive=True):
        subprocess.run([tool, "-o", path[:-3] + ".mpy", "-s", os.path.basename(path), path], check=True)
        os.remove(path)


def library_path(name):
    """Where the pinned host install keeps a device library (package folder or single module)."""
    import importlib.util

    spec = importlib.util.find_spec(name)
    if spec is None:
        raise Skip("device library %s is not installed: make bench-device installs requirements-dev.txt" % name)
    if spec.submodule_search_locations:
        return list(spec.submodule_search_locations)[0]
    return spec.origin


def copy_libraries(dest, ignore):
    """The device libraries (packages or single modules) into the folder dest."""
    for name in LIBRARIES:
        path = library_path(name)
        if os.path.isdir(path):
            shutil.copytree(path, os.path.join(dest, name), ignore=ignore)
        else:
            shutil.copy(path, dest)


def add_bench_tools(root):
    """Beside a drive's files in root: hw/ with the hardware stand-ins, and the runner with what it imports."""
    hw = os.path.join(root, "hw")
    os.makedirs(hw)
    for name in HOST_STAND_INS:
        shutil.copy(os.path.join(REPO, "host", "cp", name + ".py"), hw)
    for path in glob.glob(os.path.join(REPO, "bench", "device", "stand_ins", "*.py")):
        shutil.copy(path, hw)
    for name in ("runner.py", "start.py", "pystone_lowmem.py", "s3_clock.py"):
        shutil.copy(os.path.join(REPO, "bench", "device", name), root)


def stage(binary=None, firmware_mpy=False, frozen=False):
    """A temporary CIRCUITPY drive: the firmware, lib/ with the device libraries, hw/ with the stand-ins.

    With binary, the libraries are .mpy files as circup installs them; firmware_mpy compiles the firmware's
    packages too (code.py and boot.py stay source: CircuitPython runs them as files). frozen: the packages and
    libraries are in the interpreter, so the drive holds only code.py, boot.py, settings, web/ and the tz table
    (where core/tz.py looks for it beside its frozen self).
    """
    root = tempfile.mkdtemp(prefix="meterplus-device-")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in FIRMWARE:
        src = os.path.join(REPO, name)
        if os.path.isdir(src):
            shutil.copytree(src, os.path.join(root, name), ignore=ignore)
        else:
            shutil.copy(src, root)
    os.makedirs(os.path.join(root, "lib"))
    copy_libraries(os.path.join(root, "lib"), ignore)
    add_bench_tools(root)
    if frozen:
        for name in FROZEN_PACKAGES + ("lib",):
            shutil.rmtree(os.path.join(root, name))
        os.makedirs(os.path.join(root, "lib"))
        os.makedirs(os.path.join(root, ".frozen", "core"))
        shutil.copy(os.path.join(REPO, "core", "tz.dat"), os.path.join(root, ".frozen", "core"))
        return root
    if binary is not None:
        compile_mpy(binary, os.path.join(root, "lib"))
        if firmware_mpy:
            for top in ("core", "drivers", "meter", "services"):
                compile_mpy(binary, os.path.join(root, top))
    return root


def overlay_update(root):
    """What a network update leaves on a drive (docs/ota.md, "Twins"): the release's compiled form where it has
    CircuitPython's mpy-cross (tools.release.find_mpy_cross, the one make release uses), each package module's .py
    set aside by boot.py; else the source form, each .mpy of a module it ships set aside."""
    from services.ota.manifest import twin
    from tools.ota_manifest import app_files
    from tools.release import MPY_PACKAGES, find_mpy_cross

    tool = find_mpy_cross()
    for rel in app_files(REPO):
        dest = os.path.join(root, rel)
        os.makedirs(os.path.dirname(dest) or root, exist_ok=True)
        shutil.copy(os.path.join(REPO, rel), dest)
        other = twin(rel)
        if tool is None and other is not None and os.path.exists(os.path.join(root, other)):
            os.remove(os.path.join(root, other))
    if tool is not None:   # compile_mpy replaces each .py by its .mpy: the .py is gone as boot.py sets it aside
        for top in MPY_PACKAGES:
            compile_mpy(os.path.join(os.path.dirname(os.path.dirname(tool)), "micropython"), os.path.join(root, top))


def bench_process(cmd, root, timeout):
    """(exit code, the @@BENCH@@ result or None, output tail) of one bench process run in the drive folder root."""
    res = subprocess.run(cmd, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    result = None
    for line in res.stdout.splitlines():
        if line.startswith("@@BENCH@@ "):
            result = json.loads(line[10:])
    return res.returncode, result, res.stdout[-3000:]


def start_once(binary, root, heap_kb, flags=()):
    """(exit code, result or None, output tail) of one start (start.py) in the staged drive at root, kept after."""
    cmd = [binary, "-X", "heapsize=%dk" % heap_kb, "start.py", str(START_SECONDS), "start"] + list(flags)
    return bench_process(cmd, root, START_SECONDS + 300)


def start_once_with(binary, overlay, heap_kb=1024):
    """One start of the .mpy drive after overlay(root) changed it (a test's hung feature); (rc, result, tail)."""
    root = stage(binary, firmware_mpy=True)
    try:
        overlay(root)
        return start_once(binary, root, heap_kb, ("--s3", str(S3_PYSTONES)))
    finally:
        shutil.rmtree(root, ignore_errors=True)


START_SECONDS = 120      # device seconds a start may take in the bench before it counts as hung
START_IMAGES = ("mpy", "py", "after_update")


def start_figures(binary, heap_kb=1024, s3_pystones=None, log=print, overlay=None, flash="typ"):
    """{image: [first start, second start]} of start results: the drive as .mpy (first start on a fresh drive, then
    a start with the history file there), as .py, and an .mpy drive after a network update. Each start measures
    this interpreter's pystones itself (the device clock's factor for s3_pystones). overlay(root): called on each
    staged drive before its first start (a test's broken firmware). flash: the flash chip's "typ" or "max" erase and
    program times on the clock (bench/device/stand_ins/flash_model.py), or None for none."""
    out = {}
    for image in START_IMAGES:
        root = stage(binary, firmware_mpy=image != "py")
        if overlay is not None:
            overlay(root)
        try:
            runs = []
            for n in range(2):
                if image == "after_update" and n == 1:
                    overlay_update(root)
                flags = ("--s3", str(s3_pystones or S3_PYSTONES)) + (("flash=" + flash,) if flash else ())
                rc, result, tail = start_once(binary, root, heap_kb, flags)
                if rc != 0 or result is None or "memory_error" in result:
                    log(tail)
                    raise SystemExit("the start as %s did not run (exit %d)" % (image, rc))
                runs.append(result)
            out[image] = runs
        finally:
            shutil.rmtree(root, ignore_errors=True)
    return out


def start_keys(starts):
    """The issue's start keys in S3 seconds (alive; first reading beside) from start_figures()."""
    def s(result, key):
        v = result.get(key)
        return None if v is None else round(v / 1000, 2)

    keys = {
        "boot_s_mpy": s(starts["mpy"][1], "alive_ms"),
        "boot_s_py": s(starts["py"][1], "alive_ms"),
        "boot_s_after_update": s(starts["after_update"][1], "alive_ms"),
        "boot_s_first": s(starts["mpy"][0], "alive_ms"),
        "reading_s_mpy": s(starts["mpy"][1], "first_reading_ms"),
        "reading_s_py": s(starts["py"][1], "first_reading_ms"),
        "reading_s_after_update": s(starts["after_update"][1], "first_reading_ms"),
        "reading_s_first": s(starts["mpy"][0], "first_reading_ms"),
        # every feature wired ("Meter Plus up"): the features after the first reading are wired then (code.py)
        "up_s_mpy": s(starts["mpy"][1], "up_ms"),
        "up_s_py": s(starts["py"][1], "up_ms"),
        "up_s_after_update": s(starts["after_update"][1], "up_ms"),
        "up_s_first": s(starts["mpy"][0], "up_ms"),
        "start_flash_stall_s_first": s(starts["mpy"][0].get("flash", {}), "stall_ms"),
        "start_watchdog_gap_s_worst": max(r["watchdog_longest_gap_ms"] for rs in starts.values() for r in rs) / 1000,
        "start_watchdog_tripped": sorted("%s#%d" % (k, i) for k, rs in starts.items() for i, r in enumerate(rs)
                                         if r["watchdog_tripped"]),
    }
    return keys


def start_json(starts, starts_fast, starts_max):
    """The start's JSON keys at the 1,000 reference and the flash's typical times, the same at 2,000 and at the
    flash's maximum beside, and every start's own figures."""
    out = start_keys(starts)
    out["start_at_2000_pystones"] = start_keys(starts_fast)
    out["start_at_flash_max"] = start_keys(starts_max)
    out["starts"] = starts
    return out


def print_starts(starts, starts_fast, starts_max):
    """The start in S3 seconds per image, and what it is made of."""
    keys, fast, top = start_keys(starts), start_keys(starts_fast), start_keys(starts_max)
    print("the start, code.py's first line to the first /system/alive answer and to the first reading on MQTT "
          "(S3 s at %d pystones/s; at %d beside; boot.py before it included):" % (S3_PYSTONES, S3_PYSTONES_FAST))
    for image, label in (("first", "first start of a fresh drive (.mpy)"), ("mpy", "drive as .mpy"),
                         ("py", "drive as .py"), ("after_update", "after a network update")):
        print("  %-38s alive %6.1f (%5.1f)   reading %6.1f (%5.1f)   all wired %6.1f (%5.1f)"
              % (label, keys["boot_s_" + image], fast["boot_s_" + image], keys["reading_s_" + image],
                 fast["reading_s_" + image], keys["up_s_" + image] or -1, fast["up_s_" + image] or -1))
    for label, k in (("flash typical", keys), ("flash maximum", top)):
        print("  watchdog, %s: longest gap between arming or feeding and the next feed %.1f S3 s (timeout %d s); "
              "tripped: %s; the first start's flash stall %.1f S3 s (alive %.1f)"
              % (label, k["start_watchdog_gap_s_worst"], starts["mpy"][1]["watchdog_timeout_s"],
                 ", ".join(k["start_watchdog_tripped"]) or "none", k["start_flash_stall_s_first"] or 0,
                 k["boot_s_first"] or -1))
    r = starts["mpy"][1]
    print("  the .mpy start: boot.py %.1f, code.py's imports %.1f, build() %.1f, loop to alive %.1f S3 s"
          % (r["boot_py_ms"] / 1000, r["imports_ms"] / 1000, r["build_ms"] / 1000,
             (r["alive_ms"] - r["code_to_loop_ms"]) / 1000))
    print("  features' wiring (S3 s): " + ", ".join("%s %.1f" % (k, v / 1000) for k, v in
                                                   sorted(r["features_ms"].items(), key=lambda kv: -kv[1])))


HEAP_STEPS_KB = (512, 1024, 2048, 4096, 8192)   # totals CircuitPython's doubling passes (64 KB, 128 KB, ...)
PSRAM_KB = 8192           # the reference board's PSRAM (ESP32-S3-DevKitC-1 N8R8): the heap can grow to this


def run_firmware(binary, seconds, mode="run", heap_kb=None, firmware_mpy=False, frozen=False, flags=()):
    """(exit code, result dict or None, output tail) of one run in a fresh copy of the drive, in a heap of heap_kb."""
    root = stage(binary, firmware_mpy, frozen)
    try:
        cmd = [binary]
        if heap_kb:
            cmd += ["-X", "heapsize=%dk" % heap_kb]
        cmd += ["runner.py", str(seconds), mode] + (["frozen"] if frozen else []) + list(flags)
        rc, result, tail = bench_process(cmd, root, seconds + 180)
        if result is not None:
            result["heap_kb"] = heap_kb
        return rc, result, tail
    finally:
        shutil.rmtree(root, ignore_errors=True)


def short_of_memory(rc, result):
    """Why a run shows that its heap was too small (an allocation failed somewhere), or None."""
    if rc != 0 or result is None or "memory_error" in result:
        return "did not run (exit %d)" % rc
    if result["features_off"]:
        return "features off: %s" % result["features_off"]
    for line in result["log"] + list(result["module_errors"].values()):
        text = str(line).lower()
        if "memory" in text:
            return text
    return None


def grown_heap(binary, seconds, mode="run", frozen=False, steps=HEAP_STEPS_KB, log=print, flags=()):
    """(heap KB, result) of the standard load in the heap the device grows to: the smallest of the doubling steps in
    which the whole run completes with no allocation failing. On the S3 the heap grows exactly when an allocation
    fails after a collection, so it stops at that step."""
    for heap in steps:
        rc, result, tail = run_firmware(binary, seconds, mode, heap, frozen=frozen, flags=flags)
        why = short_of_memory(rc, result)
        if why is None:
            return heap, result
        log("  %d KB heap: too small for the standard load (%s); the device grows it" % (heap, why[:120]))
    raise SystemExit("the standard load did not run even in %d KB:\n%s" % (PSRAM_KB, tail))


def boots(binary, heap_kb, firmware_mpy=False, frozen=False):
    """Does the firmware boot in heap_kb: main loop reached, /history/latest answered 200, no module failed."""
    rc, result, _ = run_firmware(binary, BOOT_SECONDS, "boot", heap_kb, firmware_mpy, frozen, flags=("nopystone",))
    if rc != 0 or not result or "memory_error" in result:
        return False
    if not result["http"].get("/api/v1/history/latest 200"):
        return False
    return "FAILED" not in result["module_states"].values()


def smallest_heap(binary, lo=64, hi=1024, step=8, firmware_mpy=False, frozen=False):
    """The smallest -X heapsize (KB, to `step`) with which the firmware boots."""
    if not boots(binary, hi, firmware_mpy, frozen):
        return None
    while hi - lo > step:
        mid = (lo + hi) // 2
        if boots(binary, mid, firmware_mpy, frozen):
            hi = mid
        else:
            lo = mid
    return hi


OWN_COSTS = """
import sys, gc
import time as _unix_time
import os as _unix_os
sys.path[:0] = ["hw", ".", "lib"]
import time
time._rt = _unix_time
import os
os._bind(_unix_os)
for name in os.listdir("hw"):   # the stand-ins are C modules on the device: imported before any baseline
    if name.endswith(".py") and name[:-3] not in ("flashfs", "flash_model"):   # the bench's own, not the chip's
        __import__(name[:-3])
import benchclock
for name in %r:
    gc.collect()
    before = gc.mem_alloc()
    t = benchclock.cpu_us()
    __import__(name)
    took = benchclock.cpu_us() - t
    gc.collect()
    print("@@COST@@", name, gc.mem_alloc() - before, took)
# What one collection costs with only the modules' code and tables in the heap (nothing running): the floor under
# every collection of the firmware loaded as files (frozen, the code is out of the heap and out of the marking).
import benchclock
took = []
for _ in range(15):
    start = benchclock.cpu_us()
    gc.collect()
    took.append(benchclock.cpu_us() - start)
took.sort()
print("@@GC@@", took[len(took) // 2])
"""


def _imports(path, known):
    """Device modules (of known) that the file at path imports, at any depth of its code."""
    import ast

    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    found = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module] + [node.module + "." + a.name for a in node.names]
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in known:
            names = [node.value]   # a module named in a table: code.py's FEATURES, the OTA service's PARTS
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name not in found:
                found.append(name)
    return found


def device_modules(root):
    """{module name: file} of the firmware's modules and the device libraries in a staged drive."""
    mods = {}
    for top in ("core", "drivers", "meter", "services", "lib"):
        for path in sorted(glob.glob(os.path.join(root, top, "**", "*.py"), recursive=True)):
            rel = os.path.relpath(path, os.path.join(root, "lib") if top == "lib" else root)[:-3]
            name = rel.replace(os.sep, ".")
            mods[name[:-9] if name.endswith(".__init__") else name] = path
    return mods


def import_order(mods):
    """Module names with every module after the modules it imports (cycles broken where they close)."""
    order, state = [], {}

    def visit(name):
        if state.get(name):
            return
        state[name] = 1
        for dep in _imports(mods[name], mods):
            if dep != name:
                visit(dep)
        order.append(name)

    for name in sorted(mods):
        visit(name)
    return order


GC_OF_CODE = "@gc"


def module_costs(binary, mpy=False, only=None):
    """(heap each module holds of its own (its imports loaded first), largest first; the bench CPU us of one
    collection with all of them loaded and nothing else; {module: bench CPU us of its own import}). mpy: the
    firmware and libraries as .mpy files (the import times then are loading, not compiling). only: just these
    modules (a run's resident set), each with what it imports."""
    root = stage()
    try:
        mods = device_modules(root)
        # Only what code.py can reach: test helpers and unused library parts would inflate the totals.
        reach, todo = set(), [d for d in _imports(os.path.join(root, "code.py"), mods)]
        todo += [d for d in _imports(os.path.join(root, "boot.py"), mods)]
        while todo:
            name = todo.pop()
            if name in reach:
                continue
            reach.add(name)
            todo.extend(_imports(mods[name], mods))
            parent = name.rpartition(".")[0]
            if parent in mods:
                todo.append(parent)
        order = [n for n in import_order(mods) if n in reach and (only is None or n in only)]
        if mpy:
            for top in ("core", "drivers", "meter", "services", "lib"):
                compile_mpy(binary, os.path.join(root, top))
        res = subprocess.run([binary, "-c", OWN_COSTS % (order,)], cwd=root, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, timeout=300)
        costs, import_us = {}, {}
        for line in res.stdout.splitlines():
            if line.startswith("@@COST@@"):
                _, name, n, us = line.split()
                costs[name] = int(n)
                import_us[name] = int(us)
            elif line.startswith("@@GC@@"):
                costs[GC_OF_CODE] = int(line.split()[1])
        gc_us = costs.pop(GC_OF_CODE, None)
        if len(costs) < len(order) or gc_us is None:
            raise SystemExit("importing the device modules failed on CircuitPython:\n%s" % res.stdout[-2000:])
        return sorted(costs.items(), key=lambda kv: -kv[1]), gc_us, import_us
    finally:
        shutil.rmtree(root, ignore_errors=True)


def shares(costs):
    """Heap by top-level part: each library, and core/drivers/meter/services by package."""
    totals = {}
    for name, cost in costs:
        parts = name.split(".")
        key = ".".join(parts[:2]) if parts[0] == "services" else parts[0]
        totals[key] = totals.get(key, 0) + cost
    return sorted(totals.items(), key=lambda kv: -kv[1])


def features_line(result):
    """The features' heap at start, largest first."""
    items = sorted(result["feature_heap"].items(), key=lambda kv: -kv[1])
    return ", ".join("%s %s" % (k, kb(v)) for k, v in items)


def kb(n):
    return "%.0f KB" % (n / 1024) if n is not None else "-"


# ESP32-S3 time. The S3 runs Python at 1,000-1,600 pystones/s (published MicroPython figures on ESP32 @240 MHz:
# micropython issues #5673, #6565, micropython-ulab #296; the S3 is in the same class). CircuitPython 10 with its heap
# in PSRAM is not faster, so 1,000 pystones/s is the reference (conservative: it already holds PSRAM's slower heap,
# and no further PSRAM factor is applied); 2,000 is shown beside it. A bench millisecond of the firmware's own work
# is (bench pystones / reference) S3 milliseconds; the loop's sleeps are real time on the device too, not scaled.
S3_PYSTONES = 1000
S3_PYSTONES_FAST = 2000
BUDGETS = (    # issue 25: S3 ms at the 1,000 reference, the grown heap, the standard load
    ("cycle_ms_median", 20), ("cycle_ms_p95", 100), ("cycle_ms_worst", 500), ("idle_cycle_ms_median", 10),
    ("gc_ms_worst", 100), ("alive_ms_p95", 200), ("latest_ms_p95", 300), ("telegram_to_mqtt_ms_p95", 1000),
    ("telegram_to_shelly_udp_ms_p95", 1000), ("telegram_to_sma_ms_p95", 1000),
    # issue 35, point 7: a history flush, a log write and a settings save in the window, at the typical flash figure
    ("flash_worst_cycle_ms", 500), ("flash_worst_alive_ms", 500), ("flash_history_flush_ms", 500),
    ("flash_log_write_ms", 500), ("flash_settings_save_ms", 500),
    # issue 35, points 5 and 6: rare collections, the two heavy answers
    ("collections_per_min", 10), ("info_ms_p95", 300), ("metrics_ms_p95", 200))
# The standard load's runs put CIRCUITPY on NOR flash (runner.py, "flash="): every write of the firmware stalls the
# device clock at the typical figures of the flash chip (bench/device/stand_ins/flash_model.py).
FLASH_FLAGS = ("flash=typ",)
FLASH_KINDS = (("history_flush", "flash_history_flush_ms"), ("log_write", "flash_log_write_ms"),
               ("settings_save", "flash_settings_save_ms"))


def flash_figures(run):
    """The flash keys of a run with the flash model (S3 ms; the first start's stall in S3 s), {} without it.

    The run charges the typical figures; the "_max" keys are the same steps with the chip's maximum erase and program
    times in place of the typical ones (the model counts both for every erase)."""
    fl = run.get("flash")
    if not fl:
        return {}
    m = fl["measured"]
    out = {"flash_erases": m["erases"], "flash_programs": m["programs"], "flash_stall_ms_total": ms(m["stall_us"]),
           "flash_stall_ms_total_max": ms(m["stall_us_max"])}
    cycles, alives, cycles_max, alives_max = [], [], [], []
    for kind, key in FLASH_KINDS:
        e = fl["events"].get(kind)
        if not e or e["stall_us"] is None:
            out[key] = out[key + "_max"] = None      # did not happen in the window (flash_events_missing)
            continue
        out[key] = ms(e["stall_us"])
        out[key + "_max"] = ms(e["stall_us_max"])
        more = e["stall_us_max"] - e["stall_us"] if fl["figure"] == "typ" else 0
        cycles.append(e["cycle_us"])
        cycles_max.append(e["cycle_us"] + more)
        if e["alive_us"] is not None:
            alives.append(e["alive_us"])
            alives_max.append(e["alive_us"] + more)
    out["flash_worst_cycle_ms"] = ms(max(cycles)) if cycles else None
    out["flash_worst_alive_ms"] = ms(max(alives)) if alives else None
    out["flash_worst_cycle_ms_max"] = ms(max(cycles_max)) if cycles_max else None
    out["flash_worst_alive_ms_max"] = ms(max(alives_max)) if alives_max else None
    first = fl["longest_step"]
    if fl["history_file_at_start"] is False and first:
        # a fresh drive: the longest step is the history service's start() creating its file
        out["first_start_flash_stall_s_typ"] = first["stall_us"] / 1e6
        out["first_start_flash_stall_s_max"] = first["stall_us_max"] / 1e6
    out["flash_events_missing"] = [k for k, _ in FLASH_KINDS if out[dict(FLASH_KINDS)[k]] is None]
    return out


def flash_lines(result, figs):
    """What the flash model charged in the standard run, in words."""
    fl = result["flash"]
    lines = ["  flash (CIRCUITPY on NOR flash, W25Q64JV figures: sector erase 45 ms typ / 400 ms max, page program "
             "0.4 / 3 ms; each 4 KB sector written back = one erase + 16 page programs): in the measured window %d "
             "erases, %d page programs, %.0f S3 ms of stalls (%.0f at the maximum figures)"
             % (figs["flash_erases"], figs["flash_programs"], figs["flash_stall_ms_total"],
                figs["flash_stall_ms_total_max"])]
    for kind, _key in FLASH_KINDS:
        e = fl["events"].get(kind)
        if not e or e["stall_us"] is None:
            lines.append("    %-14s did not happen in the window" % kind)
            continue
        lines.append("    %-14s stall %6.1f S3 ms (max %7.1f), its cycle %6.1f, alive waiting for it %6.1f%s"
                     % (kind, e["stall_us"] / 1000, e["stall_us_max"] / 1000, e["cycle_us"] / 1000,
                        (e["alive_us"] or 0) / 1000,
                        ", the save answered in %.1f (HTTP %s)" % (e["post_us"] / 1000, e["post_status"])
                        if e.get("post_us") is not None else ""))
    worst = []
    for key in ("flash_worst_cycle_ms", "flash_worst_alive_ms"):
        v = figs.get(key)
        top = figs.get(key + "_max")
        mark = "" if v is None else " budget 500: %s" % ("holds" if v <= 500 else "NOT MET")
        worst.append("%s %s (max %s)%s" % (key, "-" if v is None else "%.1f" % v,
                                           "-" if top is None else "%.1f" % top, mark))
    lines.append("    " + "; ".join(worst))
    if "first_start_flash_stall_s_typ" in figs:
        ls = fl["longest_step"]
        lines.append("    first start on a fresh drive (no history file): one step stalls %.1f S3 s (%.1f s at the "
                     "maximum figures) writing %s; watchdog tripped in this run: %s"
                     % (figs["first_start_flash_stall_s_typ"], figs["first_start_flash_stall_s_max"],
                        ", ".join(ls["paths"]), fl.get("watchdog_tripped")))
    return "\n".join(lines)


def median(values):
    values = sorted(values)
    return values[len(values) // 2] if values else None


def pct(values, p):
    """The p-th percentile (nearest rank) of values, or None."""
    values = sorted(values)
    if not values:
        return None
    return values[min(len(values) - 1, max(0, -(-len(values) * p // 100) - 1))]


def cycle_us(result):
    """Every measured cycle's supervisor step in us (histogram bucket middles, and the long ones as measured)."""
    h = result["cycle_hist"]
    out = []
    for i, n in h["counts"]:
        out.extend([i * h["bucket_us"] + h["bucket_us"] // 2] * n)
    return sorted(out + h["over"])


def ms(us):
    return None if us is None else us / 1000


def s3_figures(run, idle):
    """The issue's keys in S3 ms from a standard-load run and an idle run at the same reference (the runner's
    figures are in device microseconds already)."""
    cycles = cycle_us(run)
    lat = run["latency"]

    def p95(kind):
        return ms(pct(lat.get(kind, ()), 95))

    figs = {
        "pystone_per_s": median(run["pystone_samples"]),
        "s3_factor": round(run["factor"], 1),
        "cycle_ms_median": ms(median(cycles)),
        "cycle_ms_p95": ms(pct(cycles, 95)),
        "cycle_ms_worst": ms(cycles[-1] if cycles else None),
        "idle_cycle_ms_median": ms(median(cycle_us(idle))),
        "gc_ms_worst": ms(max(run["gc_us"] + idle["gc_us"] or [0])),
        "gc_ms_median": ms(median(run["gc_us"])),
        "collections_per_min": round(run["gc_count"] * 60000 / max(1, run["elapsed_ms"]), 1),
        "alive_ms_p95": p95("alive"),
        "latest_ms_p95": p95("latest"),
        "page_latest_ms_p95": p95("page_latest"),
        "info_ms_p95": p95("info"),
        "metrics_ms_p95": p95("metrics"),
        "telegram_to_mqtt_ms_p95": p95("telegram_to_mqtt"),
        "telegram_to_shelly_udp_ms_p95": p95("telegram_to_shelly_udp"),
        "telegram_to_sma_ms_p95": p95("telegram_to_sma"),
        "heap_held_kb_max": run["held_max"] // 1024,
        "heap_grown_kb": run["heap_kb"],
    }
    pushes = run.get("notify", {}).get("pushes", [])
    figs["shelly_notify_ms_p95"] = ms(pct([us for us, _ in pushes], 95))      # one reading to every session
    figs["shelly_notify_bytes_median"] = median([b for _, b in pushes])         # heap allocated by one push
    figs["shelly_notify_frame_bytes"] = run.get("notify", {}).get("frame_bytes")
    built = run.get("built", {})
    figs["info_build_ms_p95"] = ms(pct([us for us, _ in built.get("/api/v1/system/info", ())], 95))
    figs["metrics_build_ms_p95"] = ms(pct([us for us, _ in built.get("/metrics", ())], 95))
    figs.update(flash_figures(run))
    return figs


def figures_line(figs, budgets=True):
    """One table of the keys with their budgets."""
    lines = []
    limits = dict(BUDGETS)
    for key, value in figs.items():
        if not isinstance(value, (int, float)) or key in ("pystone_per_s", "s3_factor"):
            continue
        limit = limits.get(key)
        mark = ""
        if budgets and limit is not None:
            mark = "  (budget %d: %s)" % (limit, "holds" if value <= limit else "NOT MET")
        lines.append("    %-32s %10.1f%s" % (key, value, mark))
    return "\n".join(lines)


def run_or_exit(binary, seconds, mode, **kw):
    rc, result, tail = run_firmware(binary, seconds, mode, **kw)
    if rc != 0 or result is None or "memory_error" in result:
        print(tail)
        raise SystemExit("code.py did not run on CircuitPython's unix port (exit %d, %s)" % (rc, mode))
    return result


def main(argv=()):
    """The bench; argv as on the command line (`make bench` calls it with none: the defaults)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--src", default=os.environ.get("CIRCUITPY_SRC"), help="CircuitPython source tree")
    p.add_argument("--seconds", type=int, default=60)
    p.add_argument("--no-bisect", action="store_true", help="skip the smallest-heap search")
    p.add_argument("--no-costs", action="store_true", help="skip the per-module costs")
    p.add_argument("--no-8mb", action="store_true", help="skip the worst-case run with the whole 8 MB heap")
    p.add_argument("--frozen", action="store_true",
                   help="also run with the firmware and libraries frozen into the interpreter (code out of the heap)")
    p.add_argument("--profile", action="store_true", help="also run once more with each module's polls profiled")
    p.add_argument("--json", help="also write the figures to this file")
    p.add_argument("--start-only", action="store_true", help="only the start figures (boot_s_*), then stop")
    args = p.parse_args(list(argv))
    try:
        binary = build(source_tree(args.src))
    except Skip as exc:
        print("device bench skipped: %s" % exc)
        return 0
    starts = start_figures(binary)
    starts_fast = start_figures(binary, s3_pystones=S3_PYSTONES_FAST)
    starts_max = start_figures(binary, flash="max")
    print_starts(starts, starts_fast, starts_max)
    if args.start_only:
        if args.json:
            with open(args.json, "w") as f:
                json.dump(start_json(starts, starts_fast, starts_max), f, indent=1, sort_keys=True)
        return 0
    heap, result = grown_heap(binary, args.seconds, flags=FLASH_FLAGS)
    grown = dict(heap_kb=heap)
    idle = run_or_exit(binary, min(args.seconds, 30), "idle", **grown)
    figures = s3_figures(run=result, idle=idle)
    fast = ("--s3", str(S3_PYSTONES_FAST))
    result_fast = run_or_exit(binary, args.seconds, "run", flags=fast + FLASH_FLAGS, **grown)
    idle_fast = run_or_exit(binary, min(args.seconds, 30), "idle", flags=fast, **grown)
    figures_fast = s3_figures(run=result_fast, idle=idle_fast)
    out = {"circuitpython": CIRCUITPYTHON_TAG, "s3_reference_pystones": S3_PYSTONES, "run": result, "idle": idle,
           "s3_at_2000_pystones": figures_fast, "run_at_2000_pystones": result_fast}
    out.update(figures)
    out.update(start_json(starts, starts_fast, starts_max))
    print("code.py on CircuitPython %s unix port (32-bit, OBJ_REPR_C, single floats), standard load for %d s, in "
          "the heap the S3 grows to: %d KB" % (CIRCUITPYTHON_TAG, args.seconds, heap))
    print("  this interpreter: %d pystones/s at the start (the device clock's factor: one bench ms of the firmware's "
          "work is %.0f S3 ms at %d pystones/s); samples through the run: %s"
          % (result["pystone_samples"][0], result["factor"], S3_PYSTONES, result["pystone_samples"]))
    print("  ESP32-S3 ms at %d pystones/s (budgets of issue 25):" % S3_PYSTONES)
    print(figures_line(figures))
    if result.get("flash"):
        print(flash_lines(result, figures))
    print("  ESP32-S3 ms at %d pystones/s:" % S3_PYSTONES_FAST)
    print(figures_line(figures_fast, budgets=False))
    print("  %d collections in %d s of device time (%d s on this machine)"
          % (result["gc_count"], result["elapsed_ms"] // 1000, result["real_ms"] // 1000))
    print("  heap after build()        %s, held while running %s .. %s (heap %d KB)"
          % (kb(result["after_build"]), kb(result["held_min"]), kb(result["held_max"]), heap))
    print("  heap per feature at start " + features_line(result))
    print("  cycles per second         %d (idle %d)" % (result["cycles_per_s"], idle["cycles_per_s"]))
    print("  traffic                   %d telegrams, HTTP %s, Modbus %d ok/%d bad, MQTT %d connects/%d publishes, "
          "UDP %d answers, WebSocket %d answers, SMA %d datagrams"
          % (result["telegrams"], sum(v for k, v in result["http"].items() if k.endswith(" 200")),
             result["modbus_ok"], result["modbus_bad"], result["mqtt_connects"], result["mqtt_publishes"],
             result["udp_answers"], result["ws_answers"], result["sma_datagrams"]))
    not_ok = {k: v for k, v in result["http"].items() if not k.endswith(" 200")}
    if not_ok:
        print("  HTTP not 200              %s" % not_ok)
    if result["module_errors"]:
        print("  module errors             %s" % result["module_errors"])
    if not args.no_8mb:
        worst = run_or_exit(binary, args.seconds, "run", heap_kb=PSRAM_KB, flags=FLASH_FLAGS)
        w = s3_figures(run=worst, idle=idle)
        out["whole_8mb"] = w
        out["whole_8mb_run"] = worst
        print("  worst case, the whole 8 MB heap from the start (S3 ms at %d pystones/s): cycle median %.1f, p95 "
              "%.1f, worst %.1f; collection worst %.1f (%s collections/min); alive p95 %.1f; latest p95 %.1f"
              % (S3_PYSTONES, w["cycle_ms_median"], w["cycle_ms_p95"], w["cycle_ms_worst"], w["gc_ms_worst"],
                 w["collections_per_min"], w["alive_ms_p95"] or -1, w["latest_ms_p95"] or -1))
    if args.profile:
        prof = run_or_exit(binary, min(args.seconds, 30), "idle", flags=("profile",), **grown)
        rows = sorted(prof["profile"].items(), key=lambda kv: -kv[1][1])
        out["idle_profile"] = {name: {"polls": n, "s3_ms_per_poll": us / max(1, n) / 1000,
                                      "bytes_per_poll": by / max(1, n)} for name, (n, us, by, _w, _slow) in rows}
        print("  idle polls by module (S3 ms per poll at %d pystones/s, heap bytes per poll; the stand-ins of "
              "C modules are Python here and counted in):" % S3_PYSTONES)
        for name, (n, us, by, _w, _slow) in rows:
            print("    %-14s %6d polls  %7.2f S3 ms/poll  %7.1f B/poll" % (name, n, us / max(1, n) / 1000,
                                                                          by / max(1, n)))
    if not args.no_bisect:
        for mpy in (False, True):
            smallest = smallest_heap(binary, firmware_mpy=mpy)
            out["smallest_heap_kb_" + ("mpy" if mpy else "py")] = smallest
            print("  smallest heap that boots  %s (firmware as %s, libraries .mpy)"
                  % ("%d KB" % smallest if smallest else "> 1024 KB", ".mpy" if mpy else ".py"))
        out["boot_heap_kb"] = out["smallest_heap_kb_py"]
    if not args.no_costs:
        costs, gc_us, _ = module_costs(binary)
        out["module_costs"] = costs
        out["gc_ms_code_all"] = round(gc_us * result["factor"] / 1000, 1)
        out["shares"] = shares(costs)
        print("  heap of the modules' own code and tables: %s in all (%d modules code.py can reach)"
              % (kb(sum(c for _, c in costs)), len(costs)))
        print("  by part:   " + ", ".join("%s %s" % (k, kb(v)) for k, v in out["shares"]))
        print("  one collection with all of that code in the heap (nothing running): %.1f S3 ms at %d pystones/s"
              % (out["gc_ms_code_all"], S3_PYSTONES))
        # Issue 35: what stays resident under the standard load (the modules still imported at the end of the run)
        # and the collection floor with only that code in the heap.
        resident, rgc_us, _ = module_costs(binary, only=set(result["resident"]))
        out["code_resident_kb"] = sum(c for _, c in resident) // 1024
        out["code_resident_modules"] = len(resident)
        out["gc_ms_code_only"] = round(rgc_us * result["factor"] / 1000, 1)
        out["resident_costs"] = resident
        print("  resident under the standard load: %d KB of code and tables in %d modules (budget 250); one "
              "collection with only that code: %.1f S3 ms (budget 70)"
              % (out["code_resident_kb"], len(resident), out["gc_ms_code_only"]))
        print("  largest resident modules:")
        for name, cost in resident[:20]:
            print("    %-45s %s" % (name, kb(cost)))
    if args.frozen:
        frozen = build_frozen(source_tree(args.src), binary)
        fheap, fr = grown_heap(frozen, args.seconds, frozen=True, steps=(128, 256) + HEAP_STEPS_KB,
                               flags=FLASH_FLAGS)
        fidle = run_or_exit(frozen, min(args.seconds, 30), "idle", heap_kb=fheap, frozen=True)
        out["frozen"] = fr
        out["frozen_figures"] = s3_figures(run=fr, idle=fidle)
        print("with the firmware and libraries frozen into the interpreter (their code out of the heap):")
        print("  heap after build()        %s" % kb(fr["after_build"]))
        print("  heap held while running   %s .. %s (heap %d KB)" % (kb(fr["held_min"]), kb(fr["held_max"]), fheap))
        print("  ESP32-S3 ms at %d pystones/s (budgets of issue 25):" % S3_PYSTONES)
        print(figures_line(out["frozen_figures"]))
        if not args.no_bisect:
            smallest = smallest_heap(frozen, lo=32, hi=1024, frozen=True)
            out["smallest_heap_kb_frozen"] = smallest
            print("  smallest heap that boots  %s" % ("%d KB" % smallest if smallest else "> 1024 KB"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
