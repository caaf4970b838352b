"""Soak: SIGKILL `python -m host --app-on-drive` at random moments of an update (download, boot.py's switch, the
trial) N times; after each cut the drive must boot a whole old or new application with the settings intact.

Run: .venv/bin/python -m bench.soak_ota [N] [--seed K]   (about 4 s per cut; 100 cuts ~ 7 min)
"""

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m bench.soak_ota", description=__doc__)
    p.add_argument("cuts", nargs="?", type=int, default=100)
    p.add_argument("--seed", type=int, default=int(time.time()))
    args = p.parse_args(argv)
    sys.path[:0] = [os.path.join(ROOT, "host", "cp"), ROOT]
    from tests import ota_powercut

    t0 = time.monotonic()
    print("soak: %d cuts during an update, seed %d" % (args.cuts, args.seed), flush=True)
    try:
        stats = ota_powercut.run(args.cuts, seed=args.seed, log=lambda m: print(m, flush=True))
    except ota_powercut.Failure as exc:
        print("soak FAILED: %s" % exc, flush=True)
        return 1
    print("soak: %d cuts in %.0f s, all booted a whole version; where the cuts landed:" % (
        args.cuts, time.monotonic() - t0), flush=True)
    for (landing, version), n in sorted(stats.items()):
        print("  %4d  %-32s -> %s runs" % (n, landing, version), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
