// Stands in for coveragecpp.cpp (left out, see mpconfigvariant.mk): main.c of the coverage build registers it.
#include "py/runtime.h"

static mp_obj_t extra_cpp_coverage(void) {
    return mp_const_none;
}
MP_DEFINE_CONST_FUN_OBJ_0(extra_cpp_coverage_obj, extra_cpp_coverage);
