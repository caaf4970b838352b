"""The outage journal: the ring file (wrap, torn and foreign slots, a missing or short file), the reasons, the start
record completed when the clock syncs (across the tick wrap), the orderly-restart note, the endpoint's JSON, and
the whole firmware on the host runtime through a power cut (SIGKILL) and an orderly restart."""

import json
import os

import pytest

from services.outages import journal as oj
from services.outages.journal import OutageJournal
from services.outages.routes import outages_json
from services.outages.service import Outages, reason_of_reset, span_text, utc_text
from tests.hostproc import HostProcess
from tests.steppedclock import SteppedClock

T0 = 1_790_000_000


@pytest.fixture
def drive(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


class Clock:
    def __init__(self, utc=None):
        self.utc = utc

    @property
    def synced(self):
        return self.utc is not None

    def time(self, now_ms=None):
        return self.utc


class Log:
    def __init__(self):
        self.lines = []

    def log(self, level, msg, *args):
        self.lines.append((level, msg % args if args else msg))


def test_missing_file_is_created_and_the_ring_keeps_the_newest(drive):
    j = OutageJournal("logs/outages.bin", capacity=8)
    j.open()
    assert os.path.getsize("logs/outages.bin") == 8 * oj.REC_SIZE and j.newest is None and j.entries() == []
    for i in range(11):
        j.put(T0 + 100 * i, T0 + 100 * i + 50, oj.reason_code("power"), 0, "POWER_ON")
    got = j.entries()
    assert [r[1] for r in got] == [T0 + 100 * i for i in range(10, 2, -1)]   # newest first, the 3 oldest gone
    again = OutageJournal("logs/outages.bin", capacity=8)
    again.open()
    assert again.newest[1] == T0 + 1000 and again.entries() == got            # survives a restart
    assert os.path.getsize("logs/outages.bin") == 8 * oj.REC_SIZE             # never grows


def test_a_torn_or_foreign_slot_is_skipped_and_counted(drive):
    j = OutageJournal("o.bin", capacity=8)
    j.open()
    for i in range(5):
        j.put(T0 + i, T0 + i + 1, 1, 0, "POWER_ON")
    with open("o.bin", "r+b") as f:
        f.seek(2 * oj.REC_SIZE + 5)
        f.write(b"\xff\xff")                  # a write cut in the middle of slot 2
        f.seek(6 * oj.REC_SIZE)
        f.write(os.urandom(oj.REC_SIZE))      # noise in an empty slot
    again = OutageJournal("o.bin", capacity=8)
    again.open()
    assert again.bad == 2 and [r[1] for r in again.entries()] == [T0 + 4, T0 + 3, T0 + 1, T0]
    again.put(T0 + 9, 0, 1, 0, "x")           # writing goes on after the newest good record
    assert again.entries()[0][1] == T0 + 9


def test_a_short_file_is_extended_keeping_its_records(drive):
    j = OutageJournal("o.bin", capacity=8)
    j.open()
    j.put(T0, T0 + 5, 1, 0, "POWER_ON")
    with open("o.bin", "r+b") as f:
        f.truncate(oj.REC_SIZE + 7)
    again = OutageJournal("o.bin", capacity=8)
    again.open()
    assert os.path.getsize("o.bin") == 8 * oj.REC_SIZE and [r[1] for r in again.entries()] == [T0]


@pytest.mark.parametrize("name,reason", [("POWER_ON", "power"), ("BROWNOUT", "brownout"), ("WATCHDOG", "watchdog"),
                                         ("RESET_PIN", "reset_pin"), ("SOFTWARE", "software"),
                                         ("DEEP_SLEEP_ALARM", "software"), ("UNKNOWN", "unknown"),
                                         ("RESCUE_DEBUG", "unknown"), ("", "unknown")])
def test_reset_reasons_map_to_the_api_codes(name, reason):
    assert reason_of_reset(name) == reason and reason in oj.REASONS


def test_a_power_cut_is_recorded_with_the_last_known_time_and_completed_at_the_sync_across_the_wrap(drive):
    log = Log()
    j = OutageJournal("o.bin")
    clock = Clock()
    mod = Outages(j, clock, "POWER_ON", last_seen=lambda: T0, log=log)
    mod.start()
    assert j.entries()[0][1:4] == [T0, 0, oj.reason_code("power")]           # written at once, up unknown
    ticks = SteppedClock()                                                  # 5 s before the wrap
    mod.poll(ticks())
    ticks.advance(90_000)                                                   # synced 90 s after the start
    clock.utc = T0 + 5400 + 90
    mod.poll(ticks())
    e = j.entries()[0]
    assert e[1:3] == [T0, T0 + 5400] and len(j.entries()) == 1              # the same record, completed
    assert outages_json(j.entries(), j.capacity) == (
        '{"outages":[{"down":%d,"up":%d,"duration_s":5400,"reason":"power","detail":"POWER_ON"}],"capacity":64}'
        % (T0, T0 + 5400))
    assert log.lines[-1] == ("info", "outage: down %s, up %s (1 h 30 min), reason power"
                             % (utc_text(T0), utc_text(T0 + 5400, False)))


def test_an_orderly_restart_leaves_a_note_the_next_start_completes(drive):
    clock = Clock(T0)
    first = Outages(OutageJournal("o.bin"), clock, "POWER_ON", last_seen=lambda: 0)
    first.start()
    first.note_restart("api")
    second = Outages(OutageJournal("o.bin"), Clock(), "SOFTWARE", last_seen=lambda: T0 - 600)
    second.start()
    entries = second.journal.entries()
    assert len(entries) == 2 and entries[0][1] == T0 and entries[0][3] == oj.reason_code("restart")
    second._clock.utc = T0 + 40
    second.poll(1000)
    second.poll(1000)
    doc = json.loads(outages_json(second.journal.entries(), 64))
    assert doc["outages"][0] == {"down": T0, "up": T0 + 40, "duration_s": 40, "reason": "restart", "detail": "api"}
    assert list(doc["outages"][0]) == ["down", "up", "duration_s", "reason", "detail"]


def test_the_first_start_is_no_outage_but_a_start_with_history_is(drive):
    """Issue 28 point 11: an empty journal and no history is the device's first start, not a power cut; the next
    power-on start (the journal now holds the first) is one again, and so is a first journal on a device with
    history."""
    first = Outages(OutageJournal("o.bin"), Clock(T0), "POWER_ON", last_seen=lambda: 0)
    first.start()
    assert [oj.REASONS[e[3]] for e in first.journal.entries()] == ["first_start"]
    assert json.loads(outages_json(first.journal.entries(), 64))["outages"][0]["reason"] == "first_start"
    second = Outages(OutageJournal("o.bin"), Clock(), "POWER_ON", last_seen=lambda: 0)
    second.start()
    assert [oj.REASONS[e[3]] for e in second.journal.entries()] == ["power", "first_start"]
    os.remove("o.bin")
    had_history = Outages(OutageJournal("o.bin"), Clock(), "POWER_ON", last_seen=lambda: T0)
    had_history.start()
    assert oj.REASONS[had_history.journal.entries()[0][3]] == "power"


def test_a_rolled_back_update_names_the_rollback(drive):
    ota = type("Ota", (), {"last_error": "rolled_back"})()
    mod = Outages(OutageJournal("o.bin"), Clock(), "WATCHDOG", last_seen=lambda: 0, ota=ota)
    mod.start()
    assert oj.REASONS[mod.journal.entries()[0][3]] == "rollback"


def test_unknown_times_give_null_durations_and_the_texts_read_right(drive):
    j = OutageJournal("o.bin")
    j.open()
    j.put(0, T0, 0, 0, "UNKNOWN")
    doc = json.loads(outages_json(j.entries(), j.capacity))
    assert doc["outages"][0]["duration_s"] is None and doc["outages"][0]["reason"] == "unknown"
    assert span_text(45) == "45 s" and span_text(3 * 86400 + 4 * 3600) == "3 d 4 h" and utc_text(0) == "unknown"


def test_a_drive_that_refuses_writes_degrades_without_a_fault(drive, monkeypatch):
    mod = Outages(OutageJournal("o.bin"), Clock(T0), "POWER_ON", last_seen=lambda: 0)
    mod.start()
    monkeypatch.setattr(mod.journal, "put", lambda *a, **k: (_ for _ in ()).throw(OSError(30, "read-only")))
    mod.note_restart("api")
    mod.poll(0)
    assert mod.counters["write_errors"] == 2


@pytest.mark.slow
def test_power_cut_and_orderly_restart_on_the_host_runtime(tmp_path):
    h = HostProcess(tmp_path / "drive").start()
    try:
        first = h.wait_for(lambda: _closed_outages(h, 1))
        # A fresh drive: the first start ends no outage (issue 28 point 11), whatever the chip's reset reason.
        assert first[0]["reason"] == "first_start" and first[0]["detail"] == "POWER_ON" and first[0]["down"] == 0
        h.kill()                                               # a power cut
        h.start()
        second = h.wait_for(lambda: _closed_outages(h, 2))
        assert second[0]["reason"] == "power" and second[0]["down"] >= first[0]["up"]
        assert second[0]["duration_s"] == second[0]["up"] - second[0]["down"] >= 0
        assert h.post("/api/v1/system/reboot", {})[0] == 200    # an orderly restart through the API
        third = h.wait_for(lambda: _closed_outages(h, 3), timeout=60)
        assert third[0]["reason"] == "restart" and third[0]["detail"] == "api" and third[0]["down"] > 0
        assert "outage: down" in h.log()
    finally:
        h.stop()


def _closed_outages(h, n):
    """The journal once it holds n outages and the newest has its "up" (None while the device restarts)."""
    outages = _outages(h)
    return outages if outages and len(outages) == n and outages[0]["up"] else None


def _outages(h):
    try:
        status, body, _h = h.get("/api/v1/system/outages", timeout=2, retry_429_for=0)
    except OSError:
        return None
    return body["outages"] if status == 200 else None
