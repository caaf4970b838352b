"""Runs code.py inside CircuitPython's unix port with the bench's hardware stand-ins and measures it.

Started by bench/bench_device.py as `micropython -X heapsize=N runner.py <seconds> <mode> [flags]` in a staged drive
folder (firmware + lib/ + the stand-ins in hw/). Modes: "run" is the standard load (below), "idle" the same firmware
with the meter and the MQTT broker but no client, "boot" only the boot check. Flags: "frozen" (the firmware is in
the interpreter), "nopystone" (skip the CPU benchmark, for the heap bisection).

The standard load (issue 25): one SML telegram per second; the web page's own polls (/history/latest every 4 s,
/system/info every 20 s, today's quarter hours at start); /system/alive and /history/latest once a second each;
a Modbus client reading the SunSpec header and model once a second; MQTT publishing (sendInterval 1 s) to a broker;
a battery asking EM.GetStatus over UDP once a second; Home Assistant's WebSocket on /rpc asking Shelly.GetStatus
every 2 s; the SMA emulation sending; a Prometheus scrape of /metrics every 15 s.

The firmware runs on the device's clock (stand_ins/_hostenv.py): pystone runs first in the same process, and each
supervisor step then takes (this interpreter's pystones / the S3's, 1,000 or `--s3 N`) times as long in device time
as it took here; the loop's 5 ms sleep is 5 ms of device time; the peers' work takes none. So every time the runner
reports (cycles, collections, latencies, the firmware's own timers and deadlines) is in ESP32-S3 microseconds, and a
timer the firmware waits on (the SMA pacing, a poll interval) is waited for as long as on the device. More pystone
samples during the run show how steady the machine was. Prints one line `@@BENCH@@ {json}` at the end.
"""

import array
import gc

import benchclock
from s3_clock import pystone_samples   # imported before the baseline: its code is not the firmware's heap
import sys
import time as _unix_time   # the port's built-in time, before hw/time.py (CircuitPython's time) shadows it

import hashlib as _builtin_hashlib   # MicroPython's; hw/hashlib.py (CircuitPython's new()) wraps it
import os as _builtin_os    # the port's built-in os; hw/os.py (the flash model's hooks) shadows it

FLAGS = sys.argv[3:]
# "frozen": the firmware and libraries are frozen into the interpreter (bench_device.build_frozen); they win
# over the drive, as frozen modules do on a CircuitPython board.
sys.path[:0] = ["hw", ".frozen", ".", "lib"] if "frozen" in FLAGS else ["hw", ".", "lib"]

import time  # noqa: E402

time._rt = _unix_time

import os  # noqa: E402

os._bind(_builtin_os)

import hashlib  # noqa: E402

hashlib._builtin = _builtin_hashlib

import json  # noqa: E402

import _hostenv  # noqa: E402
import socketpool  # noqa: E402

from meter import sml_encode as enc  # noqa: E402

SECONDS = int(sys.argv[1]) if len(sys.argv) > 1 else 60
# Device seconds of the same load before anything is measured: the first minute after a start is the start's
# (MQTT discovery, the first history file, first connections), not what the firmware does all day.
WARMUP_S = 0 if (len(sys.argv) > 2 and sys.argv[2] == "boot") else 60
MODE = sys.argv[2] if len(sys.argv) > 2 else "run"
EMULATION = True             # both meter emulations on in every mode (the standard load has them)
IDLE_SLEEP_MS = 5             # code.py's IDLE_SLEEP_S: real time on the device as here
PYSTONE_LOOPS = 20000
S3_PYSTONES = int(sys.argv[sys.argv.index("--s3") + 1]) if "--s3" in sys.argv else 1000   # the S3 reference
HIST_BUCKET_US = 20           # cycle-time histogram: 20 us buckets up to 80 ms, larger ones listed
HIST_BUCKETS = 4000
SHELLY_UDP_PORT = 1010
# With every feature of the standard load on (Modbus listener and client, MQTT, Shelly UDP, SMA, the WebSocket), the
# device's 8 sockets leave one for HTTP clients besides the listener: the bench's HTTP clients take turns, as the
# issue of the socket budget (26) makes the firmware insist on.
HTTP_CLIENTS = 1
# "flash=typ" / "flash=max": the drive on NOR flash (hw/flashfs.py): every write, remove, rename and mkdir of the
# firmware stalls the device clock by the chip's typical or maximum erase and program times; the standard load then
# also makes a history flush, a flash log write and a settings save happen in the measured window (FlashEvents).
FLASH = ([f[6:] for f in FLAGS if f.startswith("flash=")] or [None])[0]


RESIDENT_TOPS = ("core", "drivers", "meter", "services", "adafruit_ticks", "adafruit_httpserver", "adafruit_minimqtt",
                 "adafruit_connection_manager", "adafruit_ble")
# The drive's flash model is the bench's own, not a stand-in for a C module: loaded only with a flash= flag, so a run
# without one (the smallest-heap bisection) has none of its code in the heap.
FLASH_ONLY = ("flashfs", "flash_model")


def stand_ins():
    """The hardware stand-ins staged in hw/ (C modules on the device)."""
    import os

    names = [f[:-3] for f in os.listdir("hw") if f.endswith(".py")]
    return [n for n in names if FLASH is not None or n not in FLASH_ONLY]


class Clock:
    """Marks on the device clock (_hostenv.device_us): a latency is the device time between two marks."""

    def mark(self):
        return _hostenv.device_us()

    def since(self, mark):
        """Device microseconds from mark to now."""
        return _hostenv.device_us() - mark


class Latencies:
    """Latencies of one kind in device microseconds (kept once the warm-up is over: Latencies.on)."""

    on = False

    def __init__(self):
        self.items = []

    def add(self, us):
        if Latencies.on and len(self.items) < 4000:
            self.items.append(us)


class SmlMeter:
    """A household meter on the IR head: one SML telegram per second, import counter rising at about 1 kW.

    The power differs from one telegram to the next (1000 + seq % 997 W), so an answer's power names the telegram
    it came from; the bench turns the median filter off so every reading carries its own telegram's power."""

    SERVER_ID = b"\x0a\x01\x44\x5a\x47\x00\x28\xaf\x9a\x58"

    def __init__(self, clock):
        self.next_s = 1
        self.seq = 0
        self.import_dwh = 123456789
        self.telegrams = 0
        self.clock = clock
        self.sent = {}      # power (W) -> firmware-time mark of the cycle whose step took the telegram's last byte
        self.ready = b""

    def power_of(self, seq):
        return 1000 + seq % 997

    def read_available(self, now_s, uart=None):
        """The telegram made ready in the peers' turn (building it is the meter's work, not the firmware's)."""
        data = self.ready
        if data:
            self.ready = b""
            self.sent[self.power_of(self.seq)] = self.clock.step_start
            self.telegrams += 1
        return data

    def tick(self, now_s):
        """The peers' turn: the next telegram once a second of device time."""
        if now_s < self.next_s or self.ready:
            return
        self.next_s = int(now_s) + 1
        self.seq += 1
        self.import_dwh += 3     # 0.3 Wh per second: about 1 kW
        power = self.power_of(self.seq)
        third = power // 3
        entries = [
            enc.entry(enc.obis_name("1.8.0"), self.import_dwh, 30, -1, signed=False),
            enc.entry(enc.obis_name("2.8.0"), 4567, 30, -1, signed=False),
            enc.entry(enc.obis_name("16.7.0"), power, 27, 0, signed=True, width=4),
            enc.entry(enc.obis_name("36.7.0"), third, 27, 0, signed=True),
            enc.entry(enc.obis_name("56.7.0"), third, 27, 0, signed=True),
            enc.entry(enc.obis_name("76.7.0"), power - 2 * third, 27, 0, signed=True),
        ]
        if len(self.sent) > 64:
            self.sent.pop(self.power_of(self.seq - 64), None)
        # Handed over inside a supervisor step, and timed from that step's start (the conservative end).
        self.ready = enc.transport(enc.sml_file(self.SERVER_ID, entries, self.seq))


class HttpClient:
    """One request on its own connection; done when the firmware closed it, status from the first line."""

    def __init__(self, path, clock, kind=None, extra="", body=None):
        self.path = path
        self.kind = kind
        self.clock = clock
        self.mark = clock.mark()
        self.took = None     # device us from mark to the answer, once done
        self.end = socketpool.connect_to_listener(80)
        self.status = None
        self.size = 0
        method = "GET"
        if body is not None:     # a JSON document POSTed, as a script or the web page sends settings
            method = "POST"
            extra += "Content-Type: application/json\r\nContent-Length: %d\r\n" % len(body)
        if self.end is not None:
            self.end.write(("%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept-Encoding: gzip\r\n%s"
                            "Connection: close\r\n\r\n%s" % (method, path, extra, body or "")).encode())

    def done(self):
        if self.end is None:
            self.status = 0
            return True
        if not self.end.peer.closed:
            return False
        head = bytes(self.end.inbound[:16])
        self.took = self.clock.since(self.mark)
        self.size = len(self.end.inbound)
        self.status = int(head[9:12]) if head.startswith(b"HTTP/1.1 ") else -1
        self.end.inbound = bytearray()
        self.end.close()
        return True


class ModbusClient:
    """An energy manager: the SunSpec header (40000..40001) and the meter model (40002.., 80 registers) once a
    second on a connection it keeps."""

    def __init__(self):
        self.end = None
        self.tid = 0
        self.ok = 0
        self.bad = 0
        self.waiting = 0

    def request(self):
        if self.end is None or self.end.peer.closed:
            self.end = socketpool.connect_to_listener(502)
            if self.end is None:
                return
        if self.waiting:
            return
        for start, count in ((40000, 2), (40002, 80)):
            self.tid = (self.tid + 1) & 0xFFFF
            self.end.write(bytes((self.tid >> 8, self.tid & 255, 0, 0, 0, 6, 1, 3, start >> 8, start & 255,
                                  0, count)))
            self.waiting += 1

    def poll(self):
        while self.end is not None and self.waiting and len(self.end.inbound) >= 9:
            data = self.end.inbound
            size = 6 + ((data[4] << 8) | data[5])
            if len(data) < size:
                return
            frame = bytes(data[:size])
            self.end.inbound = data[size:]   # MicroPython bytearrays have no slice deletion
            self.waiting -= 1
            if frame[7] == 3 and (frame[8] != 4 or frame[9:13] == b"SunS"):
                self.ok += 1
            else:
                self.bad += 1


class MqttBroker:
    """Just enough of a broker: CONNACK, SUBACK, PUBACK, PINGRESP; counts what the firmware publishes and times
    each publish of the power topic (Home Assistant's power entity) against the telegram whose power it carries."""

    def __init__(self, clock, meter):
        self.ends = []
        self.connects = 0
        self.publishes = 0
        self.clock = clock
        self.meter = meter
        self.latency = Latencies()

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
                    topic_len = (body[0] << 8) | body[1]
                    qos = (end.last_flags >> 1) & 3
                    payload_at = 2 + topic_len + (2 if qos else 0)
                    if qos:
                        pid = body[2 + topic_len: 4 + topic_len]
                        end.write(b"\x40\x02" + pid)
                    if body[2:2 + topic_len].endswith(b"/power"):   # Home Assistant's power entity
                        self._time(body[payload_at:])
                elif kind == 12:
                    end.write(b"\xd0\x00")
        self.ends = [e for e in self.ends if not e.closed and not e.peer.closed]

    def _time(self, payload):
        try:
            power = int(payload)
        except ValueError:
            return
        if power is None:
            return
        mark = self.meter.sent.get(power)
        if mark is not None:
            self.latency.add(self.clock.since(mark))

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


def _power_after(data, key):
    """The integer after key (bytes) in data, or None."""
    at = data.find(key)
    if at < 0:
        return None
    at += len(key)
    end = at
    while end < len(data) and (48 <= data[end] <= 57 or data[end] == 45):
        end += 1
    try:
        return int(data[at:end])
    except ValueError:
        return None


class Battery:
    """A battery asking EM.GetStatus over UDP once a second. A telegram's latency ends with the first answer that
    carries its power; it starts at its last byte, or at the first request sent after it (the battery's own
    polling interval is not the firmware's time)."""

    def __init__(self, clock, meter):
        self.clock = clock
        self.meter = meter
        self.id = 0
        self.answers = 0
        self.asked = []            # (firmware mark of the request)
        self.latency = Latencies()
        self.timed = {}
        socketpool.udp_listeners[("10.0.0.50", 40000)] = self._answer

    def ask(self):
        self.id += 1
        req = ('{"id":%d,"method":"EM.GetStatus","params":{"id":0}}' % self.id).encode()
        if socketpool.deliver_udp(SHELLY_UDP_PORT, req, ("10.0.0.50", 40000)):
            self.asked.append(self.clock.mark())
            self.asked = self.asked[-4:]

    def _answer(self, data):
        self.answers += 1
        power = _power_after(data, b'"total_act_power":')
        if power is None or power in self.timed:
            return
        sent = self.meter.sent.get(power)
        if sent is None:
            return
        start = sent
        for mark in self.asked:      # the first request after the telegram
            if mark >= sent:
                start = mark
                break
        self.timed[power] = True
        if len(self.timed) > 64:
            self.timed = {}
        self.latency.add(self.clock.since(start))


class SmaListener:
    """An inverter listening to the SMA Energy Meter datagrams: times each against its telegram (1.4.0, 0.1 W)."""

    def __init__(self, clock, meter):
        self.clock = clock
        self.meter = meter
        self.datagrams = 0
        self.latency = Latencies()
        self.timed = {}
        socketpool.udp_listeners[("239.12.255.254", 9522)] = self._datagram

    def _datagram(self, data):
        self.datagrams += 1
        at = data.find(b"\x00\x01\x04\x00")
        if at < 0:
            return
        v = data[at + 4:at + 8]
        power = ((v[0] << 24) | (v[1] << 16) | (v[2] << 8) | v[3]) // 10
        if power in self.timed:
            return
        sent = self.meter.sent.get(power)
        if sent is None:
            return
        self.timed[power] = True
        if len(self.timed) > 64:
            self.timed = {}
        self.latency.add(self.clock.since(sent))


class NtpServer:
    """The NTP server the firmware asks (getaddrinfo answers 10.0.0.2 for every name): the device clock from
    2026-11-26 00:00 UTC, so the clock syncs and its socket is let go, as on a network with a time server."""

    EPOCH = 1795651200          # 2026-11-26T00:00:00Z
    NTP_DELTA = 2208988800

    def __init__(self):
        self.answers = 0
        # Seconds after the first answer at which a quarter hour ends (flash runs: the history then has a record to
        # flush in the measured window, whatever the first start's stall took); None: the clock from EPOCH.
        self.quarter_after_s = None
        self.hold = None        # a function: True while requests go unanswered (flash runs: until the first start)
        socketpool.udp_listeners[("10.0.0.2", 123)] = self.answer

    def answer(self, request):
        if len(request) < 48 or (self.hold is not None and self.hold()):
            return None
        if self.answers == 0 and self.quarter_after_s is not None:
            self.EPOCH = NtpServer.EPOCH - (_hostenv.sim_ms() // 1000 + self.quarter_after_s) % 900 + 900
        self.answers += 1
        secs = self.EPOCH + self.NTP_DELTA + _hostenv.sim_ms() // 1000
        frac = (_hostenv.sim_ms() % 1000) * 4294967
        stamp = bytes(((secs >> 24) & 255, (secs >> 16) & 255, (secs >> 8) & 255, secs & 255,
                       (frac >> 24) & 255, (frac >> 16) & 255, (frac >> 8) & 255, frac & 255))
        return bytes((0x24, 2, 6, 0xEC)) + bytes(20) + bytes(request[40:48]) + stamp + stamp


class FlashEvents:
    """flash=...: a history flush, a flash log write and a settings save made to happen in the measured window, each
    while a /system/alive request waits. Recorded per kind: the stall of its writes (device us at the typical and the
    maximum figure, whichever the clock was charged), the cycle of the step that wrote, and that alive request's
    latency. The alive request goes out just before the write is armed, so its answer waits for the step with the
    stall. The settings save is an HTTP request itself (a POST of ledEnable, as a script or the web page sends it) and
    the bench has one client place (the socket budget), so its alive request is asked with it and timed from then: a
    client asking while the save runs waits for it."""

    KINDS = (("history_flush", "history/"), ("log_write", "logs/"), ("settings_save", "settings.json"))
    TIMEOUT_MS = 15000

    def __init__(self, app, sup, clock, first_ms, every_ms):
        self.app = app
        self.clock = clock
        self.sup = sup
        self.todo = [[first_ms + i * every_ms, kind, prefix] for i, (kind, prefix) in enumerate(self.KINDS)]
        self.results = {}
        self.cur = None
        self.led = None

    @property
    def slots(self):
        """The supervisor's slots by module name, looked up when asked: code.py wires features from its loop."""
        return {slot.module.name: slot for slot in self.sup._slots}

    def _arm(self, kind):
        """Make the module write in the next cycle (its own flush, as its timer would start it)."""
        if kind == "history_flush":
            slot = self.slots["history"]
            slot.module._flush_at = slot.module._now     # due now: the next poll flushes what RAM holds
        else:
            slot = self.slots["flash_log"]
            self.app.log.warning("bench: a line for the flash log")
            self.cur["flush_ms"] = slot.module.flush_ms
            slot.module.flush_ms = 0                     # due at once: its next poll appends the batch
        slot.due_at = None

    def tick(self, elapsed_ms, clients):
        """The peers' turn: start the next event when its time came and the client place is free; finish one."""
        cur = self.cur
        if cur is None:
            if clients:
                return
            hist = self.slots["history"].module
            ready = [t for t in self.todo if elapsed_ms >= t[0]
                     and (t[1] != "history_flush" or hist.hr or hist.lr)]   # history flushes only what RAM holds
            if not ready:
                return
            self.todo.remove(ready[0])
            _, kind, prefix = ready[0]
            cur = self.cur = {"kind": kind, "prefix": prefix, "at": elapsed_ms, "alive": None, "post": None,
                              "step": None, "mark": self.clock.mark()}
            if kind == "settings_save":
                self.led = not self.app.settings.get("ledEnable", True)     # a change: the document is written
                cur["post"] = HttpClient("/api/v1/settings", self.clock,
                                         body='{"ledEnable": %s}' % ("true" if self.led else "false"))
                clients.append(cur["post"])
            else:
                cur["alive"] = HttpClient("/api/v1/system/alive", self.clock)
                clients.append(cur["alive"])
                self._arm(kind)
            return
        if cur["post"] is not None and cur["alive"] is None and cur["post"].took is not None and not clients:
            alive = HttpClient("/api/v1/system/alive", self.clock)
            alive.mark = cur["mark"]            # asked with the save
            cur["alive"] = alive
            clients.append(alive)
        answered = cur["alive"] is not None and cur["alive"].took is not None
        if (answered and cur["step"] is not None) or elapsed_ms - cur["at"] > self.TIMEOUT_MS:
            step = cur["step"]
            self.results[cur["kind"]] = {
                "stall_us": step[1] if step else None, "stall_us_max": step[2] if step else None,
                "cycle_us": step[0] if step else None, "step_stall_us": step[3] if step else None,
                "alive_us": cur["alive"].took if answered else None,
                "alive_status": cur["alive"].status if answered else None,
                "post_status": cur["post"].status if cur["post"] is not None else None,
                "post_us": cur["post"].took if cur["post"] is not None else None}
            if "flush_ms" in cur:
                self.slots["flash_log"].module.flush_ms = cur["flush_ms"]
            self.cur = None

    def history(self):
        """The history service's counters and what waits in RAM (why a flush event could not happen)."""
        hist = self.slots["history"].module
        return {"counters": hist.counters, "ram": [len(hist.hr), len(hist.lr)]}

    def step_done(self, spent, record):
        """After a supervisor step: its device us and its flash writes (flashfs.take_step())."""
        cur = self.cur
        if cur is None or cur["step"] is not None or not record:
            return
        typ = top = whole = 0
        for path, e in record.items():
            whole += e[1] if FLASH == "typ" else e[2]
            if path.startswith(cur["prefix"]):
                typ += e[1]
                top += e[2]
        if typ:
            cur["step"] = (spent, typ, top, whole)


class WsClient:
    """Home Assistant's Shelly integration: one WebSocket on /rpc, Shelly.GetStatus every 2 s."""

    KEY = "dGhlIHNhbXBsZSBub25jZQ=="

    def __init__(self):
        self.end = None
        self.open = False
        self.answers = 0
        self.id = 0
        self.notify_bytes = None

    def connect(self):
        self.end = socketpool.connect_to_listener(80)
        self.open = False
        if self.end is not None:
            self.end.write(("GET /rpc HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                            "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n" % self.KEY).encode())

    def ask(self):
        if self.end is None or self.end.peer.closed:
            self.connect()
            return
        if not self.open:
            return
        self.id += 1
        payload = ('{"id":%d,"src":"ha","method":"Shelly.GetStatus"}' % self.id).encode()
        mask = b"\x01\x02\x03\x04"
        masked = bytes(b ^ mask[i & 3] for i, b in enumerate(payload))
        self.end.write(bytes((0x81, 0x80 | len(payload))) + mask + masked)

    def poll(self):
        if self.end is None:
            return
        data = self.end.inbound
        if not self.open:
            at = data.find(b"\r\n\r\n")
            if at >= 0 and data.startswith(b"HTTP/1.1 101"):
                self.open = True
                self.end.inbound = data[at + 4:]
            return
        while len(data) >= 2:
            n = data[1] & 127
            head = 2
            if n == 126:
                if len(data) < 4:
                    return
                n = (data[2] << 8) | data[3]
                head = 4
            if len(data) < head + n:
                return
            if data[head:head + 7] == b'{"src":':
                self.notify_bytes = head + n       # a NotifyStatus (an answer starts with its id)
            else:
                self.answers += 1
            data = data[head + n:]
        self.end.inbound = data


def time_notifications(ws, record):
    """Wrap ws._notify (the emulated Shelly's NotifyStatus, issue 39) to add (device us, heap bytes allocated) of
    each call that pushed a reading to record; the calls that pushed nothing (most polls) are not counted."""
    notify = ws._notify

    def timed(now_ms):
        before = ws.counters.get("notified", 0)
        _hostenv.pause()
        a = gc.mem_alloc()
        socketpool.wire_alloc = 0       # the in-memory wire's copies are lwIP's on the device: not counted
        socketpool.wire_us = 0
        _hostenv.resume()
        t = benchclock.cpu_us()
        notify(now_ms)
        spent = int((_hostenv.cpu_us_since(t) - socketpool.wire_us) * _hostenv.factor)
        _hostenv.pause()
        grown = gc.mem_alloc() - a - socketpool.wire_alloc
        socketpool.wire_alloc = None
        _hostenv.resume()
        if ws.counters.get("notified", 0) > before and Latencies.on and grown >= 0:   # < 0: a collection ran
            record.append((spent, grown))

    ws._notify = timed


def time_routes(api, paths, record):
    """Wrap the handlers of api's routes for paths: record[path] gets (device us, heap bytes) of each call, the
    answer's build apart from its way out (issue 35's heavy answers)."""
    for route in api._routes:
        if route.path in paths and not getattr(route, "timed", False):
            route.timed = True
            route.handler = _timed_handler(route.handler, record.setdefault(route.path, []))


def _timed_handler(handler, out):
    def timed(*args, **kwargs):
        _hostenv.pause()
        a = gc.mem_alloc()
        _hostenv.resume()
        t = benchclock.cpu_us()
        try:
            return handler(*args, **kwargs)
        finally:
            spent = int(_hostenv.cpu_us_since(t) * _hostenv.factor)
            _hostenv.pause()
            grown = gc.mem_alloc() - a
            _hostenv.resume()
            if Latencies.on:
                out.append((spent, grown))
    return timed


def profile_module(mod, profile):
    """Wrap mod.poll to add its count, microseconds and allocated bytes to profile[mod.name]."""
    poll = mod.poll
    entry = profile.setdefault(mod.name, [0, 0, 0, 0, 0])   # polls, us, bytes, worst us, polls over 50 ms

    def timed_poll(now_ms):
        _hostenv.pause()                 # the heap walks of gc.mem_alloc() are the bench's, not the firmware's
        a = gc.mem_alloc()
        _hostenv.resume()
        t = benchclock.cpu_us()
        try:
            poll(now_ms)
        finally:
            spent = int(_hostenv.cpu_us_since(t) * _hostenv.factor)    # device us
            _hostenv.pause()
            entry[0] += 1
            entry[1] += spent
            grown = gc.mem_alloc() - a
            _hostenv.resume()
            if grown > 0:
                entry[2] += grown
            if spent > entry[3]:
                entry[3] = spent
            if spent > 50000:
                entry[4] += 1

    mod.poll = timed_poll


def write_settings():
    """The drive as a user who turned on every feature leaves it: WiFi, MQTT, Modbus, both meter emulations (the
    Shelly with one UDP port, as docs/api.md's socket budget asks beside Modbus); the median filter off so each
    reading carries its own telegram's power (the latencies are matched by it)."""
    doc = {"wifi": {"primary": {"ssid": "HostNetwork", "password": "host-password"}},
           "mqtt": {"enable": True, "host": "10.0.0.2", "port": 1883, "sendInterval": 1},
           "modbus": {"enable": True, "port": 502, "model": 213},
           "medianFilterSize": 0}
    if EMULATION:
        doc["emulation"] = {"shelly": True, "shellyUdpPort": SHELLY_UDP_PORT, "shellyUdpPort2": 0, "sma": True}
    with open("settings.json", "w") as f:
        json.dump(doc, f)


class Schedule:
    """Periodic client actions: (period ms, first at ms, action)."""

    def __init__(self):
        self.items = []

    def every(self, period_ms, first_ms, action):
        self.items.append([period_ms, first_ms, action])

    def run(self, elapsed_ms):
        for item in self.items:
            if elapsed_ms >= item[1]:
                item[1] += item[0]
                if item[1] <= elapsed_ms:
                    item[1] = elapsed_ms + item[0]
                item[2]()


def code_py_without_run():
    """code.py's source without its last line (run(build())): the bench calls build() and steps the loop itself."""
    with open("code.py") as f:
        source = f.read()
    tail = "\nrun(build())"
    if source.count(tail) != 1:
        raise SystemExit("code.py no longer ends with run(build()): update bench/device/runner.py")
    return source.replace(tail, "\n")


def main():
    write_settings()
    history_at_start = None
    if FLASH is not None:
        import flashfs

        flashfs.install(FLASH, _builtin_os)     # from here every drive write of the firmware stalls the clock
        try:
            history_at_start = _builtin_os.stat("history/history.bin")[6]
        except OSError:
            history_at_start = False           # a fresh drive: the history service creates the file at its start
    clock = Clock()
    clock.step_start = 0
    meter = SmlMeter(clock)
    _hostenv.meter_source = meter
    broker = MqttBroker(clock, meter)
    socketpool.peers[1883] = broker.accept
    result = {"mode": MODE, "seconds": SECONDS}
    samples = []
    if "nopystone" not in FLAGS and MODE != "boot":
        # Three runs on a clean heap, the median: pystone allocates, and in a heap the firmware has filled it would
        # measure the collector, not the interpreter (the firmware's own collections are in its step times).
        samples.extend(pystone_samples(PYSTONE_LOOPS))
        samples[:] = [samples[1]] + samples
        # The device clock: the firmware's work takes (this interpreter's pystones / the S3's) as long as here.
        _hostenv.factor = samples[0] / S3_PYSTONES
    result["factor"] = _hostenv.factor
    hist = array.array("H", bytes(2 * HIST_BUCKETS))   # cycle times, allocated before the baseline
    big_cycles = []
    gc_us = []
    http_lat = {}

    source = code_py_without_run()
    code_globals = {"__name__": "__main__"}
    # The stand-ins are C modules on the device: imported before the baseline, so no figure counts them.
    for name in stand_ins():
        __import__(name)
    battery = Battery(clock, meter) if MODE == "run" else None
    sma = SmaListener(clock, meter)
    ntp = NtpServer()
    if FLASH is not None and MODE == "run":
        ntp.quarter_after_s = 50       # a quarter hour closes about when the warm-up ends: the history has a record
    gc.collect()
    base = gc.mem_alloc()
    result["heap_total"] = gc.mem_free() + gc.mem_alloc()
    t0 = _unix_time.ticks_ms()
    exec(source, code_globals)   # imports, arms the watchdog, defines build() and run()
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
    wire_next = code_globals["wire_next"]     # code.py wires the later features from its loop, one a cycle

    # Every collection the supervisor makes, timed (on the device the same call is CircuitPython's gc.collect()).
    real_collect = sup._gc_collect

    def timed_collect():
        t = _hostenv.device_us()
        real_collect()
        if Latencies.on:
            gc_us.append(_hostenv.device_us() - t)
        if len(gc_us) > 4000:
            del gc_us[:2000]

    if real_collect is not None:
        sup._gc_collect = timed_collect
    for flag in FLAGS:
        if flag.startswith("gcbudget="):
            sup.gc_alloc_budget = int(flag[9:])
        if flag.startswith("cyclebudget="):
            sup.cycle_budget_ms = int(flag[12:])
    if "cpgc" in FLAGS:
        sup.gc_alloc_budget = 0       # leave collecting to CircuitPython (when an allocation finds no room)
    profile = {}
    if "profile" in FLAGS:
        # Each module's polls: count, time (us) and heap allocated (bytes; no collection runs inside a poll here
        # as long as the heap has room). The wrapper's own cost is in the step times of a profiled run.
        for slot in sup._slots:
            profile_module(slot.module, profile)

    held_min = held_max = peak = None
    statuses = {}
    clients = []
    modbus = ModbusClient()
    ws = WsClient()
    notified = None
    built = {}          # route path -> [(device us, heap bytes)] of its handler's calls
    sched = Schedule()
    pending = []     # (path, kind) waiting for a free client place

    def get(path, kind):
        if len(pending) < 8:
            pending.append((path, kind))

    if MODE in ("run", "boot"):
        sched.every(1000, 2000, lambda: get("/api/v1/system/alive", "alive"))
        sched.every(1000, 2500, lambda: get("/api/v1/history/latest", "latest"))
    if MODE == "run":
        sched.every(4000, 3000, lambda: get("/api/v1/history/latest", "page_latest"))
        sched.every(20000, 3200, lambda: get("/api/v1/system/info", "info"))
        sched.every(300000, 3400, lambda: get("/api/v1/history/highRes?date=2026-01-01", "page_today"))
        sched.every(15000, 5000, lambda: get("/metrics", "metrics"))
        sched.every(1000, 2700, modbus.request)
        sched.every(1000, 2300, battery.ask)
        sched.every(2000, 4000, ws.ask)
    events = None
    if FLASH is not None and MODE == "run":
        events = FlashEvents(app, sup, clock, (WARMUP_S + SECONDS // 5) * 1000, SECONDS * 1000 // 4)
        # No time before the history service started: its first start on a fresh drive creates the file (a stall
        # of seconds to minutes), and the quarter hour that closes 50 s after the clock syncs must come after it
        # and after the first readings.
        ntp.hold = lambda: "history" not in events.slots or events.slots["history"].phase == 0
    longest = None          # the step with the longest flash stall: (typ us, max us, step us, cycle, paths)
    warm_stall_us = 0
    flash_at_measure = None
    start = _hostenv.sim_ms()
    real_start = _unix_time.ticks_ms()
    cycles = 0
    measured_cycles = 0
    while True:
        elapsed_ms = _hostenv.sim_ms() - start
        if elapsed_ms >= (WARMUP_S + SECONDS) * 1000:
            break
        measuring = elapsed_ms >= WARMUP_S * 1000
        if measuring and not Latencies.on:
            for entry in profile.values():     # the profile too counts from the end of the warm-up
                entry[:] = [0, 0, 0, 0, 0]
            if FLASH is not None:
                flash_at_measure = (flashfs.model.erases, flashfs.model.programs, flashfs.stall_us["typ"],
                                    flashfs.stall_us["max"])
        Latencies.on = measuring
        clock.step_start = clock.mark()
        _hostenv.begin_step()
        sup.step()
        wire_next(app)
        spent = _hostenv.end_step()     # device us
        cycles += 1
        if FLASH is not None:
            rec = flashfs.take_step()
            if rec:
                typ = top = 0
                for e in rec.values():
                    typ += e[1]
                    top += e[2]
                if longest is None or typ > longest[0]:
                    longest = (typ, top, spent, cycles, sorted(rec))
                if not measuring:
                    # The warm-up is a minute of the firmware's work: the first start's erases (the history file)
                    # would eat it at the maximum figure.
                    warm_stall_us += typ if FLASH == "typ" else top
                    start += warm_stall_us // 1000
                    warm_stall_us %= 1000
                if events is not None:
                    events.step_done(spent, rec)
        if measuring:
            measured_cycles += 1
            b = spent // HIST_BUCKET_US
            if b < HIST_BUCKETS:
                hist[b] += 1
            else:
                big_cycles.append(spent)
        if len(built) < 2 and getattr(app, "http", None) is not None:     # /metrics comes with its lazy module
            time_routes(app.http, ("/api/v1/system/info", "/metrics"), built)
        if notified is None and getattr(app, "shelly_ws", None) is not None:
            notified = []                      # the emulation is loaded (its loader's poll): time its pushes
            time_notifications(app.shelly_ws, notified)
        # The peers' turn: none of this is the firmware's time.
        meter.tick(_hostenv.sim_seconds())
        broker.poll()
        modbus.poll()
        ws.poll()
        socketpool.pump_udp()
        sched.run(elapsed_ms)
        if events is not None and measuring:
            events.tick(elapsed_ms, clients)
        while pending and len(clients) < HTTP_CLIENTS:
            path, kind = pending.pop(0)
            clients.append(HttpClient(path, clock, kind))
        still = []
        for c in clients:
            if c.done():
                key = "%s %d" % (c.path, c.status)
                if Latencies.on or MODE == "boot":
                    statuses[key] = statuses.get(key, 0) + 1
                if c.status == 200 and c.kind:
                    http_lat.setdefault(c.kind, Latencies()).add(clock.since(c.mark))
            else:
                still.append(c)
        clients = still
        if measuring:
            alloc = gc.mem_alloc() - base
            if peak is None or alloc > peak:
                peak = alloc
            if held_min is None or alloc < held_min:
                held_min = alloc
            if held_max is None or alloc > held_max:
                held_max = alloc
        _hostenv.advance(IDLE_SLEEP_MS * 1000)     # code.py's sleep: device time, no waiting here
        if MODE == "boot" and statuses.get("/api/v1/history/latest 200") and cycles > 200:
            break
    elapsed = _hostenv.sim_ms() - start - WARMUP_S * 1000
    result["real_ms"] = _unix_time.ticks_diff(_unix_time.ticks_ms(), real_start)
    desc = sup.describe()
    import microcontroller

    result["pystone_samples"] = samples
    result.update({
        "cycles": measured_cycles, "elapsed_ms": elapsed, "warmup_s": WARMUP_S,
        "cycles_per_s": measured_cycles * 1000 // max(1, elapsed),
        "cycle_hist": {"bucket_us": HIST_BUCKET_US, "counts": [[i, n] for i, n in enumerate(hist) if n],
                       "over": sorted(big_cycles)},
        "gc_us": sorted(gc_us), "gc_count": len(gc_us),
        "idle_sleep_ms": IDLE_SLEEP_MS,
        "latency": {k: v.items for k, v in http_lat.items()},
        "held_min": held_min, "held_max": held_max, "peak_alloc": peak,
        "worst_cycle_ms": desc["worst_cycle_ms"],
        "watchdog_longest_gap_ms": microcontroller.watchdog.longest_gap_ms,
        "worst_poll_ms": {name: m["worst_poll_ms"] for name, m in desc["modules"].items()},
        "module_states": {name: m["state"] for name, m in desc["modules"].items()},
        "module_errors": {name: "%d faults, last: %s" % (m["faults"], m.get("last_error"))
                          for name, m in desc["modules"].items() if m["faults"]},
        "http": statuses, "telegrams": meter.telegrams,
        "mqtt_connects": broker.connects, "mqtt_publishes": broker.publishes,
        "modbus_ok": modbus.ok, "modbus_bad": modbus.bad,
        "udp_answers": battery.answers if battery else 0, "ws_answers": ws.answers, "sma_datagrams": sma.datagrams,
        "ntp_answers": ntp.answers,
        "sockets_open": socketpool.open_count(),
        "sockets": sorted("%s:%s" % ("udp" if x.type == 2 else "listen" if x._backlog is not None else "tcp",
                                     x._port) for x in socketpool._open),
        "socket_refusals": socketpool.refusals,
        # Parts that load only while in use (services/network/ble_on_demand.py, services/ota/service.py).
        "loaded": sorted(n for n in ("adafruit_ble", "drivers.ble_provision", "services.ota.signature",
                                     "services.ota.http_get", "services.ota.upload") if n in sys.modules),
        # What stays in the heap after the run: the firmware's and the libraries' modules still imported (issue 35's
        # code_resident_kb is their own code and tables, bench_device.module_costs(only=...)).
        "resident": sorted(n for n in sys.modules if n.split(".")[0] in RESIDENT_TOPS),
        "features_off": app.features_off,
        "profile": profile, "collections": getattr(sup, "collections", None),
        "feature_heap": feature_heap,
        "notify": {"pushes": notified or [], "frame_bytes": ws.notify_bytes},
        "built": built,
        "log": log_lines(app)[-30:],
    })
    result["latency"]["telegram_to_mqtt"] = broker.latency.items
    result["latency"]["telegram_to_sma"] = sma.latency.items
    if FLASH is not None:
        fl = flashfs.summary()
        m0 = flash_at_measure or (0, 0, 0, 0)
        fl.update({
            "measured": {"erases": fl["erases"] - m0[0], "programs": fl["programs"] - m0[1],
                         "stall_us": fl["stall_us"]["typ"] - m0[2], "stall_us_max": fl["stall_us"]["max"] - m0[3]},
            "events": events.results if events is not None else {},
            "events_missing": [t[1] for t in events.todo] if events is not None else [],
            "history": events.history() if events is not None else None,
            "history_file_at_start": history_at_start,
            "longest_step": None if longest is None else {
                "stall_us": longest[0], "stall_us_max": longest[1], "step_us": longest[2], "cycle": longest[3],
                "paths": longest[4]},
            "watchdog_tripped": getattr(microcontroller.watchdog, "tripped", None)})
        result["flash"] = fl
    if battery is not None:
        result["latency"]["telegram_to_shelly_udp"] = battery.latency.items
    sup.stop_all()
    print("@@BENCH@@ " + json.dumps(result))


def log_lines(app):
    """The firmware log's messages, oldest first."""
    try:
        return [str(e) for e in app.log.entries()]
    except Exception as exc:
        return ["(log unreadable: %r)" % exc]


def tiny():
    """A heap too small for everything (a board without PSRAM): code.py as on the device, then the loop for a
    while; the bench allocates next to nothing itself. Says which features are off and that the loop runs."""
    write_settings()
    code_globals = {"__name__": "__main__"}
    exec(code_py_without_run(), code_globals)
    app = code_globals["build"]()
    sup = app.supervisor
    for _ in range(300):
        _hostenv.begin_step()
        sup.step()
        code_globals["wire_next"](app)
        _hostenv.end_step()
        _hostenv.advance(IDLE_SLEEP_MS * 1000)
    gc.collect()
    print("@@BENCH@@ " + json.dumps({"mode": "tiny", "cycles": sup.cycles, "features_off": sorted(app.features_off),
                                     "running": sorted(m.name for m in sup.modules())}))


if __name__ == "__main__":    # start.py imports the peers and the clock from here
    try:
        if MODE == "tiny":
            tiny()
        else:
            main()
    except MemoryError as exc:
        print("@@BENCH@@ " + json.dumps({"memory_error": str(exc)}))
        sys.exit(4)
