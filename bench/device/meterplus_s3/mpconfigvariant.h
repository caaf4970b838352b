// Meter Plus device bench: CircuitPython's unix "coverage" variant (CircuitPython's own struct, traceback,
// zlib, settings.toml ...) with the ESP32-S3's number model: 32-bit words (built with MICROPY_FORCE_32BIT),
// object representation C (30-bit floats stored in the object word) and single-precision float arithmetic.
#define MICROPY_OBJ_REPR               (MICROPY_OBJ_REPR_C)
#define MICROPY_FLOAT_IMPL             (MICROPY_FLOAT_IMPL_FLOAT)
#include "variants/coverage/mpconfigvariant.h"

// One heap area of -X heapsize, as big as the heap the device grew to: CircuitPython 10 on the S3 adds areas that
// double the total when an allocation fails after a collection (py/gc.c gc_try_add_heap), so a run that completes
// in a fixed heap of one of those sizes is a run in which the device's heap stops there (bench_device.py tries the
// sizes). Growing here too (MICROPY_GC_SPLIT_HEAP_AUTO) was tried: the unix build then failed an assertion in
// py/qstr.c now and then. No gc.threshold(): CircuitPython has none.
#undef MICROPY_GC_SPLIT_HEAP_N_HEAPS
#define MICROPY_GC_SPLIT_HEAP_N_HEAPS  (1)
#define MICROPY_GC_ALLOC_THRESHOLD     (0)
