"""core.heap.FreeHeap: gc.mem_free() read at most once a second, wrap-safe."""

from core.heap import FreeHeap
from tests.steppedclock import SteppedClock


def test_read_at_most_once_a_second_and_again_after_it():
    clock = SteppedClock()
    reads = []

    def mem_free():
        reads.append(clock())
        return 1000 - len(reads)

    heap = FreeHeap(mem_free, clock)
    assert heap() == 999 and heap() == 999
    clock.advance(999)
    assert heap() == 999 and len(reads) == 1
    clock.advance(1)
    assert heap() == 998 and len(reads) == 2


def test_a_reading_older_than_the_tick_wrap_is_read_again():
    clock = SteppedClock()
    values = iter((10, 20))
    heap = FreeHeap(lambda: next(values), clock)
    assert heap() == 10
    clock.advance((1 << 29) - 500)      # ticks_diff would place the old reading 500 ms in the future
    assert heap() == 20
