"""Tariff costs in ESP32-S3 ms (issue 29 point 5, "the loop never stalls"): the pieces of work the tariff adds to a
poll or a request, timed on CircuitPython's unix port (the device bench's interpreter, bench/bench_device.py) in
its CPU time and scaled by its pystones to the S3's 1,000 pystones/s.

  python -m bench.bench_tariff --src /path/to/circuitpython     (or CIRCUITPY_SRC=...; make bench-device's tree)

Figures: one 256-byte chunk of a day-ahead answer parsed (the most a fetch does in one poll), the whole
energy-charts answer (196 prices), booking one quarter hour (dynamic price + markups), /api/v1/cost's reads (a
year of day records and a day of quarter hours from a full history file, summed), and the start's replay of a
month of quarter hours into the peaks."""

import argparse
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "host", "cp"), ROOT]

from bench.bench_device import Skip, build, source_tree, stage  # noqa: E402
from services.history import store as hs  # noqa: E402
from tests.price_server import ENERGY_CHARTS, HERE  # noqa: E402

S3_PYSTONES = 1000

SCRIPT = r"""
import sys
sys.path[:0] = ["hw", ".", "lib"]
import benchclock
from s3_clock import pystone_samples

per_s = pystone_samples(20000)[1]
factor = per_s / @S3@
out = {"pystones": per_s}


def timed(name, fn, n=1):
    worst = 0
    total = 0
    for _ in range(n):
        t = benchclock.cpu_us()
        fn()
        d = benchclock.cpu_us() - t
        total += d
        if d > worst:
            worst = d
    out[name] = (round(worst * factor / 1000, 1), round(total * factor / 1000 / n, 1))


from services.tariff.prices import PriceBook, PriceParser
from services.tariff.tariff import Tariff
from services.tariff import peaks as pk
from services.tariff import routes as tr
from services.history import store as hs

with open("ec.json", "rb") as f:
    body = f.read()
chunks = [body[i:i + 256] for i in range(0, len(body), 256)]
worst = 0
t_all = benchclock.cpu_us()
q = PriceParser()
for c in chunks:
    t = benchclock.cpu_us()
    q.write(c)
    d = benchclock.cpu_us() - t
    worst = d if d > worst else worst
rows = q.finish()
out["parse_256_bytes"] = (round(worst * factor / 1000, 1), None)
out["parse_whole_answer"] = (round((benchclock.cpu_us() - t_all) * factor / 1000, 1), None)

book = PriceBook(lambda d: d * 86400)
book.merge(rows, -10 ** 6, 10 ** 6, lambda t: t // 86400)


class S:
    v = {"tariff.mode": "dynamic", "tariff.surcharge": "0.1532", "tariff.vatPercent": "19"}

    def get(self, k, d=None):
        return self.v.get(k, d)


tariff = Tariff(S(), book)
rec = (0, rows[40][0], rows[40][0] // 86400, 0, 60, 0, 10 ** 9, 0, 2500, 0, 0, 0)
timed("book_quarter", lambda: tariff.book_quarter(rec), 50)

st = hs.HistoryStore("h.bin")
st.scan()
last = st.lr.last[2]


def stepped(name, gen, per_step=1):
    # worst time between two returns to the loop (a None from a ticking reader), and the whole
    worst = 0
    total = 0
    n = 0
    t = benchclock.cpu_us()
    for r in gen:
        if r is None:
            n += 1
            if n % per_step == 0:
                d = benchclock.cpu_us() - t
                total += d
                worst = d if d > worst else worst
                t = benchclock.cpu_us()
    d = benchclock.cpu_us() - t
    total += d
    worst = d if d > worst else worst
    out[name] = (round(worst * factor / 1000, 1), "whole %s" % round(total * factor / 1000, 1))


def summed(gen):
    acc = tr.Sums()
    for r in gen:
        if r is not None:
            acc.add(r)
        yield r


stepped("cost_year_days_step", summed(st.records(hs.LR, 0xFFFFFFFF, last - 365, last + 1, True)))
stepped("cost_day_step", summed(st.records(hs.HR, 0xFFFFFFFF, last, last + 1, True)))
peaks = pk.Peaks()


def fed(gen):
    for r in gen:
        if r is not None:
            peaks.quarter(r)
        yield r


stepped("peaks_replay_poll", fed(st.records(hs.HR, 0xFFFFFFFF, first_day=pk.month_first_day(pk.month_of(last)),
                                            ticks=True)), 2)
import json
print("@@TARIFF@@ " + json.dumps(out))
"""


def history_file(path):
    """A full history file: 3000 quarter hours (31 days, priced) and 732 days, as the device would have."""
    st = hs.HistoryStore(path)
    st.open()
    day0 = 20600
    t0 = day0 * 86400
    hr = [(0, t0 + 900 * i, day0 + i // 96, 0, 60, hs.F_IC | hs.F_EC, 10 ** 9 + 2500 * i, 0, 2500, 0, 7500, 0)
          for i in range(3000)]
    lr = [(0, (day0 - 700 + i) * 86400, day0 - 700 + i, 96, 60, hs.F_IC, 10 ** 9, 0, 240000, 0, 720000, 0)
          for i in range(732)]
    st.write(hr, lr)


def main(argv=()):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--src", default=os.environ.get("CIRCUITPY_SRC"), help="CircuitPython source tree")
    args = ap.parse_args(list(argv))
    try:
        binary = build(source_tree(args.src))
    except Skip as exc:
        print("tariff bench skipped: %s" % exc)
        return 0
    root = stage(binary)
    try:
        shutil.copy(os.path.join(HERE, ENERGY_CHARTS), os.path.join(root, "ec.json"))
        history_file(os.path.join(root, "h.bin"))
        with open(os.path.join(root, "tariff_bench.py"), "w") as f:
            f.write(SCRIPT.replace("@S3@", str(S3_PYSTONES)))
        res = subprocess.run([binary, "-X", "heapsize=1024k", "tariff_bench.py"], cwd=root, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, timeout=600)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    line = [ln for ln in res.stdout.splitlines() if ln.startswith("@@TARIFF@@ ")]
    if not line:
        print(res.stdout[-3000:])
        return 1
    import json
    out = json.loads(line[0][11:])
    print("tariff work on CircuitPython's unix port (%d pystones/s here), in ESP32-S3 ms at %d pystones/s "
          "(worst slice between two returns to the loop; the whole or the mean in brackets):"
          % (out.pop("pystones"), S3_PYSTONES))
    for k, (worst, mean) in sorted(out.items()):
        print("  %-22s %8s  %s" % (k, worst, "" if mean is None else "(%s)" % mean))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
