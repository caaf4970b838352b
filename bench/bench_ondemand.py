"""What loading each part the firmware imports for a job costs on the device clock (issue 35 point 4), in S3 ms.

The parts are imported as .mpy files (the drive image) by the device bench's interpreter (CircuitPython's unix port),
with the modules that stay resident under the standard load imported first: CircuitPython collects after every
import, and that collection walks the resident code, so a part's load costs more in the firmware's heap than alone.
The resident set is the `resident_costs` of a `bench.bench_device --json` run (--resident), else code.py's core.
Each part is loaded five times (let go between) and the median is shown; the device clock's factor is this
interpreter's pystones over the 1,000 reference, as in the device bench.

    .venv/bin/python -m bench.bench_ondemand --src ~/src/circuitpython --resident s3.json
"""

import argparse
import json
import os
import shutil
import subprocess

from bench.bench_device import S3_PYSTONES, build, source_tree, stage

# (what, the statement that loads it, the modules it leaves behind to let go)
PARTS = (
    ("settings checks (a save, a restore, the load at start)", "import core.settings_check",
     ("core.settings_check",)),
    ("settings request's work (GET /settings; a POST loads the checks above too)",
     "from services.api import settings_job", ("services.api.settings_job",)),
    ("OTA parts (a check, an install, an upload: work, manifest, signature, ed25519, http_get, stream, upload)",
     "import services.ota.service as o\no.load_parts()", ()),
    ("OTA start (the floor's version check: manifest only)", "import services.ota.manifest",
     ("services.ota.manifest",)),
    ("cloud uploader (cloudIotEnabled switched on)", "import services.cloud.service", ("services.cloud.service",)),
    ("Improv session (a button press on a configured device, or setup mode)",
     "import services.network.provisioning\nimport services.network.ble_on_demand",
     ("services.network.provisioning", "services.network.ble_on_demand", "core.improv")),
    ("tariff fetch (day-ahead prices: parser and HTTP client)",
     "import services.tariff.prices\nimport services.ota.http_get",
     ("services.tariff.prices", "services.ota.http_get")),
)

SCRIPT = """
import sys, gc
import time as _unix_time
import os as _unix_os
sys.path[:0] = ["hw", ".", "lib"]
import time
time._rt = _unix_time
import os
os._bind(_unix_os)
for name in os.listdir("hw"):
    if name.endswith(".py") and name[:-3] not in ("flashfs", "flash_model"):
        __import__(name[:-3])
import benchclock
from s3_clock import pystone_samples
stones = pystone_samples(%(loops)d)[1]
print("@@PYSTONES@@", stones)
for name in %(resident)r:
    try:
        __import__(name)
    except Exception as exc:
        print("@@SKIP@@", name, repr(exc))
gc.collect()
import services.ota.service
from core.modules import unload
for i, (stmt, names) in enumerate(%(parts)r):
    took = []
    for _ in range(5):
        gc.collect()
        t = benchclock.cpu_us()
        exec(stmt)
        took.append(benchclock.cpu_us() - t)
        if names:
            unload(*names)
        else:
            services.ota.service.release_parts()
    took.sort()
    print("@@PART@@", i, took[2])
# The OTA's load_step(): one part per poll, in its order
steps = {}
for _ in range(5):
    for name in services.ota.service.LOAD_ORDER:
        gc.collect()
        t = benchclock.cpu_us()
        __import__(name)
        steps.setdefault(name, []).append(benchclock.cpu_us() - t)
    services.ota.service.load_parts()
    services.ota.service.release_parts()
for name in services.ota.service.LOAD_ORDER:
    steps[name].sort()
    print("@@STEP@@", name, steps[name][2])
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--src", help="CircuitPython source tree (or CIRCUITPY_SRC)")
    ap.add_argument("--resident", help="a bench.bench_device --json file: its resident set is imported first")
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--py", action="store_true", help="the firmware as .py files (compiled on import, as the device "
                                                      "bench's standard load runs it), not .mpy")
    args = ap.parse_args()
    binary = build(source_tree(args.src or os.environ.get("CIRCUITPY_SRC")))
    resident = ["core.settings", "core.supervisor", "services.api.service"]
    if args.resident:
        with open(args.resident) as f:
            resident = [name for name, _cost in json.load(f)["resident_costs"]]
    root = stage(binary, firmware_mpy=not args.py)
    try:
        script = SCRIPT % {"loops": 20000, "resident": resident, "parts": [(p[1], p[2]) for p in PARTS]}
        res = subprocess.run([binary, "-c", script], cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, timeout=600)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    stones, took, steps = None, {}, []
    for line in res.stdout.splitlines():
        if line.startswith("@@PYSTONES@@"):
            stones = float(line.split()[1])
        elif line.startswith("@@PART@@"):
            _, i, us = line.split()
            took[int(i)] = int(us)
        elif line.startswith("@@STEP@@"):
            _, name, us = line.split()
            steps.append((name, int(us)))
        elif line.startswith("@@SKIP@@"):
            print("  not imported:", line[9:])
    if stones is None or len(took) < len(PARTS):
        raise SystemExit("the bench interpreter failed:\n" + res.stdout[-3000:])
    factor = stones / S3_PYSTONES
    print("loading each on-demand part as %s, %d resident modules imported first (S3 ms at %d pystones/s; this "
          "interpreter %d pystones/s, median of 5):" % (".py" if args.py else ".mpy", len(resident), S3_PYSTONES,
                                                        stones))
    out = {"pystones": stones, "resident_modules": len(resident), "form": "py" if args.py else "mpy", "parts": {}}
    for i, (what, _stmt, _names) in enumerate(PARTS):
        ms = took[i] * factor / 1000
        out["parts"][what] = round(ms, 1)
        print("  %7.1f  %s" % (ms, what))
    print("  the OTA's load_step(), one part per poll:")
    out["ota_load_step"] = {}
    for name, us in steps:
        out["ota_load_step"][name] = round(us * factor / 1000, 1)
        print("  %7.1f  %s" % (us * factor / 1000, name))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
