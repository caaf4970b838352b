"""The start's way to the first reading (issue 35 point 3): the features after MQTT wait for the first reading on
MQTT, the HTTP API holds the next wiring back for a client's next request, and what the first reading does not need
is not imported for it (the MQTT CA store, the D0 decoder for an SML meter)."""

import os
import subprocess
import sys

import socketpool
from adafruit_httpserver import GET, JSONResponse, Route

from core.app import App
from core.bus import Bus
from core.log import Log
from core.settings import Settings
from services.api.auth import Tokens
from services.api.service import HttpApi
from services.mqtt import service as m
from tests.inproc import exchange, server_port
from tests.steppedclock import SteppedClock
from tests.test_features import _code_py_namespace, _StartingApp
from tests.test_mqtt_wire import Rig

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class _Mqtt:
    out = False

    def reading_out(self):
        return self.out


def _wiring(monkeypatch, tmp_path, names):
    ns = _code_py_namespace(monkeypatch, tmp_path)
    clock = SteppedClock(start=(1 << 29) - 700)      # the wait spans the tick wrap
    ns["ticks_ms"] = clock
    wired = []
    ns["wire_feature"] = lambda app, name, module_name: wired.append(name)
    app = _StartingApp(names)
    app.mqtt = None
    return ns, clock, wired, app


def test_the_features_after_mqtt_wait_for_the_first_reading_then_go_on_a_cycle_later(monkeypatch, tmp_path):
    ns, clock, wired, app = _wiring(monkeypatch, tmp_path, ["mqtt", "clock", "history"])
    names = [n for n, _ in ns["FEATURES"]]
    assert names[ns["WIRED_BEFORE_READING"] - 1] == "mqtt" and names[ns["WIRED_BEFORE_READING"]] == "mdns"
    assert ns["wire_next"](app) is True and wired == ["mqtt"]
    app.mqtt = _Mqtt()                                # what services/mqtt/wiring.py left on app
    for _ in range(5):
        assert ns["wire_next"](app) is False and wired == ["mqtt"]    # waiting: the loop's idle wait runs
        clock.advance(ns["READING_WAITS_MS"] // 10)
    app.mqtt.out = True
    assert ns["wire_next"](app) is False and wired == ["mqtt"]        # out at the end of this cycle
    assert ns["wire_next"](app) is True and wired == ["mqtt", "clock"]    # wired in the next one
    app.mqtt.out = False                              # a reconnect later on holds nothing back any more
    assert ns["wire_next"](app) is True and wired == ["mqtt", "clock", "history"]
    assert app.logged == ["Meter Plus up, device 024d50000001"]


def test_the_wait_for_the_first_reading_ends_after_reading_waits_ms(monkeypatch, tmp_path):
    """No meter on the head, or a broker that takes a reading but never gets one: the start goes on."""
    ns, clock, wired, app = _wiring(monkeypatch, tmp_path, ["clock", "history"])
    app.mqtt = _Mqtt()
    assert ns["wire_next"](app) is False
    clock.advance(ns["READING_WAITS_MS"] - 1)
    assert ns["wire_next"](app) is False and wired == []
    clock.advance(1)
    assert ns["wire_next"](app) is False and wired == []              # the deadline: noted at the end of a cycle
    assert ns["wire_next"](app) is True and wired == ["clock"]


def test_without_mqtt_nothing_waits_for_a_reading(monkeypatch, tmp_path):
    ns, clock, wired, app = _wiring(monkeypatch, tmp_path, ["clock", "history"])
    assert ns["wire_next"](app) is True and wired == ["clock"]        # app.mqtt None: off, or out of memory


def test_reading_out_says_when_the_first_reading_went_to_the_broker():
    r = Rig(topic_prefix="a")
    assert r.svc.reading_out() is False               # started, not connected yet
    r.connect()
    assert r.svc.conn_state == m.CONNECTED and r.svc.reading_out() is False   # no reading: only `meter offline`
    r.reading({"16.7.0": (15, -1)})
    r.step(polls=10)
    assert r.svc.reading_out() is True
    assert Rig(enable=False).svc.reading_out() is True          # off: nothing will ever go
    assert Rig(host="").svc.reading_out() is True               # a configuration that cannot connect
    unstarted = m.MqttService(r.pool, Bus(), r.settings, "024d50000001")
    assert unstarted.reading_out() is False


def test_the_mqtt_ca_store_is_made_when_first_asked_for(tmp_path):
    r = Rig(topic_prefix="a")
    path = str(tmp_path / "mqtt_ca.pem")
    svc = m.MqttService(r.pool, Bus(), r.settings, "024d50000001", ca_path=path)
    ca = svc.ca
    assert ca is svc.ca and ca.path == path and ca.status()["has_custom_cert"] is False
    assert m.MqttService(r.pool, Bus(), r.settings, "024d50000001").ca is None


IMPORTS_PROBE = r"""
import sys
sys.path[:0] = [%r, %r]
from tests.test_pipeline import Rig, telegram
import services.mqtt.wiring
rig = Rig()
rig.send(telegram(12345, 678))
print("meter.d0" in sys.modules, "services.mqtt.ca_store" in sys.modules, len(rig.drain()))
"""


def test_the_first_reading_imports_neither_the_d0_decoder_for_an_sml_meter_nor_the_mqtt_ca_store():
    out = subprocess.run([sys.executable, "-c", IMPORTS_PROBE % (os.path.join(ROOT, "host", "cp"), ROOT)],
                         capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.stdout.split() == ["False", "False", "1"], out.stderr


def test_the_api_is_busy_for_a_moment_after_a_request(tmp_path):
    """A client's next request (the page's next file, a script's next call) comes right after an answer: code.py's
    start wires its next feature (a long step with nothing answered) after that, not in between."""
    clock = SteppedClock()
    app = App(Bus(), Settings(str(tmp_path / "settings.json"), zone_ok=lambda z: True), Log(echo=None))
    app.auth = Tokens(str(tmp_path / "tokens.json"))
    app.mem_free = lambda: 10 ** 6

    class Alive:
        OPEN_PATHS = ("/api/v1/system/alive",)

        @staticmethod
        def routes(app):
            return [Route("/api/v1/system/alive", GET, lambda request: JSONResponse(request, {"alive": True}))]

    api = HttpApi(socketpool.SocketPool(None), app, host="127.0.0.1", port=0, route_modules=[Alive], ticks=clock)
    api.start()
    try:
        assert api.busy() is False
        raw = exchange(server_port(api), b"GET /api/v1/system/alive HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
                       lambda: api.poll(clock()), polls=60, wait=0.05)
        assert raw.startswith(b"HTTP/1.1 200")
        api.poll(clock())                              # the connection is closed
        assert api._server.connections() == 0 and api.busy() is True
        clock.advance(api.follow_up_ms - 1)
        assert api.busy() is True
        clock.advance(1)
        assert api.busy() is False
    finally:
        api.stop()
