"""One energy floor for MQTT and the REST API (services/metering/energy_floor.py): never a zero, negative or falling
total, checked directly, through GET /history/latest with aio-wattwaechter, and shared with the MQTT service."""

import asyncio

import pytest
from adafruit_ticks import ticks_ms
from aio_wattwaechter import Wattwaechter

from core.app import App
from core.bus import Bus
from core.log import Log
from core.settings import Settings
from meter.reading import Reading
from services.history import routes as routes_history
from services.metering.energy_floor import EnergyFloor
from tests.inproc import api_in_thread


def test_floor_rule():
    f = EnergyFloor()
    assert f.allow("1.8.0", 1000, 0) and f.allow("1.8.0", 10000, -1)  # equal value, other exponent
    assert not f.allow("1.8.0", 9999, -1) and not f.allow("1.8.0", 0, 0) and not f.allow("1.8.0", -5, 3)
    assert f.allow("1.8.0", 1001, 0) and f.suppressed == 3
    assert f.allow("2.8.0", 1, 0)  # every code has its own floor
    f.seed("1.8.0", 900, 0)        # a lower seed does not lower the floor
    assert not f.allow("1.8.0", 1000, 0)
    f.seed("1.8.0", 2, 3)          # 2000 Wh, e.g. the broker's retained total of an earlier boot
    assert not f.allow("1.8.0", 1999, 0) and f.allow("1.8.0", 2000, 0)
    values = {"1.8.0": (1, 0), "16.7.0": (-50, 0), "2.8.0": (2, 0)}
    assert f.filter(values) == {"16.7.0": (-50, 0), "2.8.0": (2, 0)}  # power passes, whatever its sign
    ok = {"2.8.0": (3, 0), "16.7.0": (0, 0)}
    assert f.filter(ok) is ok


@pytest.fixture
def served():
    bus = Bus()
    app = App(bus, Settings(), Log(capacity=16))
    app.energy_floor = EnergyFloor()
    with api_in_thread(app, [routes_history]) as port:
        yield app, port


def meter_data(port):
    async def go():
        async with Wattwaechter("127.0.0.1:%d" % port) as c:
            return await c.meter_data()
    return asyncio.run(go())


def test_rest_latest_never_hands_out_a_falling_total(served):
    app, port = served
    seen = []
    for wh in (5000, 4000, 0, 6000, 5999, 6001):
        app.bus.publish("reading", Reading(ticks_ms(), {"1.8.0": (wh, 0), "16.7.0": (100, 0)}))
        data = meter_data(port)
        assert data.power == 100  # the rest of the reading is served as before
        seen.append(data.total_consumption)
    assert seen == [5.0, None, None, 6.0, None, 6.001]
    assert app.energy_floor.suppressed == 3


def test_mqtt_and_rest_share_one_floor(served):
    from services.mqtt.service import MqttService
    from tests.test_mqtt_wire import FakePool

    app, port = served
    app.settings.doc["mqtt"].update(enable=True, host="broker.lan")
    svc = MqttService(FakePool(), app.bus, app.settings, "024d50000001", energy_floor=app.energy_floor,
                      rand=lambda n: b"\x00\x00")
    svc.start()
    svc.floor.seed("1.8.0", 7, 3)  # as MQTT does with the broker's retained 7.000 kWh after a reboot
    app.bus.publish("reading", Reading(ticks_ms(), {"1.8.0": (6500, 0)}))
    assert meter_data(port).total_consumption is None
    assert svc.describe()["energy_suppressed"] == 1  # one count for both
    app.bus.publish("reading", Reading(ticks_ms(), {"1.8.0": (7100, 0)}))
    assert meter_data(port).total_consumption == 7.1
