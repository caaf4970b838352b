"""The Prometheus text format (version 0.0.4) of the device's state: exact numbers, a fixed order, no floats."""

from adafruit_ticks import ticks_diff

from core.elapsed import fresh
from core.version import VERSION
from meter import obis
from meter.decimal import to_str

STALE_MS = 15000   # a reading older than this is not exported (the meter is down): no old value, ever

# (OBIS kind, metric name, type, help): energies as counters in Wh, the rest as gauges in base units.
_KIND_METRIC = (
    ("energy", "meterplus_energy_wh_total", "counter", "Meter energy register in Wh, by OBIS code"),
    ("power", "meterplus_power_watts", "gauge", "Active power in W, by OBIS code (negative: export)"),
    ("voltage", "meterplus_voltage_volts", "gauge", "Voltage in V, by OBIS code"),
    ("current", "meterplus_current_amperes", "gauge", "Current in A, by OBIS code"),
    ("frequency", "meterplus_frequency_hertz", "gauge", "Grid frequency in Hz"),
)


def _label(value):
    """A label value with Prometheus' escapes (backslash, quote, newline)."""
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _head(out, name, kind, text):
    out.append("# HELP %s %s\n# TYPE %s %s\n" % (name, text, name, kind))


def _sample(out, name, value, labels=""):
    out.append("%s%s %s\n" % (name, "{%s}" % labels if labels else "", value))


def meter_lines(out, reading, now_ms, energy_floor=None):
    """The meter's values (fresh readings only) and its up/age gauges."""
    live = reading is not None and fresh(reading.ts_ms, now_ms, STALE_MS)
    _head(out, "meterplus_meter_up", "gauge", "1 while the meter sends fresh readings, else 0 (values then absent)")
    _sample(out, "meterplus_meter_up", 1 if live else 0)
    if not live:
        return
    _head(out, "meterplus_reading_age_seconds", "gauge", "Age of the exported reading")
    _sample(out, "meterplus_reading_age_seconds", to_str(max(0, ticks_diff(now_ms, reading.ts_ms)), -3))
    values = energy_floor.filter(reading.values) if energy_floor is not None else reading.values
    for kind, name, mtype, text in _KIND_METRIC:
        rows = [c for c in obis.CODES if obis.kind(c) == kind and values.get(c) is not None]
        if not rows:
            continue
        _head(out, name, mtype, text)
        for code in rows:   # the OBIS table's order, never a dict's
            m, e = values[code]
            _sample(out, name, to_str(m, e), 'obis="%s",name="%s"' % (code, obis.ROWS[obis.slot(code)][1]))


def device_lines(out, device_id, uptime_s, free, largest, rssi, wifi_up, mqtt_state, cycle_ms, polls):
    """Device health: identity, uptime, heap, WiFi, MQTT, loop timing (polls: [(module, worst ms)] sorted)."""
    _head(out, "meterplus_info", "gauge", "Firmware version and device id (always 1)")
    _sample(out, "meterplus_info", 1, 'version="%s",device_id="%s"' % (_label(VERSION), _label(device_id)))
    _head(out, "meterplus_uptime_seconds", "gauge", "Seconds since the firmware started")
    _sample(out, "meterplus_uptime_seconds", uptime_s)
    if free is not None:
        _head(out, "meterplus_heap_free_bytes", "gauge", "Free heap")
        _sample(out, "meterplus_heap_free_bytes", free)
    if largest is not None:
        _head(out, "meterplus_heap_largest_free_block_bytes", "gauge", "Largest free heap block")
        _sample(out, "meterplus_heap_largest_free_block_bytes", largest)
    _head(out, "meterplus_wifi_connected", "gauge", "1 while the station is joined to a network")
    _sample(out, "meterplus_wifi_connected", 1 if wifi_up else 0)
    if wifi_up and rssi is not None:
        _head(out, "meterplus_wifi_rssi_dbm", "gauge", "Signal strength of the joined network")
        _sample(out, "meterplus_wifi_rssi_dbm", rssi)
    if mqtt_state is not None:
        _head(out, "meterplus_mqtt_connected", "gauge", "1 while connected to the MQTT broker")
        up = 1 if mqtt_state == "CONNECTED" else 0
        _sample(out, "meterplus_mqtt_connected", up, 'state="%s"' % _label(mqtt_state.lower()))
    _head(out, "meterplus_cycle_worst_ms", "gauge", "Longest supervisor cycle since start, in ms")
    _sample(out, "meterplus_cycle_worst_ms", cycle_ms)
    if polls:
        _head(out, "meterplus_poll_worst_ms", "gauge", "Longest poll of each module since start, in ms")
        for name, ms in polls:
            _sample(out, "meterplus_poll_worst_ms", ms, 'module="%s"' % _label(name))


# (key of services.tariff.service.TariffService.metric_values(), metric name, help)
_MONEY = (
    ("price", "meterplus_tariff_import_price", "Import price in force now, currency per kWh"),
    ("cost_today", "meterplus_import_cost_today", "Import cost booked today (quarter hours closed so far)"),
    ("cost_month", "meterplus_import_cost_month", "Import cost booked this month"),
    ("revenue_today", "meterplus_export_revenue_today", "Feed-in revenue booked today"),
    ("revenue_month", "meterplus_export_revenue_month", "Feed-in revenue booked this month"),
    ("peak_month", "meterplus_peak_quarter_hour_power_watts", "Highest quarter-hour average import power this month"),
)


def money_lines(out, money):
    """The tariff's values: money = (currency, [(key, exact text)]) or None (tariff off); unknown values are absent,
    never 0."""
    if money is None:
        return
    currency, values = money
    have = {}
    for k, text in values:
        have[k] = text
    for k, name, text in _MONEY:   # this table's order, never a dict's
        v = have.get(k)
        if v is None:
            continue
        _head(out, name, "gauge", text)
        _sample(out, name, v, "" if k == "peak_month" else 'currency="%s"' % _label(currency))
