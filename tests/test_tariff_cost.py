"""Cost per quarter hour booked with the history (issue 29 point 2): fixed, time-of-use and dynamic prices, what a
price change does (nothing to what was booked), the day/month/year sums of /api/v1/cost, the v1 -> v2 migration of
the history file (record by record, power-cut safe)."""

import json
import os
import shutil
import struct
from binascii import crc32
from decimal import ROUND_HALF_UP, Decimal

import pytest

from core.tz import days_from_civil
from services.history import store as hs
from services.tariff import routes as tr
from services.tariff.prices import PriceBook
from services.tariff.tariff import Tariff
from tests import history_powercut as hp
from tests.history_fakes import FakeSettings
from tests.test_history_service import Sim, berlin_midnight

DAY0 = days_from_civil(2026, 6, 21)


@pytest.fixture(autouse=True)
def drive(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def cents(x):
    return Decimal(x).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)


class Svc:
    """What the routes need of the tariff service."""

    def __init__(self, tariff, clock):
        self.tariff = tariff
        self.clock = clock


def priced_sim(values, start=None):
    sim = Sim(start or berlin_midnight(2026, 6, 21))
    sim.settings.values.update(values)
    sim.h.tariff = Tariff(sim.settings)
    return sim


def quarters(sim):
    return [r for r in sim.hr() if r[8] or r[9]]


def test_fixed_tariff_every_quarter_hour_costs_energy_times_price_to_the_cent():
    sim = priced_sim({"tariff.mode": "fixed", "tariff.importPrice": "0.3012", "tariff.exportPrice": "0.0786"})
    for w in (900, 1733, 40, 2999, 0, 5120):
        sim.run(1800, import_w=w, export_w=300 if w < 1000 else 0)
    recs = quarters(sim)
    assert len(recs) >= 10
    for r in recs:
        assert r[5] & hs.F_IC and r[5] & hs.F_EC
        imp = Decimal(r[8]) / 10000
        exp = Decimal(r[9]) / 10000
        assert Decimal(r[10]) / 1000000 == (imp * Decimal("0.3012")).quantize(Decimal("0.000001"), ROUND_HALF_UP)
        assert cents(Decimal(r[10]) / 1000000) == cents(imp * Decimal("0.3012"))
        assert cents(Decimal(r[11]) / 1000000) == cents(exp * Decimal("0.0786"))
    body = json.loads(tr.cost_body(sim.h, Svc(sim.h.tariff, sim.clock), DAY0, DAY0, "quarter"))
    assert body["currency"] == "EUR" and len(body["items"]) == len(sim.hr())
    for item, r in zip(body["items"], sim.hr()):
        assert item["timestamp"] == r[1]
        assert Decimal(str(item["import_kwh"])) == Decimal(r[8]) / 10000
        assert Decimal(str(item["import_cost"])) == cents(Decimal(str(item["import_kwh"])) * Decimal("0.3012"))
        assert Decimal(str(item["export_revenue"])) == cents(Decimal(str(item["export_kwh"])) * Decimal("0.0786"))
    today = body["today"]
    assert set(today) >= {"import_kwh", "import_cost", "export_kwh", "export_revenue"}
    total = sum(r[10] for r in sim.hr())
    assert Decimal(str(today["import_cost"])) == cents(Decimal(total) / 1000000)
    assert body["month"]["import_cost"] == today["import_cost"] and body["year"]["import_cost"] == today["import_cost"]
    assert today["complete"] is True


def test_a_price_change_never_rewrites_what_was_booked():
    sim = priced_sim({"tariff.mode": "fixed", "tariff.importPrice": "0.30"})
    sim.run(3600, import_w=1000)
    before = [r[10] for r in quarters(sim)]
    assert before and all(r[10] == (r[8] * 300000 + 5000) // 10000 for r in quarters(sim))
    sim.settings.values["tariff.importPrice"] = "0.50"
    sim.h.tariff.load()
    sim.run(3600, import_w=1000)
    recs = quarters(sim)
    assert [r[10] for r in recs[:len(before)]] == before
    later = recs[len(before) + 1:]
    assert later and all(r[10] == (r[8] * 500000 + 5000) // 10000 for r in later)


def test_time_of_use_windows_price_each_quarter_hour_by_local_time():
    # 2026-06-21 is a Sunday (ISO 7): the night window of the weekdays does not apply, the weekend one does
    tou = [{"days": [1, 2, 3, 4, 5], "from": "22:00", "to": "06:00", "price": "0.20"},
           {"days": [7], "from": "02:00", "to": "04:00", "price": "0.10"}]
    sim = priced_sim({"tariff.mode": "tou", "tariff.importPrice": "0.40", "tariff.tou": tou})
    sim.run(6 * 3600, import_w=1000)
    by_hour = {}
    for r in quarters(sim):
        local_h = (r[1] + r[4] * 60) % 86400 // 3600
        by_hour.setdefault(local_h, set()).add(Decimal(r[10]) / r[8] / 100)   # the price applied, per kWh
    assert by_hour[0] == {Decimal("0.4")} and by_hour[1] == {Decimal("0.4")}
    assert by_hour[2] == {Decimal("0.1")} and by_hour[3] == {Decimal("0.1")} and by_hour[4] == {Decimal("0.4")}


def test_a_quarter_hour_without_a_price_has_cost_null_never_zero():
    start = berlin_midnight(2026, 6, 21)
    sim = Sim(start)
    book = PriceBook(sim.h._day_start)
    sim.settings.values.update({"tariff.mode": "dynamic", "tariff.surcharge": "0.15", "tariff.vatPercent": "19"})
    sim.h.tariff = Tariff(sim.settings, book)
    # prices for the first hour only (as four quarter hours, one of them negative)
    book.merge([(start, 900, 100000), (start + 900, 900, -20000), (start + 1800, 900, 0), (start + 2700, 900, 1)],
               DAY0, DAY0 + 1, lambda t: sim.clock.local(t) // 86400)
    sim.run(2 * 3600, import_w=1000)
    recs = quarters(sim)
    priced = [r for r in recs if r[1] < start + 3600]
    unpriced = [r for r in recs if r[1] >= start + 3600]
    # (market + 0.15) * 1.19 per kWh, 0.25 kWh a quarter hour
    assert len(priced) == 4
    for r, m in zip(priced, (100000, -20000, 0, 1)):
        price = ((Decimal(m) / 10 ** 6 + Decimal("0.15")) * Decimal("1.19")).quantize(Decimal("0.000001"),
                                                                                       ROUND_HALF_UP)
        assert r[5] & hs.F_IC
        assert r[10] == (Decimal(r[8]) / 10000 * price * 10 ** 6).quantize(Decimal(1), ROUND_HALF_UP)
    assert all(not r[5] & hs.F_IC for r in unpriced)
    body = json.loads(tr.cost_body(sim.h, Svc(sim.h.tariff, sim.clock), DAY0, DAY0, "hour"))
    hours = body["items"]
    assert hours[0]["import_cost"] is not None and hours[1]["import_cost"] is None
    assert body["today"]["complete"] is False and body["today"]["import_cost"] is not None


def _v1_rec(kind, seq, rec):
    b = bytearray(56)
    struct.pack_into(hs.V1_FMT, b, 0, seq, *rec[1:10], 0)
    struct.pack_into("<I", b, 52, crc32(memoryview(b)[:52], (1 << 8) | kind))
    return bytes(b)


def _v1_drive(path, n_hr=700, n_lr=7):
    """A drive whose history/history.bin is the format before the cost fields (version 1, 56-byte records)."""
    os.makedirs(os.path.join(path, "history"))
    t0 = 1_782_000_000
    hr = [(i + 1, t0 + 900 * i, 20625 + i // 96, 300, 120, hs.F_POWER, 10_000 + 25 * i, 7, 25, 0)
          for i in range(n_hr)]
    lr = [(i + 1, t0 + 86400 * i, 20625 + i, 0, 120, 0, 10_000 + 2400 * i, 7, 2400, 0) for i in range(n_lr)]
    h = bytearray(64)
    struct.pack_into("<4sHHHH", h, 0, hs.MAGIC, 1, 56, hs.HR_CAP, hs.LR_CAP)
    struct.pack_into("<I", h, 60, crc32(memoryview(h)[:60]))
    body = bytearray((hs.HR_CAP + hs.LR_CAP) * 56)
    for i, r in enumerate(hr):
        body[i * 56:(i + 1) * 56] = _v1_rec(hs.HR, r[0], r)
    for i, r in enumerate(lr):
        at = (hs.HR_CAP + i) * 56
        body[at:at + 56] = _v1_rec(hs.LR, r[0], r)
    with open(os.path.join(path, hp.PATH), "wb") as f:
        f.write(h + body)
    return [r + (0, 0) for r in hr], [r + (0, 0) for r in lr]


def test_a_v1_file_is_migrated_record_by_record_with_cost_unknown(tmp_path, monkeypatch):
    hr0, lr0 = _v1_drive(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    st = hs.HistoryStore()
    assert st.open() == "migrated"
    assert list(st.records(hs.HR)) == hr0 and list(st.records(hs.LR)) == lr0
    assert all(not r[5] & (hs.F_IC | hs.F_EC) for r in hr0)
    with open(hp.PATH, "rb") as f:
        assert hs.parse_header(f.read(64)) == (2, 64, hs.HR_CAP, hs.LR_CAP)
    assert sorted(os.listdir("history")) == ["history.bin"]
    st2 = hs.HistoryStore()
    assert st2.open() == "ok" and list(st2.records(hs.HR)) == hr0


def test_a_power_cut_in_the_v1_migration_loses_no_record(tmp_path, monkeypatch):
    seed = str(tmp_path / "seed")
    hr0, lr0 = _v1_drive(seed, n_hr=300, n_lr=4)
    whole = str(tmp_path / "whole")
    shutil.copytree(seed, whole)
    steps = hp.migration_steps(whole, 10 ** 9)
    assert steps > 300
    cuts = sorted(set(range(0, steps, 23)) | set(range(steps - 8, steps)))
    hp.assert_every_cut_recovers(tmp_path, monkeypatch, seed, cuts, (hr0, lr0))


def test_off_books_nothing_and_the_api_says_null():
    sim = priced_sim({"tariff.mode": "off"})
    sim.run(3600, import_w=1000)
    assert all(not r[5] & (hs.F_IC | hs.F_EC) for r in sim.hr())
    body = json.loads(tr.cost_body(sim.h, Svc(sim.h.tariff, sim.clock), DAY0, DAY0, "hour"))
    assert body["today"]["import_cost"] is None and body["today"]["import_kwh"] > 0
    assert FakeSettings  # imported for the fakes' module


def test_the_cost_answer_streams_with_the_loop_given_back_between_flash_reads():
    sim = priced_sim({"tariff.mode": "fixed", "tariff.importPrice": "0.30"})
    sim.run(3 * 3600, import_w=1000)
    sim.h.flush()
    chunks = list(tr.cost_chunks(sim.h, Svc(sim.h.tariff, sim.clock), DAY0, DAY0, "hour"))
    assert chunks.count("") > 100                 # a year of day slots and the quarter-hour ring, batch by batch
    assert json.loads(chunks[-1])["today"]["import_cost"] is not None
    assert "".join(chunks) == tr.cost_body(sim.h, Svc(sim.h.tariff, sim.clock), DAY0, DAY0, "hour")


def test_an_answer_right_after_a_settings_change_uses_the_new_price():
    from core.bus import Bus
    from services.tariff.service import TariffService

    sim = Sim(berlin_midnight(2026, 6, 21))
    bus = Bus()
    sim.settings.values.update({"tariff.mode": "fixed", "tariff.importPrice": "0.30"})
    svc = TariffService(None, sim.settings, bus, sim.clock, history=sim.h)
    svc.start()
    sim.settings.values["tariff.importPrice"] = "0.3012"
    bus.publish("settings", ["tariff.importPrice"])        # what POST /api/v1/settings does
    svc.follow_settings()                                   # what the routes do before answering (no poll between)
    assert json.loads(tr.cost_body(sim.h, svc, DAY0, DAY0, "hour"))["price_now"] == 0.3012
