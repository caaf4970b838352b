# Meter Plus device bench variant: the coverage variant's modules, 32-bit, optimised, nothing frozen.
# OBJ_REPR_C stores a float in a 32-bit object word, so the build must be 32-bit like the ESP32-S3.
MICROPY_FORCE_32BIT := 1
# ffi would need a 32-bit libffi; the firmware never uses it.
MICROPY_PY_FFI := 0
# ulab is not in the firmware's imports; leaving it out keeps the submodule list short.
CIRCUITPY_ULAB := 0
# The coverage variant freezes test modules and micropython-lib; the firmware is loaded from files instead.
FROZEN_MANIFEST :=
# Optimised like a device build (the coverage variant defaults to -Og with gcov counters, which skews poll times).
DEBUG := 0
include $(TOP)/ports/unix/variants/coverage/mpconfigvariant.mk
CFLAGS := $(filter-out -fprofile-arcs -ftest-coverage,$(CFLAGS))
LDFLAGS := $(filter-out -fprofile-arcs -ftest-coverage,$(LDFLAGS))
# The audio/synth modules assume double floats; with single floats they only warn (CFLAGS_EXTRA comes after CWARN).
CFLAGS_EXTRA += -Wno-double-promotion -Wno-float-conversion
# coveragecpp.cpp only checks that the headers compile as C++; its undefined stubs do not link in a 32-bit build.
SRC_CXX := $(filter-out coveragecpp.cpp,$(SRC_CXX))
