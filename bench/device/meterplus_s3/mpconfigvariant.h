// Meter Plus device bench: CircuitPython's unix "coverage" variant (CircuitPython's own struct, traceback,
// zlib, settings.toml ...) with the ESP32-S3's number model: 32-bit words (built with MICROPY_FORCE_32BIT),
// object representation C (30-bit floats stored in the object word) and single-precision float arithmetic.
#define MICROPY_OBJ_REPR               (MICROPY_OBJ_REPR_C)
#define MICROPY_FLOAT_IMPL             (MICROPY_FLOAT_IMPL_FLOAT)
#include "variants/coverage/mpconfigvariant.h"
