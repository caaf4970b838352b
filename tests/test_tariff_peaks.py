"""Monthly peaks (issue 29 point 3) over a simulated month, checked against a hand computation made here with the
standard library's zoneinfo: the highest quarter-hour average import power with its time, the three highest hourly
import energies on three different days and their mean; closed months kept on the flash, this month replayed from
the history at start."""

import datetime
import json
import random
from zoneinfo import ZoneInfo

import pytest

from core.bus import Bus
from services.history import store as hs
from services.tariff import peaks as pk
from services.tariff import routes as tr
from services.tariff.service import TariffService
from tests.test_history_service import Sim, berlin_midnight

BERLIN = ZoneInfo("Europe/Berlin")


@pytest.fixture(autouse=True)
def drive(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def hand_peaks(recs, year, month):
    """(top quarter (energy, t), [(energy, hour start t, date)] top 3 days) of the records of a local month."""
    q = None
    hours = {}
    for r in recs:
        if r[5] & hs.F_GAP:
            continue
        local = datetime.datetime.fromtimestamp(r[1], BERLIN)
        if (local.year, local.month) != (year, month):
            continue
        if r[8] > 0 and (q is None or r[8] > q[0]):
            q = (r[8], r[1])
        key = r[1] - r[1] % 3600
        hours[key] = hours.get(key, 0) + r[8]
    best = {}
    for t, e in hours.items():
        d = datetime.datetime.fromtimestamp(t, BERLIN).date()
        if d not in best or e > best[d][0]:
            best[d] = (e, t)
    top = sorted(((e, t, d) for d, (e, t) in best.items()), key=lambda x: (-x[0], x[1]))[:3]
    return q, top


def simulate_month(sim, rng):
    # 30 days of June 2026 and the first quarter hour of July, power in steps of 12 W (exact energies at 300 s)
    for _ in range(30 * 96 + 2):
        w = 12 * rng.randrange(0, 400)
        if rng.random() < 0.01:
            w = 12 * rng.randrange(600, 900)     # a few peaks
        sim.run(900, step=300, import_w=w)


def test_peaks_of_a_simulated_month_match_a_hand_computation():
    sim = Sim(berlin_midnight(2026, 6, 1))
    peaks = pk.Peaks()
    sim.h.peaks = peaks
    simulate_month(sim, random.Random(29))
    recs = sim.hr()
    assert peaks.cur.month == 2026 * 12 + 6 and [m.month for m in peaks.months] == [2026 * 12 + 5]
    june = peaks.months[0]
    q, top = hand_peaks(recs, 2026, 6)
    assert june.q == q
    assert [(e, t, hs.date_str(d)) for e, t, d in june.top3()] == [(e, t, d.isoformat()) for e, t, d in top]
    assert len({d for _e, _t, d in top}) == 3
    body = json.loads(tr._month_json(june, sim.clock.local))
    assert body["month"] == "2026-06"
    assert body["quarter_peak"]["timestamp"] == q[1]
    assert body["quarter_peak"]["start"] == datetime.datetime.fromtimestamp(q[1], BERLIN).strftime("%Y-%m-%dT%H:%M")
    assert [i["start"] for i in body["hourly_top3"]] == [
        datetime.datetime.fromtimestamp(t, BERLIN).strftime("%Y-%m-%dT%H:%M") for _e, t, _d in top]
    assert body["quarter_peak"]["power_W"] == pytest.approx(q[0] * 0.4)     # 0.1 Wh in 15 min = 0.4 W
    assert [i["energy_kWh"] for i in body["hourly_top3"]] == [pytest.approx(e / 10000) for e, _t, _d in top]
    assert body["hourly_top3_mean_kWh"] == pytest.approx(round(sum(e for e, _t, _d in top) / 3) / 10000)
    # kept on the flash and read back; 12 months at most
    again = pk.Peaks()
    again.load_text(peaks.text())
    assert again.months[0].q == june.q and again.months[0].top3() == june.top3()


def test_a_restart_replays_this_month_from_the_history_and_gaps_are_left_out():
    sim = Sim(berlin_midnight(2026, 6, 1))
    rng = random.Random(7)
    for _ in range(3 * 96):
        sim.run(900, step=300, import_w=12 * rng.randrange(0, 300))
    sim.run(3 * 3600, step=300, import_w=9000, meter=False)    # the meter silent: a gap record follows
    for _ in range(8):
        sim.run(900, step=300, import_w=120)
    sim.h.flush()
    gap = [r for r in sim.hr() if r[5] & hs.F_GAP]
    assert gap and gap[0][8] > max(r[8] for r in sim.hr() if not r[5] & hs.F_GAP)
    sim.restart()
    svc = TariffService(None, sim.settings, Bus(), sim.clock, history=sim.h)
    svc.start()
    assert svc._replay is not None and sim.h.peaks is not svc.peaks      # replayed a few reads per poll
    sim.run(1800, step=300, import_w=12 * 700)          # quarter hours that close meanwhile count too, once
    polls = 0
    while svc._replay is not None:
        svc.poll(polls)
        polls += 1
    assert polls > 20 and sim.h.peaks is svc.peaks
    sim.run(900, step=300, import_w=120)
    q, top = hand_peaks(sim.hr(), 2026, 6)
    cur = svc.peaks.current()
    assert cur.q == q and [(e, t) for e, t, _d in cur.top3()] == [(e, t) for e, t, _d in top]
    assert sim.h.peaks is svc.peaks and sim.h.tariff is svc.tariff
