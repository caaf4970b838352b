"""ctRatio changes through the real chain (pipeline -> bus -> history, energy floor): energies are raw delta x the
ratio in force, published totals never jump, fall or go missing; raise, lower, during a gap, across a restart."""


import pytest

from core.bus import Bus
from core.durable_file import remove_all, stored
from core.json_store import read_json_file
from core.settings import Settings
from core.tz import days_from_civil
from meter.decimal import rescale, sub
from services.history import store as hs
from services.history.service import History
from services.history.store import HR, LR, HistoryStore
from services.metering.energy_floor import EnergyFloor
from services.metering.pipeline import MeterPipeline
from services.metering.register import EnergyRegister, scale
from tests.history_fakes import FakeClock, FakeSettings
from tests.test_history_store import ListLog

SID = b"\x0a\x01SMT\x00\x00\x00\x04\xd2"
REGISTER = "register.json"


def berlin_midnight(y, m, d):
    clock = FakeClock(0)
    u = days_from_civil(y, m, d) * 86400
    return u - clock.offset_min(u - 3600) * 60


def dwh(v):
    """0.1 Wh of an exact (m, e) in Wh, rounded as the history rounds."""
    return rescale(v[0], v[1], -1)[0]


class Device:
    """A meter counting raw 0.1 Wh, the real pipeline (median off unless asked) with a register on the drive, the
    real history on the same bus; one reading every `step` s. `expected` sums raw delta x the ratio in force."""

    def __init__(self, start_utc, ct=1, raw_imp=123_456_789_0, raw_exp=55_555_0, median=0, log=None):
        self.log = log or ListLog()
        self.raw_imp = raw_imp
        self.raw_exp = raw_exp
        self.clock = FakeClock(start_utc)
        self.settings = Settings()
        self.settings.doc.update({"ctRatio": ct, "medianFilterSize": median})
        self.ms = 0
        self.expected_imp = 0      # 0.1 Wh x 10 (tenths of the ratio): exact
        self.published = []        # (utc, 1.8.0, 2.8.0) of every reading on the bus
        self.floor = EnergyFloor()
        self.held_back = 0
        self.boot()

    def boot(self):
        """A start (or restart) of the firmware on the same drive."""
        self.bus = Bus()
        self.readings = self.bus.subscribe("reading", 64)
        self.pipe = MeterPipeline(self.bus, self.settings, None, register=EnergyRegister(REGISTER, self.log))
        self.pipe.start()
        self.h = History(self.bus, self.clock, FakeSettings({}), HistoryStore("history.bin", log=self.log),
                         log=self.log)
        self.h.start()

    def set_ct(self, ct):
        self.settings.doc["ctRatio"] = ct
        self.bus.publish("settings", ["ctRatio"])

    def run(self, seconds, import_w=1800, export_w=360, step=5, meter=True):
        for _ in range(seconds // step):
            self.clock.utc += step
            self.ms += step * 1000
            self.pipe.poll(self.ms)
            d_imp = import_w * step * 10 // 3600
            self.raw_imp += d_imp
            self.raw_exp += export_w * step * 10 // 3600
            if meter:
                self.expected_imp += d_imp * self.pipe.ct_tenths
                values = {"1.8.0": (self.raw_imp, -1), "2.8.0": (self.raw_exp, -1), "16.7.0": (import_w, 0)}
                self.pipe.accept(values, SID, "sml", self.ms)
            self.h.poll(self.ms)
            while len(self.readings):
                r = self.readings.pop()
                if r is None:
                    continue              # the meter went stale (a gap): unknown, not a value
                v = r.values
                self.published.append((self.clock.utc, v["1.8.0"], v["2.8.0"]))
                held = self.floor.filter(v)
                self.held_back += ("1.8.0" not in held) + ("2.8.0" not in held)

    def hr(self):
        return list(self.h.store.records(HR)) + list(self.h.hr)

    def lr(self):
        return list(self.h.store.records(LR)) + list(self.h.lr)


@pytest.fixture(autouse=True)
def drive(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def steps_of(published, code_index=1):
    """Increase of a published total from each reading to the next, exact (m, e)."""
    out = []
    for a, b in zip(published, published[1:]):
        out.append(sub(b[code_index][0], b[code_index][1], a[code_index][0], a[code_index][1]))
    return out


def as_tenth_wh(v):
    m, e = v
    return m * 10 ** (e + 1) if e >= -1 else m / 10 ** (-e - 1)


@pytest.mark.parametrize("old,new", [(1, 3), (1, 2), (2.5, 1), (1, 10000), (10000, 1), (3, 2.5)])
def test_a_change_on_a_running_device_books_only_energy_that_was_consumed(old, new):
    t0 = berlin_midnight(2026, 6, 10)
    dev = Device(t0 + 300, ct=old)
    dev.run(5)
    p0 = dev.published[-1][1]
    dev.expected_imp = 0                 # from the first reading on: raw delta x ratio in force, in 0.01 Wh
    dev.run(3600)
    dev.set_ct(new)
    dev.run(3600)
    dev.h.flush()
    last = dev.published[-1][1]
    d = sub(last[0], last[1], p0[0], p0[1])
    assert rescale(d[0], d[1], -2)[0] == dev.expected_imp        # the totals: exactly the energy counted
    assert all(inc[0] >= 0 for inc in steps_of(dev.published))   # never a drop (lowered ratio)
    big = max(old, new)
    assert max(as_tenth_wh(inc) for inc in steps_of(dev.published)) <= 25 * big   # never a jump (raised ratio)
    hr = dev.hr()
    assert max(r[8] for r in hr) <= 4500 * big + 1                # a quarter hour: 1800 W x 15 min at most
    assert not any(r[5] & hs.F_REBASE for r in hr)
    assert dev.held_back == 0                                     # REST and MQTT never hid a total
    assert sum(r[8] for r in hr) == hr[-1][6] - (hr[0][6] - hr[0][8])
    for r in dev.lr() + [dev.h._day_rec(dev.h._day)]:
        assert r[8] == sum(q[8] for q in hr if q[2] == r[2])      # days: the sum of their quarter hours
    assert dev.pipe.ct_tenths == round(new * 10)


def test_raise_one_to_three_as_reported_keeps_quarter_and_day_energies_real():
    t0 = berlin_midnight(2026, 6, 10)
    dev = Device(t0 + 60, ct=1)
    dev.run(2 * 3600)
    dev.set_ct(3)
    dev.run(2 * 3600)
    hr = dev.hr()
    # 1800 W: 450 Wh a quarter hour at ratio 1, 1350 Wh at ratio 3 (in 0.1 Wh); the quarter of the change between.
    energies = [r[8] for r in hr[1:]]
    assert set(energies) <= set(range(4500, 13501))
    assert energies[:6] == [4500] * 6 and energies[-6:] == [13500] * 6
    day = [r for r in dev.lr()] or [dev.h._day_rec(dev.h._day)]
    assert day[-1][8] == sum(r[8] for r in hr)     # the day: real energy, not 24,699 kWh


def test_lowering_never_hides_the_totals_from_rest_and_mqtt():
    t0 = berlin_midnight(2026, 6, 10)
    dev = Device(t0 + 60, ct=2.5)
    dev.run(600)
    before = dev.published[-1][1]
    dev.set_ct(1)
    dev.run(600)
    after = dev.published
    assert dev.held_back == 0
    first_after = [p for p in after if p[0] > after[0][0] + 600][0][1]
    assert sub(first_after[0], first_after[1], before[0], before[1])[0] > 0     # continues, does not fall
    inc = steps_of(after)[-1]
    assert rescale(inc[0], inc[1], -1) == (25, -1)  # 1800 W x 5 s = 2.5 Wh raw, x 1


def test_a_change_during_a_gap_counts_the_gap_at_the_new_ratio():
    t0 = berlin_midnight(2026, 6, 10)
    dev = Device(t0 + 60, ct=1)
    dev.run(1800)
    last = dev.published[-1][1]
    dev.run(1800, meter=False)                     # the meter is silent (head fell off) ...
    dev.set_ct(2)                                  # ... and the ratio is corrected meanwhile
    dev.run(900, meter=False)
    raw_gap = 2700 * 1800 * 10 // 3600             # 0.1 Wh the meter counted while silent
    dev.run(5)
    first = dev.published[-1][1]
    step = sub(first[0], first[1], last[0], last[1])
    assert step == ((raw_gap + 25) * 2, -1)        # the gap's raw energy x the new ratio, nothing more
    assert dev.held_back == 0
    dev.run(900)
    hr = dev.hr()
    gap = [r for r in hr if r[5] & hs.F_GAP]
    assert len(gap) == 1 and gap[0][8] <= (raw_gap + 4500) * 2


def test_a_change_survives_a_restart():
    t0 = berlin_midnight(2026, 6, 10)
    dev = Device(t0 + 60, ct=1)
    dev.run(1800)
    dev.set_ct(3)
    dev.run(1800)
    before = dev.published[-1][1]
    dev.h.stop()                                    # an orderly restart
    dev.boot()
    dev.run(10)
    after = dev.published[-1][1]
    assert sub(after[0], after[1], before[0], before[1]) == (150, -1)   # 2 x 2.5 Wh raw x 3, not a jump
    assert read_json_file(REGISTER)["codes"]["1.8.0"][0] == 30


def test_a_change_made_while_the_device_was_off_continues_from_the_first_reading():
    t0 = berlin_midnight(2026, 6, 10)
    dev = Device(t0 + 60, ct=1)
    dev.run(1800)
    before = dev.published[-1][1]
    dev.h.stop()
    dev.settings.doc["ctRatio"] = 4                 # settings.json edited over USB while the device was off
    dev.boot()
    dev.run(5)
    first = dev.published[-1][1]
    dev.run(5)
    second = dev.published[-1][1]
    assert sub(first[0], first[1], before[0], before[1]) == (25, -1)    # up to the first reading: old ratio
    assert sub(second[0], second[1], first[0], first[1]) == (100, -1)   # from there: 2.5 Wh x 4
    assert dev.held_back == 0
    assert not any(r[5] & hs.F_REBASE for r in dev.hr())


def test_a_new_meter_after_a_change_counts_raw_times_ratio_again():
    t0 = berlin_midnight(2026, 6, 10)
    dev = Device(t0 + 60, ct=1)
    dev.run(600)
    dev.set_ct(3)
    dev.run(600)
    dev.raw_imp = 1000                                   # a new meter (same id): far below the old base
    dev.run(15 * 10)                                     # the pipeline takes it as reset after 10 rejections
    v = dev.published[-1][1]
    assert v[0] > 0 and v == scale(dev.raw_imp, -1, 30)  # raw x 3, never negative
    assert dev.pipe.counters["rebased"] == 1


def test_median_filter_and_change_keep_the_totals_continuous():
    t0 = berlin_midnight(2026, 6, 10)
    dev = Device(t0 + 60, ct=1, median=5)
    dev.run(600)
    dev.set_ct(5)
    dev.run(600)
    incs = steps_of(dev.published)
    assert all(i[0] >= 0 for i in incs)
    assert max(as_tenth_wh(i) for i in incs) <= 25 * 5


def test_register_file_damage_is_counted_and_totals_fall_back_to_raw_times_ratio(drive):
    log = ListLog()
    with open(REGISTER, "w") as f:
        f.write('{"ct": 10, "codes": {"1.8.0": [30, "x", 0, 0, 0]}}')
    reg = EnergyRegister(REGISTER, log)
    reg.open(25)
    assert reg.load_errors == 1 and reg.default == 25 and reg.codes == {}
    assert "energy register register.json damaged" in log.text()
    assert reg.total("1.8.0", 1000, -1, 25) == (25000, -2)   # 100.0 Wh x 2.5
    assert read_json_file(REGISTER) == {"ct": 25, "codes": {}}   # rewritten whole
    for bad in ("", "null", "[]", '{"ct": 5, "codes": {}}', '{"ct": 10, "codes": {"1.8.0": [10, 1, 2, 3]}}',
                '{"ct": true, "codes": {}}', "{" * 50):
        remove_all(REGISTER)      # the damaged file alone (a complete copy beside it would be read instead)
        with open(REGISTER, "w") as f:
            f.write(bad)
        reg = EnergyRegister(REGISTER)
        reg.open(10)
        assert reg.load_errors == 1 and reg.codes == {} and reg.default == 10


def test_register_round_trips_and_writes_only_on_changes(drive, monkeypatch):
    reg = EnergyRegister(REGISTER)
    reg.open(10)
    writes = []
    import services.metering.register as mod
    real = mod.write_atomic
    monkeypatch.setattr(mod, "write_atomic", lambda p, d: (writes.append(d), real(p, d)))
    for raw in range(1000, 1100):
        reg.total("1.8.0", raw, -1, 10)
    assert writes == []                                   # readings never write the flash
    reg.change(10, 25, {"1.8.0": (1100, -1)})
    assert writes == [] and reg.dirty                     # the owner saves (the pipeline at its next poll)
    reg.save()
    reg.save()
    assert len(writes) == 1
    again = EnergyRegister(REGISTER)
    again.open(25)
    assert again.codes == reg.codes and again.default == 10
    assert again.total("1.8.0", 1200, -1, 25) == (1100 * 10 + 100 * 25, -2)   # 110.0 Wh + 10.0 Wh x 2.5


def test_a_refused_register_write_is_retried_not_lost(drive, monkeypatch):
    settings = Settings()
    settings.doc.update({"ctRatio": 1, "medianFilterSize": 0})
    reg = EnergyRegister(REGISTER)
    pipe = MeterPipeline(Bus(), settings, None, register=reg)
    pipe.start()
    pipe.accept({"1.8.0": (1000, -1)}, SID, "sml", 1000)
    import services.metering.register as mod
    real = mod.write_atomic

    def refuse(path, doc):
        raise OSError(30, "read-only")
    monkeypatch.setattr(mod, "write_atomic", refuse)
    settings.doc["ctRatio"] = 2
    pipe.bus.publish("settings", ["ctRatio"])
    pipe.poll(2000)
    assert reg.dirty and reg.write_errors == 1
    pipe.poll(3000)
    assert reg.write_errors == 1                          # not every poll: once a minute
    monkeypatch.setattr(mod, "write_atomic", real)
    pipe.poll(2000 + pipe.REGISTER_RETRY_MS)
    assert not reg.dirty and read_json_file(REGISTER)["codes"]["1.8.0"] == [20, 1000, -1, 1000, -1]
    assert stored(REGISTER)


def test_the_register_counts_the_same_inside_the_micropython_vm():
    from tools.mpvm import MicroVM
    script = [("total", "1.8.0", 1000 + i * 7, -1, 10) for i in range(5)]
    script += [("change", 10, 25, {"1.8.0": (1028, -1)})]
    script += [("total", "1.8.0", 1035 + i * 7, -1, 25) for i in range(5)]
    script += [("total", "2.8.0", 99, -1, 25), ("change", 25, 10000, {"1.8.0": (1063, -1)}),
               ("total", "1.8.0", 1070, -1, 10000), ("total", "1.8.0", 5, -1, 10000)]

    def play(reg):
        out = []
        for step in script:
            if step[0] == "total":
                out.append(reg.total(*step[1:]))
            else:
                reg.change(*step[1:])
        return out

    want = play(EnergyRegister())
    code = """
from services.metering.register import EnergyRegister
SCRIPT = %r
reg = EnergyRegister()
for step in SCRIPT:
    if step[0] == "total":
        print(repr(reg.total(*step[1:])))
    else:
        reg.change(*step[1:])
""" % (script,)
    with MicroVM(packages=("core", "meter", "services")) as vm:
        out, _fuel = vm.run(code)
    got = [eval(line) for line in out.strip().split("\n")]
    assert got == want
    assert want[-1] == scale(5, -1, 10000)          # below its raw base: a new counter, raw x ratio
