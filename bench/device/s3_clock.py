"""The device bench's conversion to ESP32-S3 time, run on CircuitPython's unix port: this interpreter's pystones
per second in its CPU time; work that takes t here takes t * (pystones here / the S3's 1,000) on the chip."""
import sys

import benchclock


class CpuTime:
    """pystone_lowmem's utime: ticks_ms in this process's CPU time (benchclock), like the firmware's steps."""

    @staticmethod
    def ticks_ms():
        return benchclock.cpu_us() // 1000

    @staticmethod
    def ticks_diff(a, b):
        return (a - b) % ((1 << 30) // 1000)


def pystone_samples(loops):
    """Three pystones-per-second runs (micropython-pystone_lowmem 3.4.2-4) in CPU time, sorted: [1] is the median.
    Run on a clean heap: pystone allocates, and in a filled heap it would measure the collector."""
    sys.modules["utime"] = CpuTime        # pystone_lowmem's import name of time
    import pystone_lowmem

    return sorted(pystone_lowmem.pystones(loops)[1] for _ in range(3))
