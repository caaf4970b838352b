"""Runs code.py inside CircuitPython's unix port with the bench's hardware stand-ins and measures it.

Started by bench/bench_device.py as `micropython -X heapsize=N runner.py <seconds> <mode>` in a staged drive folder
(firmware + lib/ + the stand-ins in hw/). Replays an SML meter (one telegram per second, counters rising), sends
HTTP requests to the API and the web page, reads the SunSpec map over Modbus TCP, and answers the MQTT client as a
broker, all through the in-memory socketpool. Prints one line `@@BENCH@@ {json}` at the end.
"""

import gc
import sys
import time as _unix_time   # the port's built-in time, before hw/time.py (CircuitPython's time) shadows it

# "frozen": the firmware and libraries are frozen into the interpreter (bench_device.build_frozen); they win
# over the drive, as frozen modules do on a CircuitPython board.
sys.path[:0] = ["hw", ".frozen", ".", "lib"] if "frozen" in sys.argv[3:] else ["hw", ".", "lib"]

import time  # noqa: E402

time._rt = _unix_time

import json  # noqa: E402

import _hostenv  # noqa: E402
import socketpool  # noqa: E402

from meter import sml_encode as enc  # noqa: E402

SECONDS = int(sys.argv[1]) if len(sys.argv) > 1 else 60
MODE = sys.argv[2] if len(sys.argv) > 2 else "run"   # "run": all traffic; "boot": the boot check only
EMULATION = "emulation" in sys.argv[3:]              # both meter emulations on too (bench_device --emulation)
HTTP_PATHS = ("/api/v1/system/alive", "/api/v1/history/latest", "/api/v1/system/info", "/",
              "/api/v1/history/highRes?date=2026-01-01", "/api/v1/settings", "/api/v1/mqtt/status",
              "/api/v1/modbus/status")
HTTP_EVERY_MS = 500
MODBUS_EVERY_MS = 1000
IDLE_SLEEP_S = 0.005


def stand_ins():
    """The hardware stand-ins staged in hw/ (C modules on the device)."""
    import os

    return [f[:-3] for f in os.listdir("hw") if f.endswith(".py")]


class SmlMeter:
    """A household meter on the IR head: one SML telegram per second, import counter rising at about 1 kW."""

    SERVER_ID = b"\x0a\x01\x44\x5a\x47\x00\x28\xaf\x9a\x58"

    def __init__(self):
        self.next_s = 1
        self.seq = 0
        self.import_dwh = 123456789
        self.telegrams = 0

    def read_available(self, now_s, uart=None):
        if now_s < self.next_s:
            return b""
        self.next_s = int(now_s) + 1
        self.seq += 1
        self.import_dwh += 3     # 0.3 Wh per second: about 1 kW
        entries = [
            enc.entry(enc.obis_name("1.8.0"), self.import_dwh, 30, -1, signed=False),
            enc.entry(enc.obis_name("2.8.0"), 4567, 30, -1, signed=False),
            enc.entry(enc.obis_name("16.7.0"), 1080, 27, 0, signed=True, width=4),
            enc.entry(enc.obis_name("36.7.0"), 360, 27, 0, signed=True),
            enc.entry(enc.obis_name("56.7.0"), 360, 27, 0, signed=True),
            enc.entry(enc.obis_name("76.7.0"), 360, 27, 0, signed=True),
        ]
        self.telegrams += 1
        return enc.transport(enc.sml_file(self.SERVER_ID, entries, self.seq))


class HttpClient:
    """One request on its own connection; done when the firmware closed it, status from the first line."""

    def __init__(self, path):
        self.path = path
        self.end = socketpool.connect_to_listener(80)
        self.status = None
        self.size = 0
        if self.end is not None:
            self.end.write(("GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept-Encoding: gzip\r\n"
                            "Connection: close\r\n\r\n" % (path,)).encode())

    def done(self):
        if self.end is None:
            self.status = 0
            return True
        if not self.end.peer.closed:
            return False
        head = bytes(self.end.inbound[:16])
        self.size = len(self.end.inbound)
        self.status = int(head[9:12]) if head.startswith(b"HTTP/1.1 ") else -1
        self.end.inbound = bytearray()
        self.end.close()
        return True


class ModbusClient:
    """Reads the SunSpec header (registers 40000..40001) once per request on a connection it keeps."""

    def __init__(self):
        self.end = None
        self.tid = 0
        self.ok = 0
        self.bad = 0
        self.waiting = False

    def request(self):
        if self.end is None or self.end.peer.closed:
            self.end = socketpool.connect_to_listener(502)
            if self.end is None:
                return
        if self.waiting:
            return
        self.tid = (self.tid + 1) & 0xFFFF
        self.end.write(bytes((self.tid >> 8, self.tid & 255, 0, 0, 0, 6, 1, 3, 0x9C, 0x40, 0, 2)))
        self.waiting = True

    def poll(self):
        if self.end is None or not self.waiting or len(self.end.inbound) < 13:
            return
        frame = bytes(self.end.inbound[:13])
        self.end.inbound = self.end.inbound[13:]   # MicroPython bytearrays have no slice deletion
        self.waiting = False
        if frame[7] == 3 and frame[9:13] == b"SunS":
            self.ok += 1
        else:
            self.bad += 1


class MqttBroker:
    """Just enough of a broker: CONNACK, SUBACK, PUBACK, PINGRESP; counts what the firmware publishes."""

    def __init__(self):
        self.ends = []
        self.connects = 0
        self.publishes = 0

    def accept(self, end):
        self.ends.append(end)

    def poll(self):
        for end in self.ends:
            while True:
                packet = self._take(end)
                if packet is None:
                    break
                kind, body = packet
                if kind == 1:
                    self.connects += 1
                    end.write(b"\x20\x02\x00\x00")
                elif kind == 8:
                    end.write(bytes((0x90, 3, body[0], body[1], 0)))
                elif kind == 3:
                    self.publishes += 1
                    qos = (end.last_flags >> 1) & 3
                    if qos:
                        topic_len = (body[0] << 8) | body[1]
                        pid = body[2 + topic_len: 4 + topic_len]
                        end.write(b"\x40\x02" + pid)
                elif kind == 12:
                    end.write(b"\xd0\x00")
        self.ends = [e for e in self.ends if not e.closed and not e.peer.closed]

    @staticmethod
    def _take(end):
        data = end.inbound
        if len(data) < 2:
            return None
        length, shift, i = 0, 0, 1
        while True:
            if i >= len(data):
                return None
            b = data[i]
            length |= (b & 127) << shift
            shift += 7
            i += 1
            if not b & 128:
                break
        if len(data) < i + length:
            return None
        end.last_flags = data[0] & 15
        kind = data[0] >> 4
        body = bytes(data[i:i + length])
        end.inbound = data[i + length:]
        return kind, body


def write_settings():
    """The drive as a user who turned on every feature leaves it: WiFi, MQTT and Modbus on; with EMULATION also
    both meter emulations (the Shelly with one UDP port, as docs/api.md's socket budget asks beside Modbus)."""
    doc = {"wifi": {"primary": {"ssid": "HostNetwork", "password": "host-password"}},
           "mqtt": {"enable": True, "host": "10.0.0.2", "port": 1883, "sendInterval": 5},
           "modbus": {"enable": True, "port": 502, "model": 213}}
    if EMULATION:
        doc["emulation"] = {"shelly": True, "shellyUdpPort": 1010, "shellyUdpPort2": 0, "sma": True}
    with open("settings.json", "w") as f:
        json.dump(doc, f)


def main():
    write_settings()
    meter = SmlMeter()
    _hostenv.meter_source = meter
    broker = MqttBroker()
    socketpool.peers[1883] = broker.accept
    result = {"mode": MODE, "seconds": SECONDS, "heap_total": gc.mem_free() + gc.mem_alloc()}

    with open("code.py") as f:
        source = f.read()
    tail = "\nrun(build())"
    if source.count(tail) != 1:
        raise SystemExit("code.py no longer ends with run(build()): update bench/device/runner.py")
    code_globals = {"__name__": "__main__"}
    # The stand-ins are C modules on the device: imported before the baseline, so no figure counts them.
    for name in stand_ins():
        __import__(name)
    gc.collect()
    base = gc.mem_alloc()
    t0 = _unix_time.ticks_ms()
    exec(source.replace(tail, "\n"), code_globals)   # imports, arms the watchdog, defines build() and run()
    feature_heap = {}
    wire_feature = code_globals["wire_feature"]

    def measured_wire_feature(app, name, module_name):
        """code.py's wire_feature, with the heap each feature holds once wired (code and data)."""
        gc.collect()
        before = gc.mem_alloc()
        wire_feature(app, name, module_name)
        gc.collect()
        feature_heap[name] = gc.mem_alloc() - before

    code_globals["wire_feature"] = measured_wire_feature
    app = code_globals["build"]()
    gc.collect()
    result["build_ms"] = _unix_time.ticks_diff(_unix_time.ticks_ms(), t0)
    result["after_build"] = gc.mem_alloc() - base
    result["after_build_abs"] = gc.mem_alloc()
    sup = app.supervisor
    app.log.info("Meter Plus up, device %s", app.device_id)

    held_min = held_max = None
    statuses = {}
    clients = []
    modbus = ModbusClient()
    next_http = _unix_time.ticks_add(_unix_time.ticks_ms(), 2000)
    next_modbus = _unix_time.ticks_add(_unix_time.ticks_ms(), 2500)
    path_i = 0
    start = _unix_time.ticks_ms()
    cycles = 0
    while _unix_time.ticks_diff(_unix_time.ticks_ms(), start) < SECONDS * 1000:
        sup.step()
        cycles += 1
        broker.poll()
        modbus.poll()
        now = _unix_time.ticks_ms()
        if len(clients) < 2 and _unix_time.ticks_diff(now, next_http) >= 0:
            clients.append(HttpClient(HTTP_PATHS[path_i % len(HTTP_PATHS)]))
            path_i += 1
            next_http = _unix_time.ticks_add(now, HTTP_EVERY_MS)
        if MODE == "run" and _unix_time.ticks_diff(now, next_modbus) >= 0:
            modbus.request()
            next_modbus = _unix_time.ticks_add(now, MODBUS_EVERY_MS)
        still = []
        for c in clients:
            if c.done():
                key = "%s %d" % (c.path, c.status)
                statuses[key] = statuses.get(key, 0) + 1
            else:
                still.append(c)
        clients = still
        if cycles > 200:   # after the start-up allocations: what the running firmware holds
            held = gc.mem_alloc() - base   # the supervisor collected at the end of the step
            if held_min is None or held < held_min:
                held_min = held
            if held_max is None or held > held_max:
                held_max = held
        _unix_time.sleep(IDLE_SLEEP_S)
        if MODE == "boot" and statuses.get("/api/v1/history/latest 200") and cycles > 200:
            break
    elapsed = _unix_time.ticks_diff(_unix_time.ticks_ms(), start)
    desc = sup.describe()
    import microcontroller

    result.update({
        "cycles": cycles, "elapsed_ms": elapsed, "cycles_per_s": cycles * 1000 // max(1, elapsed),
        "held_min": held_min, "held_max": held_max, "worst_cycle_ms": desc["worst_cycle_ms"],
        "watchdog_longest_gap_ms": microcontroller.watchdog.longest_gap_ms,
        "worst_poll_ms": {name: m["worst_poll_ms"] for name, m in desc["modules"].items()},
        "module_states": {name: m["state"] for name, m in desc["modules"].items()},
        "module_errors": {mod.name: str(mod.last_error) for mod in sup.modules()
                          if getattr(mod, "last_error", None)},
        "http": statuses, "telegrams": meter.telegrams,
        "mqtt_connects": broker.connects, "mqtt_publishes": broker.publishes,
        "modbus_ok": modbus.ok, "modbus_bad": modbus.bad,
        "sockets_open": socketpool.open_count(),
        # Parts that load only while in use (services/network/ble_on_demand.py, services/ota/service.py).
        "loaded": sorted(n for n in ("adafruit_ble", "drivers.ble_provision", "services.ota.signature",
                                     "services.ota.http_get", "services.ota.upload") if n in sys.modules),
        "features_off": app.features_off,
        "feature_heap": feature_heap,
        "log": log_lines(app)[-30:],
    })
    sup.stop_all()
    print("@@BENCH@@ " + json.dumps(result))


def log_lines(app):
    """The firmware log's messages, oldest first."""
    try:
        return [str(e) for e in app.log.entries()]
    except Exception as exc:
        return ["(log unreadable: %r)" % exc]


try:
    main()
except MemoryError as exc:
    print("@@BENCH@@ " + json.dumps({"memory_error": str(exc)}))
    sys.exit(4)
