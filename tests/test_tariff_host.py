"""The whole firmware on the host runtime with a dynamic tariff served by the local price stand-in: the settings
POSTed as raw JSON numbers come back as the same numbers, and /api/v1/cost, /api/v1/tariff, /api/v1/peaks and
/metrics agree with the booked quarter hours (energy x price to the cent)."""

import json
import os
import urllib.request
from decimal import ROUND_HALF_UP, Decimal

import pytest

from host.ntp_server import scaled_clock, start_ntp_server
from tests.hostproc import HostProcess, meter_time_args
from tests.price_server import PriceServer

pytestmark = pytest.mark.slow

EPOCH0 = 1_792_800_000       # 2026-10-24 ~00:00 UTC: the energy-charts capture covers 24 and 25 October (DST)


def raw_post(host, path, text):
    req = urllib.request.Request(host.url + path, data=text.encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.status, json.loads(r.read())


def test_dynamic_tariff_end_to_end_on_the_host_runtime(tmp_path):
    srv = PriceServer()
    sim = scaled_clock(300.0, EPOCH0)
    h, p, stop_ntp = start_ntp_server(clock=sim)
    drive = tmp_path / "drive"
    os.makedirs(drive)
    with open(drive / "settings.json", "w") as f:
        json.dump({"history": {"flushMinutes": 1}}, f)
    host = HostProcess(drive, args=["--speed", "300", "--ntp", "%s:%d" % (h, p)] + meter_time_args(EPOCH0)).start()
    try:
        status, answer = raw_post(host, "/api/v1/settings", '{"tariff": {"mode": "dynamic", "surcharge": 0.1532, '
                                  '"vatPercent": 19, "exportPrice": 0.0786, "priceUrl": "%s"}}' % srv.energy_charts_url)
        assert status == 200 and answer["success"]
        st, doc, _ = host.get("/api/v1/settings")
        raw = urllib.request.urlopen(host.url + "/api/v1/settings", timeout=10).read().decode()
        assert '"surcharge":0.1532' in raw and doc["tariff"]["vatPercent"] == 19
        t = host.wait_for(lambda: (lambda r: r[1] if r[0] == 200 and r[1]["fetch"]["state"] == "ok" else None)(
            host.get("/api/v1/tariff?hours=3")), timeout=60)
        assert srv.requests and t["now"]["import_price"] is not None and len(t["prices"]) == 144
        assert t["cheapest"]["tomorrow"] is not None
        # quarter hours accrue (3 s each at --speed 300)
        cost = host.wait_for(lambda: (lambda r: r[1] if r[0] == 200 and sum(
            1 for i in r[1]["items"] if i["import_cost"] is not None) >= 3 else None)(
            host.get("/api/v1/cost?resolution=quarter")), timeout=90)
        prices = {q["timestamp"]: q for q in host.get("/api/v1/tariff")[1]["prices"]}
        tariff = host.get("/api/v1/tariff")[1]
        assert tariff["mode"] == "dynamic"
        # from=today: the same prices from today's local midnight on (the page's curve), the same end; bad: 400
        whole = host.get("/api/v1/tariff?from=today")[1]["prices"]
        assert whole[0]["start"][11:] == "00:00" and whole[-1]["timestamp"] >= tariff["prices"][-1]["timestamp"]
        assert [b["timestamp"] - a["timestamp"] for a, b in zip(whole, whole[1:])] == [900] * (len(whole) - 1)
        assert whole[0]["timestamp"] < tariff["prices"][0]["timestamp"] or whole[0]["start"][11:] == "00:00"
        by_ts = {p["timestamp"]: p for p in whole}
        assert all(by_ts[p["timestamp"]] == p for p in tariff["prices"] if p["timestamp"] in by_ts)
        assert host.get("/api/v1/tariff?from=yesterday")[0] == 400
        for item in cost["items"]:
            if item["import_cost"] is None:
                continue
            # the market price of that quarter hour from the price file on the drive, with the markups
            price = _price_on_drive(str(drive), item["timestamp"])
            kwh = Decimal(str(item["import_kwh"]))
            assert Decimal(str(item["import_cost"])) == (kwh * price).quantize(Decimal("0.01"), ROUND_HALF_UP)
        assert set(cost["today"]) >= {"import_kwh", "import_cost", "export_kwh", "export_revenue"}
        st, peaks, _ = host.get("/api/v1/peaks")
        assert st == 200 and peaks["current"]["quarter_peak"] is not None
        st, metrics, _ = host.get("/metrics")
        text = metrics.decode() if isinstance(metrics, bytes) else metrics
        assert 'meterplus_tariff_import_price{currency="EUR"}' in text
        assert prices is not None
    finally:
        host.stop()
        stop_ntp()
        srv.close()


def _price_on_drive(drive, t):
    from core.durable_file import read_text

    text = read_text(os.path.join(drive, "tariff", "prices.txt"), lambda s: s)   # as stored (core/durable_file.py)
    lines = text.split("\n")[1:]
    for line in lines:
        if not line:
            continue
        _day, start, n, vals = line.split(" ")
        i = (t - int(start)) // 900
        if 0 <= i < int(n):
            market = Decimal(int(vals.split(",")[i])) / 10 ** 6
            return ((market + Decimal("0.1532")) * Decimal("1.19")).quantize(Decimal("0.000001"), ROUND_HALF_UP)
    raise AssertionError("no price for %d" % t)
