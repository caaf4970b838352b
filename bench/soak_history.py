"""Soak: 1000 power cuts (SIGKILL of `python -m host`) over simulated weeks; history must stay readable and ordered.

Run: .venv/bin/python -m bench.soak_history [N] [--speed S] [--seed K]   (about 3.5 s per cut; 1000 cuts ~ 1 h)
"""

import argparse
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m bench.soak_history", description=__doc__)
    p.add_argument("kills", nargs="?", type=int, default=1000)
    p.add_argument("--speed", type=float, default=3600.0)
    p.add_argument("--seed", type=int, default=int(time.time()))
    p.add_argument("--up", type=float, nargs=2, default=(0.8, 4.0), metavar=("MIN", "MAX"),
                   help="seconds of real time the firmware runs before each cut (uniform; default 0.8 4.0)")
    p.add_argument("--keep", action="store_true", help="keep the drive folder for inspection")
    args = p.parse_args(argv)
    sys.path[:0] = [os.path.join(ROOT, "host", "cp"), ROOT]
    from tests import history_powercut

    work = tempfile.mkdtemp(prefix="soak-history-")
    t0 = time.monotonic()
    print("soak: %d cuts at --speed %g, seed %d, drive %s" % (args.kills, args.speed, args.seed, work), flush=True)
    try:
        stats = history_powercut.run(args.kills, work, speed=args.speed, seed=args.seed, up_s=tuple(args.up),
                                     log=lambda m: print(m, flush=True))
    except history_powercut.Failure as exc:
        print("soak FAILED: %s (drive kept in %s)" % (exc, work), flush=True)
        return 1
    print("soak: %d cuts in %.0f s, %.1f simulated days, %d quarter hours on flash, lost per cut max %d"
          " (batch bound %d), %d lost in all, %d snapshots compared" % (
              stats["kills"], time.monotonic() - t0, stats["sim_days"], stats["records"], stats["lost_max"],
              history_powercut.BATCH_MAX, stats["lost_total"], stats["snapshots"]), flush=True)
    if not args.keep:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
