"""GET /metrics: the Prometheus text format of the meter's values and the device's health (READ token when
authentication is on; counted against the API's request budget)."""

from adafruit_httpserver import GET, Response, Route
from adafruit_ticks import ticks_ms

from services.metrics.exposition import device_lines, meter_lines, money_lines

PATH = "/metrics"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def routes(app):
    """[Route] of the scrape endpoint; app: core.app.App (bus, supervisor, wifi, mqtt, log, heap callables)."""

    def metrics(request):
        now = ticks_ms()
        out = []
        meter_lines(out, app.bus.latest("reading"), now, app.energy_floor)
        sup = app.supervisor.describe()
        polls = sorted((name, m["worst_poll_ms"]) for name, m in sup["modules"].items())
        wifi = app.wifi
        up = wifi is not None and wifi.connected()
        mqtt = app.mqtt
        device_lines(out, app.device_id, app.log.uptime.ms() // 1000,
                     app.mem_free() if app.mem_free is not None else None,
                     app.heap_largest() if app.heap_largest is not None else None,
                     wifi.rssi() if up else None, up, mqtt.conn_state if mqtt is not None else None,
                     sup["worst_cycle_ms"], polls)
        if app.tariff is not None:
            money_lines(out, app.tariff.money_values(metrics=True))
        return Response(request, "".join(out), content_type=CONTENT_TYPE)

    return [Route(PATH, GET, metrics)]
