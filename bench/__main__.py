"""make bench: run every bench/bench_*.py in turn; each prints its figures and one summary line."""

import glob
import importlib
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def main(argv):
    sys.path.insert(0, os.path.join(ROOT, "host", "cp"))
    sys.path.append(ROOT)
    names = sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(HERE, "bench_*.py")))
    if argv:
        names = [n for n in names if any(a in n for a in argv)]
    failed = []
    summaries = []
    for name in names:
        print("== %s" % name, flush=True)
        t0 = time.monotonic()
        try:
            mod = importlib.import_module("bench." + name)
            line = mod.main()
        except Exception as exc:  # one broken bench must not hide the others' figures
            failed.append(name)
            print("%s FAILED: %s: %s" % (name, type(exc).__name__, exc), flush=True)
            continue
        if line:
            summaries.append(line)
        print("   (%.1f s)" % (time.monotonic() - t0), flush=True)
    print("== summary")
    for line in summaries:
        print(line)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
