"""The history file is made a slice per poll (created, extended, migrated, moved): no poll writes more than one
slice, records wait in RAM and are served from there, and a cut at any point resumes without losing a record."""

import builtins
import json
import os

import pytest

from core.tz import days_from_civil
from services.history import store as hs
from services.history.store import HR, LR, HistoryStore
from tests.test_history_service import Sim, berlin_midnight
from tests.test_history_store import ListLog, fill

SIZE = hs.HEADER_SIZE + (hs.HR_CAP + hs.LR_CAP) * hs.REC_SIZE
SLICES = -(-SIZE // hs.FILL)           # 117 for 238,912 bytes


@pytest.fixture(autouse=True)
def drive(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


class Writes:
    """builtins.open hooked: the bytes written to the drive (and the opens for writing) since take()."""

    def __init__(self, monkeypatch):
        self.bytes = 0
        self.opens = 0
        real = builtins.open
        outer = self

        class Counted:
            def __init__(self, f):
                self.f = f

            def write(self, b):
                outer.bytes += len(b)
                return self.f.write(b)

            def __enter__(self):
                return self

            def __exit__(self, *e):
                self.f.close()

            def __getattr__(self, n):
                return getattr(self.f, n)

        def hooked(path, mode="r", *a, **k):
            if any(c in mode for c in "wax+"):
                outer.opens += 1
                return Counted(real(path, mode, *a, **k))
            return real(path, mode, *a, **k)

        monkeypatch.setattr(builtins, "open", hooked)

    def take(self):
        got = (self.bytes, self.opens)
        self.bytes = self.opens = 0
        return got


def _poll_until_made(sim, writes, step=10):
    """Poll until the file is complete; the bytes each poll wrote."""
    per_poll = []
    while not sim.store.ready:
        writes.take()
        sim.run(step)
        per_poll.append(writes.take()[0])
        assert len(per_poll) <= SLICES + 1
    return per_poll


def test_a_first_start_writes_one_slice_per_poll_until_the_file_is_whole(monkeypatch):
    writes = Writes(monkeypatch)
    sim = Sim(berlin_midnight(2026, 6, 10) - 5, made=False)
    assert writes.take()[0] == hs.FILL                    # start(): the header and the rest of the first slice
    assert sim.store.status == "created" and not sim.store.ready and os.path.getsize("history.bin") == hs.FILL
    per_poll = _poll_until_made(sim, writes)
    assert len(per_poll) == SLICES - 1                    # then one slice per poll, no more
    assert max(per_poll) == hs.FILL and sum(per_poll) == SIZE - hs.FILL
    assert os.path.getsize("history.bin") == SIZE and sim.store.slices == SLICES
    with open("history.bin", "rb") as f:
        data = f.read()
    assert hs.parse_header(data[:hs.HEADER_SIZE]) == (hs.VERSION, hs.REC_SIZE, hs.HR_CAP, hs.LR_CAP)
    assert data[hs.HEADER_SIZE:] == bytes(SIZE - hs.HEADER_SIZE)     # every slot written, with zeros
    assert "complete" in sim.log.text()


def test_records_made_while_the_file_is_made_wait_in_ram_are_served_and_flushed_after(monkeypatch):
    day = days_from_civil(2026, 6, 10)
    sim = Sim(berlin_midnight(2026, 6, 10) - 5, made=False, settings={"history.flushMinutes": 15})
    n = 0
    served = []
    while not sim.store.ready:
        sim.run(60, step=60)   # a poll a minute: the file takes ~2 hours, quarters close meanwhile
        n += 1
        if n % 20 == 0:
            body = json.loads("".join(sim.h.high_res(day)()))
            served.append(body)
            assert [i["timestamp"] for i in body["items"]] == [r[1] for r in sim.h.hr]   # what RAM holds
            assert list(sim.store.records(HR)) == []                                    # the file: nothing yet
    assert sim.h.counters["quarters"] >= 7 and len(sim.h.hr) == sim.h.counters["quarters"]
    # The flush interval passed several times: no flush was tried (nor logged) before the file was whole.
    assert sim.h.counters["flushes"] == 0 and sim.h.counters["flush_errors"] == 0
    assert "wait in RAM" not in sim.log.text()
    waiting = list(sim.h.hr)
    sim.run(60, step=60)                                  # the poll after the last slice flushes them
    assert not sim.h.hr and sim.h.counters["flushes"] == 1
    assert list(sim.store.records(HR)) == [(i + 1,) + r[1:] for i, r in enumerate(waiting)]
    body = json.loads("".join(sim.h.high_res(day)()))
    assert [i["timestamp"] for i in body["items"]] == [r[1] for r in waiting]
    assert served and all(b["items"] for b in served[1:])
    low = json.loads("".join(sim.h.low_res(day, 1)()))
    assert low["items"][0]["import_kWh"] == pytest.approx(sum(r[8] for r in waiting) / 10000)


def test_an_orderly_stop_while_the_file_is_made_keeps_the_service_alive_and_says_so():
    sim = Sim(berlin_midnight(2026, 6, 10) - 5, made=False)
    sim.run(1000, step=100)                                # 10 polls, one quarter hour closed
    assert len(sim.h.hr) == 1 and not sim.store.ready
    assert sim.h.flush() is False and len(sim.h.hr) == 1   # it waits; no write into a half-made file
    sim.h.stop()                                           # never raises
    assert "not complete yet" in sim.log.text()


def test_a_cut_while_the_file_is_made_resumes_where_it_ended(monkeypatch):
    writes = Writes(monkeypatch)
    sim = Sim(berlin_midnight(2026, 6, 10) - 5, made=False)
    sim.run(100)                                          # 10 polls: 11 slices written, then the power goes
    assert os.path.getsize("history.bin") == 11 * hs.FILL
    writes.take()
    sim.made = False
    sim.restart()                                         # no stop(): what a reset does
    assert sim.store.status == "extended" and writes.take()[0] == hs.FILL
    per_poll = _poll_until_made(sim, writes)
    assert len(per_poll) == SLICES - 12 and max(per_poll) == hs.FILL   # on from the end, not from the start
    assert os.path.getsize("history.bin") == SIZE
    sim.run(3600)
    sim.h.flush()
    assert len(list(sim.store.records(HR))) == sim.h.counters["quarters"]


def test_a_truncated_file_serves_its_records_while_it_is_extended(monkeypatch):
    t0 = berlin_midnight(2026, 6, 10)
    sim = Sim(t0 - 5)
    sim.run(5 * 3600)
    sim.h.flush()
    kept = list(sim.store.records(HR))
    assert len(kept) == 19
    with open("history.bin", "r+b") as f:
        f.truncate(hs.HEADER_SIZE + 12 * hs.REC_SIZE + 30)   # a torn 13th record, the rest gone
    writes = Writes(monkeypatch)
    sim.made = False
    sim.restart()
    assert sim.store.status == "extended" and writes.take()[0] <= hs.FILL
    assert list(sim.store.records(HR)) == kept[:12]        # served at once
    # The service goes on from the newest record it has: the next quarter hour closes the gap.
    assert sim.h._last_t == kept[11][1]
    per_poll = _poll_until_made(sim, writes)
    assert max(per_poll) <= hs.FILL and len(per_poll) == SLICES - 1
    sim.run(3600)
    sim.h.flush()
    recs = list(sim.store.records(HR))
    assert recs[:12] == kept[:12] and len(recs) > 12
    assert recs[12][5] & hs.F_GAP and recs[12][6] - recs[12][8] == kept[11][6]   # no energy lost


def _old_layout(hr_cap=1500, lr_cap=372, n_hr=1600, n_lr=20):
    """The first firmware's 15-day/1-year file, its rings wrapped; its records."""
    t0 = berlin_midnight(2026, 6, 10) - 900 * n_hr
    st = HistoryStore("history.bin", hr_cap=hr_cap, lr_cap=lr_cap)
    st.open()
    st.write([(0, t0 + 900 * i, (t0 + 900 * i + 7200) // 86400, 300, 120, hs.F_POWER, 10_000 + 25 * i, 7, 25, 0)
              for i in range(n_hr)],
             [(0, t0 + 86400 * i, (t0 + 7200) // 86400 + i, 96, 120, 0, 10_000 + 2400 * i, 7, 2400, 0)
              for i in range(n_lr)])
    return list(st.records(HR)), list(st.records(LR))


def test_a_migration_goes_a_slice_per_poll_serving_the_old_file_meanwhile(monkeypatch):
    hr0, lr0 = _old_layout()
    writes = Writes(monkeypatch)
    log = ListLog()
    sim = Sim(berlin_midnight(2026, 6, 10) + 60, made=False, log=log,
              store=HistoryStore("history.bin", log=log), imp=10_000 + 25 * 1599)
    assert sim.store.status == "migrating" and writes.take()[0] == hs.FILL
    assert os.path.getsize("history.new") == hs.FILL
    assert list(sim.store.records(HR)) == hr0 and list(sim.store.records(LR)) == lr0   # the original, served
    assert sim.h._last_t == hr0[-1][1]                     # and continued from
    per_poll = []
    day = days_from_civil(2026, 6, 9)
    while not sim.store.ready:
        writes.take()
        sim.run(10)
        per_poll.append(writes.take()[0])
        if len(per_poll) % 50 == 0:
            body = json.loads("".join(sim.h.high_res(day)()))
            assert body["count"] == len([r for r in hr0 if r[2] == day]) > 0
    # every slice of .new in its own poll, then the switch (no data written) in the next
    assert per_poll[-1] == 0 and max(per_poll) == hs.FILL and len(per_poll) == SLICES
    assert sim.store.status == "migrated" and sorted(os.listdir(".")) == ["history.bin"]
    assert "migrated from 1500/372 to 3000/732 slots, 1500 HighRes and 20 LowRes records kept" in log.text()
    assert list(sim.store.records(HR)) == hr0 and list(sim.store.records(LR)) == lr0
    sim.run(3600)
    sim.h.flush()
    hr = list(sim.store.records(HR))
    assert hr[:1500] == hr0 and [r[0] for r in hr] == list(range(101, 101 + len(hr)))
    assert hr[1500][1] > hr0[-1][1] and not hr[1500][5] & hs.F_GAP   # the next quarter hour, counted on
    again = HistoryStore("history.bin")
    assert again.open() == "ok" and list(again.records(HR)) == hr


def test_a_cut_in_the_migration_starts_it_again_from_the_untouched_original(monkeypatch):
    hr0, lr0 = _old_layout()
    sim = Sim(berlin_midnight(2026, 6, 10) + 60, made=False, store=HistoryStore("history.bin"),
              imp=10_000 + 25 * 1599)
    sim.run(500)                                           # 50 slices of .new, then the power goes
    assert os.path.getsize("history.new") == 51 * hs.FILL
    sim.made = False
    sim.restart()
    assert sim.store.status == "migrating" and os.path.getsize("history.new") == hs.FILL   # begun anew
    assert list(sim.store.records(HR)) == hr0
    while not sim.store.ready:
        sim.run(10)
    assert sorted(os.listdir(".")) == ["history.bin"]
    assert list(sim.store.records(HR)) == hr0 and list(sim.store.records(LR)) == lr0


def test_the_store_alone_writes_at_most_a_slice_per_step(monkeypatch):
    fill_store = HistoryStore("history.bin", hr_cap=30, lr_cap=4)
    fill_store.open()
    fill(fill_store, 40, 3)                                # a wrapped ring: its records must come through whole
    hr0 = list(fill_store.records(HR))
    writes = Writes(monkeypatch)
    st = HistoryStore("history.bin", hr_cap=3000, lr_cap=732)
    assert st.begin() == "migrating"
    steps = [writes.take()]
    while not st.step():
        steps.append(writes.take())
    steps.append(writes.take())
    assert all(b <= hs.FILL and o <= 1 for b, o in steps)
    assert list(st.records(HR)) == hr0 and st.hr.next_seq == 41 and st.hr.head == 30


def test_an_error_while_the_file_is_made_records_to_ram_and_the_next_flush_goes_on(monkeypatch):
    sim = Sim(berlin_midnight(2026, 6, 10) - 5, made=False, settings={"history.flushMinutes": 30})
    sim.run(100)
    real = builtins.open

    def refuse(path, mode="r", *a, **k):
        if "+" in mode or "w" in mode:
            raise OSError(28, "No space left on device")
        return real(path, mode, *a, **k)

    monkeypatch.setattr(builtins, "open", refuse)
    sim.run(10)
    assert not sim.h.store_ok and sim.h.state == "WARN" and "cannot write" in sim.log.text()
    monkeypatch.setattr(builtins, "open", real)
    size = os.path.getsize("history.bin")
    sim.run(1900)                                          # the flush begins again: extended from its end
    assert sim.h.store_ok and sim.store.status == "extended" and os.path.getsize("history.bin") > size
    while not sim.store.ready:
        sim.run(10)
    sim.run(10)
    assert sim.h.state == "OK" and not sim.h.hr and len(list(sim.store.records(HR))) == sim.h.counters["quarters"]


def test_any_failure_of_a_slice_leaves_no_service_stuck_on_a_half_made_file(monkeypatch):
    sim = Sim(berlin_midnight(2026, 6, 10) - 5, made=False, settings={"history.flushMinutes": 15})
    real_step = HistoryStore.step

    def broken(self):
        monkeypatch.setattr(HistoryStore, "step", real_step)     # fails once, as an out-of-memory would
        self._job = None
        raise MemoryError("memory allocation failed")

    monkeypatch.setattr(HistoryStore, "step", broken)
    sim.run(10)
    assert not sim.h.store_ok and sim.h.state == "WARN" and "cannot write" in sim.log.text()
    sim.run(1800)                                          # the flush with records begins again
    while not sim.store.ready:
        sim.run(10)
    sim.run(10)
    assert sim.h.state == "OK" and not sim.h.hr and len(list(sim.store.records(HR))) == sim.h.counters["quarters"]
