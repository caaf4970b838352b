"""History service: quarter hours and days from readings, DST days, gaps, ctRatio changes, batching, restarts."""

import binascii
import json
import os

import pytest

from core.bus import Bus
from core.tz import days_from_civil
from services.history import store as hs
from services.history.service import History
from services.history.store import HR, LR, HistoryStore
from services.system.lifecycle import Lifecycle
from tests.history_fakes import FakeClock, FakeSettings, reading
from tests.test_history_store import ListLog


def berlin_midnight(y, m, d):
    """UTC instant of local midnight in Berlin (no DST change happens at midnight there)."""
    clock = FakeClock(0)
    u = days_from_civil(y, m, d) * 86400
    return u - clock.offset_min(u - 3600) * 60


class Sim:
    """A meter, a clock and the service on one stepped timeline; energy in 0.1 Wh."""

    def __init__(self, start_utc, settings=None, store=None, log=None, imp=123_456_789_0, exp=0, made=True):
        self.bus = Bus()
        self.clock = FakeClock(start_utc)
        self.settings = FakeSettings(settings or {})
        self.log = log or ListLog()
        self.store = store or HistoryStore("history.bin", log=self.log)
        self.h = History(self.bus, self.clock, self.settings, self.store, log=self.log)
        self.ms = 0
        self.imp = imp
        self.exp = exp
        self.made = made
        self.h.start()
        self.finish_file()

    def finish_file(self):
        """With made: the file the start began is completed now (the tests of recording; the sliced making of the
        file is tested on its own with made=False)."""
        if self.made and self.h.store_ok:
            while not self.store.step():
                pass

    def run(self, seconds, step=10, import_w=900, export_w=0, meter=True):
        """Advance time; the meter counts energy all along but publishes readings only when meter is True."""
        for _ in range(seconds // step):
            self.clock.utc += step
            self.ms += step * 1000
            self.imp += import_w * step * 10 // 3600
            self.exp += export_w * step * 10 // 3600
            if meter:
                self.bus.publish("reading", reading(self.imp, self.exp, import_w - export_w))
            self.h.poll(self.ms)

    def restart(self):
        """A new service on the same drive (what a reset does): only what reached the file survives."""
        self.h = History(self.bus, self.clock, self.settings, HistoryStore("history.bin", log=self.log), log=self.log)
        self.store = self.h.store
        self.h.start()
        self.finish_file()

    def hr(self):
        return [r for r in self.store.records(HR)] + list(self.h.hr)

    def lr(self):
        return [r for r in self.store.records(LR)] + list(self.h.lr)


@pytest.fixture(autouse=True)
def drive(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_day_gives_96_quarter_hours_and_one_day_record():
    t0 = berlin_midnight(2026, 6, 10)
    sim = Sim(t0 - 5)
    start_imp = sim.imp
    sim.run(86400 + 900)
    day = days_from_civil(2026, 6, 10)
    recs = [r for r in sim.hr() if r[2] == day]
    assert len(recs) == 96
    assert [r[1] for r in recs] == [t0 + 900 * i for i in range(96)]
    assert all(r[3] == 900 and r[5] & hs.F_POWER for r in recs)
    assert recs[1][8] == 2250            # 900 W for a quarter hour = 225 Wh, in 0.1 Wh
    days = [r for r in sim.lr() if r[2] == day]
    assert len(days) == 1
    d = days[0]
    assert d[1] == t0 and d[4] == 120     # local midnight (CEST)
    assert d[6] == recs[0][6] - recs[0][8]            # totals at the start of the day
    assert d[8] == sum(r[8] for r in recs) == recs[-1][6] - d[6]
    assert recs[0][6] - recs[0][8] >= start_imp


@pytest.mark.parametrize("date,quarters", [((2026, 3, 29), 92), ((2026, 10, 25), 100), ((2026, 10, 26), 96)])
def test_dst_days_have_92_or_100_quarter_hours(date, quarters):
    t0 = berlin_midnight(*date)
    sim = Sim(t0 - 3600)
    sim.run(86400 + 3 * 3600, step=30)
    day = days_from_civil(*date)
    recs = [r for r in sim.hr() if r[2] == day]
    assert len(recs) == quarters
    assert recs[0][1] == t0
    lr = [r for r in sim.lr() if r[2] == day]
    assert lr[0][3] == quarters and lr[0][8] == sum(r[8] for r in recs)
    body = json.loads("".join(sim.h.high_res(day)()))
    assert body["count"] == quarters and body["items"][0]["date"].endswith("T00:00")
    assert body["items"][-1]["date"].endswith("T23:45")


def test_nothing_is_recorded_before_the_clock_is_synced():
    sim = Sim(None)
    sim.clock.utc = berlin_midnight(2026, 6, 10)
    sim.clock.synced = False
    sim.run(3600)
    assert sim.hr() == [] and sim.h.counters["unsynced"] == 360
    sim.clock.synced = True
    sim.run(1800)
    assert len(sim.hr()) >= 1 and sim.hr()[0][1] >= sim.clock.utc - 1800


def test_a_silent_meter_leaves_missing_records_and_no_energy_is_lost():
    t0 = berlin_midnight(2026, 6, 10)
    sim = Sim(t0 - 5)
    first_total = sim.imp
    sim.run(6 * 3600)
    sim.run(2 * 3600 + 7 * 60, meter=False)      # silent for 2 h 7 min: energy still flows
    sim.run(86400 - 8 * 3600 - 7 * 60 + 900)
    day = days_from_civil(2026, 6, 10)
    recs = [r for r in sim.hr() if r[2] == day]
    ts = [r[1] for r in recs]
    assert len(recs) == 96 - 8                   # quarters with no reading at all are missing, never zero
    assert all(r[8] > 0 for r in recs)
    back = [r for r in recs if r[5] & hs.F_GAP]
    assert len(back) == 1
    assert back[0][8] > 8 * 2250                 # the gap's energy arrives with the first record after it
    assert t0 + 6 * 3600 not in ts
    d = [r for r in sim.lr() if r[2] == day][0]
    assert d[8] == sum(r[8] for r in recs) == recs[-1][6] - d[6]
    assert d[6] - first_total <= 25 and d[5] & hs.F_GAP
    # The API marks the record that closes the gap with its length: the chart draws a gap, not a tall bar.
    import json

    body = json.loads("".join(sim.h.high_res(day)()))
    closing = [i for i in body["items"] if "gap_s" in i]
    assert [(i["timestamp"], i["gap_s"]) for i in closing] == [(back[0][1], 8 * 900)]


def test_device_off_over_midnight_closes_the_old_day_and_keeps_all_energy():
    t0 = berlin_midnight(2026, 6, 10)
    sim = Sim(t0 + 3600)
    sim.run(20 * 3600)
    sim.h.stop()                                  # orderly stop flushes
    sim.run(6 * 3600, meter=False)               # off for 6 h across midnight (the meter counts on)
    sim.restart()
    sim.run(6 * 3600)
    sim.h.flush()
    lr = sim.lr()
    d1, d2 = days_from_civil(2026, 6, 10), days_from_civil(2026, 6, 11)
    assert [r[2] for r in lr] == [d1]             # 11 June is still open
    open_day = sim.h._day
    assert open_day[0] == d2
    assert open_day[3] == lr[0][6] + lr[0][8]     # the new day starts where the old one ended
    hr = sim.hr()
    assert sum(r[8] for r in hr) == hr[-1][6] - (hr[0][6] - hr[0][8])
    after = [r for r in hr if r[2] == d2]
    assert after[0][5] & hs.F_GAP and after[0][8] > 4 * 4 * 2250   # the night's energy, not lost


def test_a_counter_that_goes_back_keeps_the_counted_energy_and_goes_on_from_the_new_base():
    t0 = berlin_midnight(2026, 6, 10)
    sim = Sim(t0 - 5)
    sim.run(3600 + 300)
    sim.h.flush()
    before = list(sim.store.records(HR))
    sim.bus.publish("settings", ["ctRatio"])     # a ratio change is the pipeline's (tests/test_ct_ratio_change.py):
    sim.imp = 1000                               # here a replaced meter starts near zero
    sim.run(1800, import_w=9000)
    after = list(sim.store.records(HR)) + sim.h.hr
    assert after[:len(before)] == before         # what was recorded stays as it was
    rebased = [r for r in after if r[5] & hs.F_REBASE]
    assert len(rebased) == 1
    assert 0 <= rebased[0][8] < 30000            # a quarter's energy, never negative, never the old total
    assert all(r[8] >= 0 for r in after)
    assert sim.h.counters["rebased"] == 1


def test_a_ctratio_message_alone_changes_nothing_in_the_history():
    t0 = berlin_midnight(2026, 6, 10)
    sim = Sim(t0 - 5)
    sim.run(1800)
    sim.bus.publish("settings", ["ctRatio"])     # the totals stay continuous (the pipeline's register)
    sim.run(1800)
    assert not any(r[5] & hs.F_REBASE for r in sim.hr()) and sim.h.counters["rebased"] == 0
    assert set(r[8] for r in sim.hr()[1:]) == {2250}


def test_huge_meter_times_largest_ctratio_fits_exactly():
    big = 1_000_000 * 1000 * 10 * 10000           # 1,000,000 kWh x ctRatio 10000, in 0.1 Wh
    t0 = berlin_midnight(2026, 6, 10)
    sim = Sim(t0 - 5, imp=big, exp=big // 3)
    sim.run(1800, import_w=40_000_000, export_w=1)
    sim.h.flush()
    r = list(sim.store.records(HR))[0]
    assert r[6] > 10 ** 14 and r[6] - r[8] >= big and r[7] >= big // 3
    body = json.loads("".join(sim.h.high_res(days_from_civil(2026, 6, 10))()), parse_float=str)
    assert body["items"][0]["import_total_kWh"] == "%d.%04d" % divmod(r[6], 10000)


def test_records_stay_in_ram_until_the_flush_interval_then_go_out_in_one_batch():
    t0 = berlin_midnight(2026, 6, 10)
    sim = Sim(t0 - 5, settings={"history.flushMinutes": 30})
    sim.run(29 * 60)
    assert list(sim.store.records(HR)) == [] and len(sim.h.hr) == 1
    sim.run(2 * 60)
    assert len(list(sim.store.records(HR))) == 2 and sim.h.hr == []
    assert sim.h.counters["flushes"] == 1


def test_an_invalid_flush_setting_is_reported_and_the_default_used():
    log = ListLog()
    sim = Sim(0, settings={"history.flushMinutes": 0}, log=log)
    assert sim.h.flush_ms == 60 * 60000 and "flushMinutes 0 invalid" in log.text()


@pytest.mark.parametrize("how", ["lifecycle_button", "lifecycle_reboot", "lifecycle_reset", "stop"])
def test_every_orderly_stop_flushes(how):
    t0 = berlin_midnight(2026, 6, 10)
    sim = Sim(t0 - 5)
    sim.run(40 * 60)
    assert list(sim.store.records(HR)) == []

    class Led:
        def set(self, *a):
            pass

    resets = []
    lc = Lifecycle(sim.bus, Led(), lambda: resets.append(1), flushables=[sim.h])
    if how == "lifecycle_button":
        sim.bus.publish("event", ("button", "short"))
        lc.poll(0)
    elif how == "lifecycle_reboot":
        lc.request_reboot("api")
    elif how == "lifecycle_reset":
        lc.factory_reset()
    else:
        sim.h.stop()
    assert len(list(sim.store.records(HR))) == 2


def test_a_power_cut_loses_at_most_the_unflushed_batch_and_day_records_are_rebuilt():
    t0 = berlin_midnight(2026, 6, 10)
    sim = Sim(t0 + 22 * 3600 + 1800, settings={"history.flushMinutes": 60})
    sim.run(3600 + 50 * 60)                       # past midnight: the day record of 10 June waits in RAM
    assert [r[2] for r in sim.h.lr] == [days_from_civil(2026, 6, 10)]
    assert list(sim.store.records(LR)) == []
    sim.h.flush()
    flushed = list(sim.store.records(HR))
    with open("history.bin", "r+b") as f:         # the cut tore the day record; the quarter hours made it
        f.seek(sim.store.lr.offset(0))
        f.write(bytes(hs.REC_SIZE))
    sim.run(20 * 60)                              # more quarter hours in RAM, then the cut
    unflushed = len(sim.h.hr)
    assert unflushed > 0
    sim.restart()
    kept = list(sim.store.records(HR))
    assert kept == flushed                        # exactly the unflushed batch is gone
    assert [r[2] for r in sim.h.lr] == [days_from_civil(2026, 6, 10)]   # rebuilt from the quarter hours
    day10 = [r for r in kept if r[2] == days_from_civil(2026, 6, 10)]
    assert sim.h.lr[0][8] == sum(r[8] for r in day10)
    sim.run(3600)                                 # carries on; the lost quarters' energy lands in the next one
    hr = sim.hr()
    assert sum(r[8] for r in hr) == hr[-1][6] - (hr[0][6] - hr[0][8])


@pytest.mark.parametrize("damage", ["truncated", "random", "older", "missing"])
def test_a_damaged_file_at_boot_is_logged_kept_where_readable_and_recording_goes_on(damage):
    t0 = berlin_midnight(2026, 6, 10)
    sim = Sim(t0 - 5)
    sim.run(3 * 3600)
    sim.h.flush()
    n = len(list(sim.store.records(HR)))
    size = os.path.getsize("history.bin")
    if damage == "truncated":
        with open("history.bin", "r+b") as f:
            f.truncate(hs.HEADER_SIZE + 5 * hs.REC_SIZE + 20)
        keep = 5
    elif damage == "random":
        with open("history.bin", "wb") as f:
            f.write(os.urandom(size))
        keep = 0
    elif damage == "older":
        h = bytearray(hs.header_bytes(hs.HR_CAP, hs.LR_CAP))
        h[4:6] = b"\x00\x00"                    # format version 0
        h[-4:] = (binascii.crc32(bytes(h[:-4])) & 0xFFFFFFFF).to_bytes(4, "little")
        with open("history.bin", "r+b") as f:
            f.write(h)
        keep = 0
    else:
        os.remove("history.bin")
        keep = 0
    sim.log.entries.clear()
    sim.restart()
    assert sim.log.entries, "the damage is logged"
    assert sim.store.status == {"truncated": "extended", "random": "header", "older": "replaced",
                                "missing": "created"}[damage]
    assert len(list(sim.store.records(HR))) == keep <= n
    sim.run(2 * 3600)
    sim.h.flush()
    recs = list(sim.store.records(HR))
    assert len(recs) >= keep + 7
    assert [r[1] for r in recs] == sorted(set(r[1] for r in recs))


def test_clock_stepping_back_never_records_a_quarter_twice():
    t0 = berlin_midnight(2026, 6, 10)
    sim = Sim(t0 - 5)
    sim.run(3600)
    sim.clock.utc -= 1800
    sim.run(3600)
    ts = [r[1] for r in sim.hr()]
    assert ts == sorted(set(ts)) and sim.h.counters["clock_behind"] > 0


def test_a_read_only_drive_keeps_records_in_ram_and_warns(monkeypatch):
    import builtins

    t0 = berlin_midnight(2026, 6, 10)
    sim = Sim(t0 - 5, settings={"history.flushMinutes": 120})
    sim.run(3600 + 60)
    real_open = builtins.open

    def read_only(path, mode="r", *a, **k):
        if "+" in mode or "w" in mode:
            raise OSError(30, "Read-only filesystem")   # what CircuitPython says while USB owns the drive
        return real_open(path, mode, *a, **k)

    monkeypatch.setattr(builtins, "open", read_only)
    assert sim.h.flush() is False
    assert sim.h.state == "WARN" and len(sim.h.hr) == 4 and sim.h.counters["flush_errors"] == 1
    assert "flush failed" in sim.log.text()
    monkeypatch.setattr(builtins, "open", real_open)
    assert sim.h.flush() is True and sim.h.state == "OK"
    assert len(list(sim.store.records(HR))) == 4


def test_low_res_answer_includes_the_open_day_so_far():
    t0 = berlin_midnight(2026, 6, 10)
    sim = Sim(t0 - 5)
    sim.run(86400 + 3 * 3600)
    body = json.loads("".join(sim.h.low_res(days_from_civil(2026, 6, 10), 2)()))
    assert [i["date"] for i in body["items"]] == ["2026-06-10", "2026-06-11"]
    assert body["items"][1]["import_kWh"] == pytest.approx(3 * 0.9 - 0.225, abs=0.001)
    assert body["import_total_kWh"] == pytest.approx(sum(i["import_kWh"] for i in body["items"]))


def test_a_drive_read_only_from_boot_records_to_ram_then_creates_the_file(monkeypatch):
    import builtins

    real_open = builtins.open

    def read_only(path, mode="r", *a, **k):
        if "+" in mode or "w" in mode:
            raise OSError(30, "Read-only filesystem")
        return real_open(path, mode, *a, **k)

    monkeypatch.setattr(builtins, "open", read_only)
    t0 = berlin_midnight(2026, 6, 10)
    sim = Sim(t0 - 5, settings={"history.flushMinutes": 30})
    assert sim.h.state == "WARN" and not sim.h.store_ok and "recording to RAM" in sim.log.text()
    sim.run(3600 + 60)                               # two flushes fail, the records wait
    assert len(sim.h.hr) == 4 and sim.h.counters["flush_errors"] == 2
    body = json.loads("".join(sim.h.high_res(days_from_civil(2026, 6, 10))()))
    assert body["count"] == 4                        # served from RAM meanwhile
    monkeypatch.setattr(builtins, "open", real_open)
    sim.run(1800)                                    # the flush creates the file: its first slice
    assert sim.h.store_ok and not sim.store.ready and len(sim.h.hr) == 6
    assert "not complete yet" in sim.log.text()
    _until_made(sim)                                 # a slice per poll, then the waiting records go out
    assert sim.h.state == "OK" and not sim.h.hr
    assert len(list(sim.store.records(HR))) == sim.h.counters["quarters"] >= 6


def _until_made(sim):
    """Poll until the file is complete, then once more (the records that waited are flushed); polls taken."""
    n = 0
    while not sim.store.ready:
        sim.run(10)
        n += 1
        assert n < 1000
    sim.run(10)
    return n + 1


def test_a_file_removed_while_running_is_created_again_at_the_next_flush():
    t0 = berlin_midnight(2026, 6, 10)
    sim = Sim(t0 - 5)
    sim.run(3600 + 60)
    os.remove("history.bin")
    sim.run(3600)
    assert sim.h.counters["flush_errors"] == 1 and sim.h.hr
    sim.run(3600)                                    # the flush creates it again: its first slice
    assert sim.store.status == "created" and not sim.store.ready
    _until_made(sim)
    assert sim.h.state == "OK" and not sim.h.hr
    assert len(list(sim.store.records(HR))) == sim.h.counters["quarters"] - 4   # those flushed before the removal


def test_a_time_zone_change_moves_the_end_of_the_open_day():
    t0 = berlin_midnight(2026, 6, 10)
    sim = Sim(t0 + 3600)
    sim.run(3600)
    from core.tz import Rule

    sim.clock.rule = Rule("EST5EDT,M3.2.0,M11.1.0")          # New York: midnight comes 6 h later in UTC
    sim.bus.publish("settings", ["timezone"])
    sim.run(22 * 3600 + 1800)                                 # past Berlin's midnight, before New York's
    assert sim.h.lr == [] and sim.h._day[8] == sim.h._day_start(sim.h._day[0] + 1)


def test_recent_power_is_the_last_15_minutes_in_10_s_slots_with_gaps_left_out():
    """Issue 28 point 8: the dashboard's 15-minute chart comes from the device (GET /history/recent), not only from
    what one tab polled: 90 slots of 10 s, oldest first, a silent minute left out, older than 15 minutes gone."""
    t0 = 1_790_000_000 - 1_790_000_000 % 900
    s = Sim(t0)
    assert json.loads(s.h.recent_json(None)) == {"step_s": 10, "points": []}   # no clock: nothing to say
    s.run(600, import_w=900)
    s.run(60, meter=False)                               # a silent minute
    s.run(300, import_w=200, export_w=700)               # exporting 500 W
    doc = json.loads(s.h.recent_json(s.clock.utc))
    times = [p[0] for p in doc["points"]]
    assert times == sorted(times) and times[-1] == s.clock.utc and times[0] >= s.clock.utc - 890
    assert len(times) == 90 - 6                          # 15 minutes of slots minus the silent minute
    assert all(s.clock.utc - 360 < t <= s.clock.utc - 300 for t in set(range(times[0], times[-1] + 1, 10)) - set(times))
    assert doc["points"][-1][1] == -500 and doc["points"][0][1] == 900
    assert json.loads(s.h.recent_json(s.clock.utc + 900)) == {"step_s": 10, "points": []}   # all older than 15 min
