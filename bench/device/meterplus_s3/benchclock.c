// benchclock.cpu_us(): this process's CPU time in microseconds (CLOCK_PROCESS_CPUTIME_ID). The device bench times
// pystone and the firmware's steps with it, so a busy 2-core machine (other processes taking the CPU away mid-step)
// does not show up as firmware time; wall time would count every preemption as work.
#include <time.h>

#include "py/obj.h"
#include "py/runtime.h"

static mp_obj_t benchclock_cpu_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    // Small ints hold 30 bits here: wrap like ticks (runner.py takes differences modulo 2**30).
    mp_uint_t us = (mp_uint_t)ts.tv_sec * 1000000u + (mp_uint_t)(ts.tv_nsec / 1000);
    return MP_OBJ_NEW_SMALL_INT(us & ((1u << 30) - 1));
}
static MP_DEFINE_CONST_FUN_OBJ_0(benchclock_cpu_us_obj, benchclock_cpu_us);

static const mp_rom_map_elem_t benchclock_globals_table[] = {
    { MP_ROM_QSTR(MP_QSTR___name__), MP_ROM_QSTR(MP_QSTR_benchclock) },
    { MP_ROM_QSTR(MP_QSTR_cpu_us), MP_ROM_PTR(&benchclock_cpu_us_obj) },
};
static MP_DEFINE_CONST_DICT(benchclock_globals, benchclock_globals_table);

const mp_obj_module_t benchclock_module = {
    .base = { &mp_type_module },
    .globals = (mp_obj_dict_t *)&benchclock_globals,
};

MP_REGISTER_MODULE(MP_QSTR_benchclock, benchclock_module);
