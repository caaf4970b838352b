"""What an emulated meter reports, from the latest reading: total and per-phase power, voltages, currents, the
two energy totals, all exact decimals (mantissa, exp10) in W, V, A, Hz and Wh; None once the reading is stale."""

from core.elapsed import fresh

STALE_MS = 10000   # older than this, an emulation answers no power at all: a battery must not regulate on old data

_ZERO = (0, 0)


def _neg(v):
    return (-v[0], v[1])


def _sub(a, b):
    """a - b on exact decimals."""
    if a[1] == b[1]:
        return (a[0] - b[0], a[1])
    if a[1] < b[1]:
        return (a[0] - b[0] * 10 ** (b[1] - a[1]), a[1])
    return (a[0] * 10 ** (a[1] - b[1]) - b[0], b[1])


class MeterView:
    """One fresh reading as a three-phase meter sees it. power: W, import positive; phases: 3 powers (the total on
    phase a and 0 on b and c when the meter sends no per-phase power: phase_split False); voltage/current: 3 values
    or None each; frequency, import_wh, export_wh: (m, e) or None; ts_ms: the reading's ticks."""

    __slots__ = ("ts_ms", "power", "phases", "phase_split", "voltage", "current", "frequency", "import_wh",
                 "export_wh")

    def __init__(self, ts_ms, values):
        self.ts_ms = ts_ms
        get = values.get
        power = get("16.7.0")
        if power is None and get("1.7.0") is not None:
            power = _sub(get("1.7.0"), get("2.7.0") or _ZERO)   # import and export power as one signed value
        # Signed per-phase power only: an import-only share per phase (21.7.0...) would hide export on that phase.
        # Three gets, not tuple(generator): a generator object a tuple (built for every reading's push)
        phases = (get("36.7.0"), get("56.7.0"), get("76.7.0"))
        self.phase_split = None not in phases
        if power is None and self.phase_split:
            power = _sub(_sub(phases[0], _neg(phases[1])), _neg(phases[2]))
        self.power = power
        if not self.phase_split:
            phases = (power, _ZERO, _ZERO) if power is not None else None
        self.phases = phases
        self.voltage = (get("32.7.0"), get("52.7.0"), get("72.7.0"))
        self.current = (get("31.7.0"), get("51.7.0"), get("71.7.0"))
        self.frequency = get("14.7.0")
        self.import_wh = get("1.8.0")
        self.export_wh = get("2.8.0")


def view(reading, now_ms, energy_floor=None, stale_ms=STALE_MS):
    """The MeterView of reading, or None when there is none or it is stale_ms old (or from the future)."""
    if reading is None or not fresh(reading.ts_ms, now_ms, stale_ms):
        return None
    values = energy_floor.filter(reading.values) if energy_floor is not None else reading.values
    return MeterView(reading.ts_ms, values)
