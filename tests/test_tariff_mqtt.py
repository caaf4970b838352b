"""The money values everywhere a system looks (issue 29 point 4): MQTT with Home Assistant discovery read back from
a real mosquitto by paho-mqtt, and /metrics; both equal the booked cost (energy x price to the cent)."""

import json
import os
from decimal import ROUND_HALF_UP, Decimal

import pytest

from core.bus import Bus
from services.history import store as hs
from services.metrics.exposition import money_lines
from services.tariff.service import TariffService
from tests.mqtt_peers import Broker, Subscriber
from tests.price_server import PriceServer
from tests.test_history_service import Sim, berlin_midnight
from tests.test_mqtt_broker import DEV, PREFIX, Device

pytestmark = pytest.mark.slow


def priced(tmp_path):
    os.chdir(tmp_path)
    sim = Sim(berlin_midnight(2026, 6, 3))
    sim.settings.values.update({"tariff.mode": "fixed", "tariff.importPrice": "0.3012",
                                "tariff.exportPrice": "0.0786", "tariff.currency": "EUR"})
    svc = TariffService(None, sim.settings, Bus(), sim.clock, history=sim.h)
    svc.start()
    sim.run(5 * 3600 + 60, import_w=1733, export_w=0)
    return sim, svc


def cents(micro):
    return str((Decimal(micro) / 10 ** 6).quantize(Decimal("0.01"), ROUND_HALF_UP))


def dynamic(tmp_path):
    """The dynamic tariff from the energy-charts stand-in (25-hour day, negative prices), a day of quarter hours."""
    from tests.test_tariff_prices import OCT25, Env, day_start

    os.chdir(tmp_path)
    srv = PriceServer()
    try:
        sim = Sim(day_start(OCT25) - 600)
        e = Env(srv.energy_charts_url, None, history=sim)
        assert e.fetch() == "ok"
        sim.run(600 + 14 * 3600, import_w=1733, export_w=0)
    finally:
        srv.close()
    return sim, e.svc


@pytest.mark.parametrize("kind", ["fixed", "dynamic"])
def test_price_cost_and_peak_reach_a_real_broker_with_discovery(tmp_path, monkeypatch, certs, kind):
    monkeypatch.chdir(tmp_path)
    sim, svc = priced(tmp_path) if kind == "fixed" else dynamic(tmp_path)
    recs = [r for r in sim.hr() if r[2] == sim.h._day[0]]
    want_today = cents(sum(r[10] for r in recs))
    assert all(r[5] & hs.F_IC for r in recs)
    broker = Broker(str(tmp_path / "broker")).start()
    try:
        sub = Subscriber(broker.port, topics=("homeassistant/#", PREFIX + "/#"))
        dev = Device(tmp_path, port=broker.port)
        dev.svc.money = svc.money_values
        try:
            dev.run(until=dev.connected)
            keys = ("price", "cost_today", "cost_month", "peak_month")
            wanted = {PREFIX + "/" + k for k in keys}
            wanted |= {"homeassistant/sensor/wattwaechter_%s/%s/config" % (DEV, k) for k in keys}
            dev.run(until=lambda: wanted <= {m[0] for m in sub.snapshot()})
            got = {t: p for t, p, _r, _ in sub.snapshot()}
        finally:
            dev.close()
    finally:
        broker.stop()
    now = sim.clock.time()
    if kind == "fixed":
        assert got[PREFIX + "/price"] == b"0.3012"
    else:
        market = Decimal(svc.book.price(now - now % 900)) / 10 ** 6
        want = ((market + Decimal("0.1532")) * Decimal("1.19")).quantize(Decimal("0.000001"), ROUND_HALF_UP)
        assert Decimal(got[PREFIX + "/price"].decode()) == want
        for r in recs:    # each booked quarter hour: its energy times the price then in force, to the micro-unit
            m = Decimal(svc.book.price(r[1])) / 10 ** 6
            p = ((m + Decimal("0.1532")) * Decimal("1.19")).quantize(Decimal("0.000001"), ROUND_HALF_UP)
            assert r[10] == (Decimal(r[8]) / 10000 * p * 10 ** 6).quantize(Decimal(1), ROUND_HALF_UP)
    assert got[PREFIX + "/cost_today"].decode() == want_today
    assert got[PREFIX + "/cost_month"].decode() == cents(sum(r[10] for r in sim.hr()))   # all of it this month
    peak = max(r[8] for r in recs)
    assert Decimal(got[PREFIX + "/peak_month"].decode()) == Decimal(peak) * 4 / 10
    cfg = {k: json.loads(got["homeassistant/sensor/wattwaechter_%s/%s/config" % (DEV, k)]) for k in keys}
    assert cfg["price"]["unit_of_measurement"] == "EUR/kWh" and "device_class" not in cfg["price"]
    for k in ("cost_today", "cost_month"):
        assert (cfg[k]["device_class"], cfg[k]["state_class"], cfg[k]["unit_of_measurement"]) == \
            ("monetary", "total", "EUR")
    assert cfg["peak_month"]["device_class"] == "power" and cfg["peak_month"]["unit_of_measurement"] == "W"
    assert cfg["cost_today"]["unique_id"] == "wattwaechter_%s_cost_today" % DEV
    assert cfg["cost_today"]["state_topic"] == PREFIX + "/cost_today"


def test_metrics_carry_the_same_money(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sim, svc = priced(tmp_path)
    out = []
    money_lines(out, svc.money_values(metrics=True))
    text = "".join(out)
    recs = [r for r in sim.hr() if r[2] == sim.h._day[0]]
    assert 'meterplus_tariff_import_price{currency="EUR"} 0.3012\n' in text
    assert 'meterplus_import_cost_today{currency="EUR"} %s\n' % cents(sum(r[10] for r in recs)) in text
    assert 'meterplus_import_cost_month{currency="EUR"} %s\n' % cents(sum(r[10] for r in recs)) in text
    assert "meterplus_peak_quarter_hour_power_watts " in text and "# TYPE meterplus_import_cost_today gauge" in text
    # off: no money lines at all (never a 0 that looks like a price)
    sim.settings.values["tariff.mode"] = "off"
    svc.tariff.load()
    out = []
    money_lines(out, svc.money_values(metrics=True))
    assert out == []
