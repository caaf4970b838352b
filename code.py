"""Meter Plus: the composition root. Builds drivers and services from CircuitPython modules and runs the supervisor."""

import gc
import os
import sys
import time

import board
import digitalio
import microcontroller
import neopixel
import socketpool
import wifi
from adafruit_ticks import ticks_diff, ticks_ms

WATCHDOG_S = 30          # a stalled loop restarts the chip after this long


def arm_watchdog():
    """(the RESET-mode watchdog, None) or (None, why it is unavailable)."""
    try:
        from watchdog import WatchDogMode

        wd = microcontroller.watchdog
        wd.timeout = WATCHDOG_S
        wd.mode = WatchDogMode.RESET
        return wd, None
    except (ImportError, ValueError, RuntimeError) as exc:
        return None, exc


# Armed before the application is imported: CircuitPython keeps a RESET watchdog running when code.py ends with an
# exception, so a version that cannot even import restarts the chip, and boot.py counts the failed boot and rolls
# an update back (docs/ota.md). The start feeds it between features (build()): the whole start is longer than
# WATCHDOG_S on a slow chip (README, "The start"), one feature's import and wiring is not, so only a start that
# really hangs inside one resets.
WATCHDOG, WATCHDOG_ERROR = arm_watchdog()


def feed_watchdog():
    """One step of the start is done: the watchdog waits WATCHDOG_S for the next."""
    if WATCHDOG is not None:
        WATCHDOG.feed()

from core.app import App
from core.bus import Bus
from core.heap import FreeHeap
from core.log import Log
from core.modules import unload
from core.sockbudget import SocketBudget
from core.settings import Settings
from core.supervisor import Supervisor
from drivers.button import Button
from drivers.status_led import StatusLed

SETTINGS_PATH = "settings.json"

# The features, in the order they are wired (and polled): each row names a package's wiring entry, a module with
# wire(app) that builds the feature's drivers and services, registers them with the supervisor and adds its route
# modules. "api" comes first after the system so the one feature a user needs to repair the device is never the
# one starved of memory; each later feature finds the ones it uses on app (None when they are off).
FEATURES = (
    ("system", "services.system.wiring"),          # lifecycle (restart, flush, factory reset), LED policy
    ("api", "services.api.wiring"),                # HTTP server, tokens, settings routes (essential)
    ("logs", "services.logs.wiring"),              # persistent log on the flash
    ("network", "services.network.wiring"),        # WiFi, access point, captive DNS
    ("web", "services.web.wiring"),                # the web interface's files (first in the loop: a person's page)
    ("meter", "services.metering.wiring"),         # IR head -> decoder -> filter, ctRatio, energy floor
    ("mqtt", "services.mqtt.wiring"),              # MQTT with Home Assistant discovery (the first reading's way out)
    # From here on after the first reading (WIRED_BEFORE_READING).
    ("mdns", "services.network.mdns_wiring"),      # discovery (TXT for WattWaechter / Home Assistant), our responder
    ("clock", "services.system.clock_wiring"),     # NTP, time zone, RTC (hands MQTT the clock for its state's time)
    ("history", "services.history.wiring"),        # quarter hours and days on the flash
    ("tariff", "services.tariff.wiring"),          # prices, cost per quarter hour, monthly peaks (MQTT's money too)
    ("modbus", "services.modbus.wiring"),          # SunSpec over Modbus TCP
    ("metrics", "services.metrics.wiring"),        # GET /metrics for Prometheus
    ("emulation", "services.emulation.wiring"),    # a Shelly Pro 3EM and an SMA Energy Meter for batteries, inverters
    ("ota", "services.ota.wiring"),                # signed updates
    ("outages", "services.outages.wiring"),        # when the device went down and why
    ("cloud", "services.cloud.wiring"),            # optional cloud upload
    # Last in the start: Improv is for a phone setting up WiFi, which the access point and the page serve too.
    ("provisioning", "services.network.improv_wiring"),   # Improv Wi-Fi over BLE where the board has it
)


def env(name, default):
    """A settings.toml value, read once (os.getenv re-parses the file on every call)."""
    value = os.getenv(name)
    return default if value is None or value == "" else value


def pin(name):
    """A board pin by its name in settings.toml."""
    return getattr(board, name)


def device_id(radio):
    """Last 12 hex digits of the MAC: the spec's device id."""
    return "".join("%02x" % b for b in radio.mac_address)[-12:]


def build_core():
    """The parts every feature uses: log, bus, settings, supervisor, LED, button, sockets."""
    log = Log(capacity=64, echo=print)
    bus = Bus()
    settings = Settings(SETTINGS_PATH)
    app = App(bus, settings, log)
    app.radio = wifi.radio
    app.device_id = device_id(wifi.radio)
    app.mem_free = FreeHeap(gc.mem_free, ticks_ms)   # read at most once a second
    app.boot_ticks = ticks_ms()
    app.reset_reason = str(microcontroller.cpu.reset_reason).split(".")[-1]
    app.env = env
    app.pin = pin
    app.http_port = int(env("METERPLUS_HTTP_PORT", 80))
    if WATCHDOG is None:
        log.warning("watchdog unavailable: %s", WATCHDOG_ERROR)
    sup = Supervisor(ticks_ms, watchdog=WATCHDOG, gc_collect=gc.collect, log=log, mem_alloc=gc.mem_alloc)
    app.supervisor = sup
    sup.add(log.uptime)  # folds ticks into the uptime every cycle (entries, /system/info, logs stay wrap-safe)
    pixels = neopixel.NeoPixel(pin(env("METERPLUS_LED", "NEOPIXEL")), 1, brightness=0.3, auto_write=False)
    app.led = sup.add(StatusLed(pixels, enabled=settings.get("ledEnable", True)))
    button_io = digitalio.DigitalInOut(pin(env("METERPLUS_BUTTON", "BUTTON")))
    button_io.switch_to_input(pull=digitalio.Pull.UP)
    sup.add(Button(button_io, bus))
    app.pool = socketpool.SocketPool(wifi.radio)
    app.sockets = SocketBudget(app)
    try:
        import espidf  # the largest free block of the heap, for /system/info

        app.heap_largest = espidf.heap_caps_get_largest_free_block
    except ImportError:
        app.heap_largest = None
    return app


def wire_feature(app, name, module_name):
    """Wire one feature; one that runs out of memory at start stays off (logged, in /system/info) instead of
    ending code.py, which would restart the chip forever and count as failed boots of an update."""
    before = app.supervisor.modules()
    try:
        __import__(module_name)
        sys.modules[module_name].wire(app)
    except MemoryError:
        app.supervisor.forget([m for m in app.supervisor.modules() if m not in before])  # nothing half-wired polls
        app.features_off[name] = "out of memory at start"
        app.log.error("%s off: out of memory at start", name)
    # A wiring entry runs once: its code need not stay in the heap. The next feature's import collects it.
    unload(module_name, collect=False)


def update_on_trial():
    """True while a new version proves itself (boot.py's journal says "trial"): it may fail, boot.py rolls it back."""
    try:
        with open("ota/journal") as f:
            return '"trial"' in f.read()
    except OSError:
        return False


def heap_too_small(exc):
    """Not even the core fits the heap (a board without PSRAM, README "Supported boards"): say so on the console
    and stay, feeding the watchdog; a reset would fail the same way every 30 s for ever. A new version on trial is
    let fail instead, so that boot.py rolls it back to the one that fitted."""
    if update_on_trial():
        raise exc
    gc.collect()
    try:
        print("Meter Plus cannot start: the heap is too small (%s, %d bytes free). It needs an ESP32-S3 with "
              "PSRAM, or the firmware frozen into the CircuitPython image." % (exc, gc.mem_free()))
    except MemoryError:
        pass
    while True:
        if WATCHDOG is not None:
            WATCHDOG.feed()
        time.sleep(1)


# The start in stages. CircuitPython collects garbage after every module it imports (py/builtinimport.c), and each
# collection walks all the code loaded so far: importing and wiring every feature before the loop took ~17 S3 s as
# .mpy before the first answer. The features up to the network (what /system/alive and a repair need) are wired
# before the loop; the rest from the loop, one a cycle, in FEATURES order, so each still finds the earlier ones on
# app. Meanwhile the API answers a path it does not know yet with 503 "starting" and Retry-After (services/api).
WIRED_BEFORE_LOOP = 4      # system, api, logs, network
# A cycle cut by its budget leaves the later modules (HTTP is last) for the next cycle, and an HTTP answer or an MQTT
# connection takes several polls: with a feature's wiring (~1 S3 s) after every cycle, each of them would wait for
# one. So the next wiring waits for a whole round, and while a module has work in flight (Module.busy) for at most
# WIRING_WAITS_MS.
WIRING_WAITS_MS = 500
# The first reading's way out (web, meter, MQTT) is wired first; the features after it (clock, history, tariff,
# Modbus, ... Improv: seconds of imports, wiring and first polls) wait until MQTT has published the first reading,
# or cannot (off, no broker, waiting for a retry: MqttService.reading_out), for at most READING_WAITS_MS.
WIRED_BEFORE_READING = 7   # ... web, meter, mqtt
READING_WAITS_MS = 10000   # no meter on the head, a broker that never answers: the start goes on after this
_waiting_since = None
_reading_since = None      # when the later features began to wait for the first reading
_reading_state = 0         # 0: waiting; 1: out at the end of the last cycle, wired from the next; 2: done


def _after_reading(name):
    """True for a feature that waits for the first reading on MQTT (FEATURES after WIRED_BEFORE_READING)."""
    for row in FEATURES[WIRED_BEFORE_READING:]:
        if row[0] == name:
            return True
    return False


def reading_waits(app):
    """True while the later features wait for the first reading on MQTT (at most READING_WAITS_MS). The cycle after
    the one whose end found it out wires the next: a wiring is one long step (~1 S3 s), and the reading's last
    bytes should not wait behind it in the same cycle."""
    global _reading_since, _reading_state
    if _reading_state == 2 or app.mqtt is None:
        return False
    if _reading_state == 1:
        _reading_state = 2
        return False
    now = ticks_ms()
    if _reading_since is None:
        _reading_since = now
    if app.mqtt.reading_out() or ticks_diff(now, _reading_since) >= READING_WAITS_MS:
        _reading_state = 1
    return True


def build():
    """Construct the first features' drivers and services (allocation only) and register them with the supervisor;
    the others wait in app.starting for wire_next(). A feature that does not fit stays off (wire_feature), a core
    that does not fit stops here without a restart loop."""
    try:
        app = build_core()
    except MemoryError as exc:
        heap_too_small(exc)
    app.starting = list(FEATURES[WIRED_BEFORE_LOOP:])
    for name, module_name in FEATURES[:WIRED_BEFORE_LOOP]:
        feed_watchdog()
        wire_feature(app, name, module_name)
    feed_watchdog()
    return app


def wire_next(app):
    """Wire the next feature still waiting (one per loop cycle while the start goes on). True when the loop should
    go on at once (a feature was wired, the round goes on first); False when none is left, or while the later
    features wait for the first reading (the loop's idle wait runs then)."""
    global _waiting_since
    if not app.starting:
        return False
    if _after_reading(app.starting[0][0]) and reading_waits(app):
        return False
    sup = app.supervisor
    if sup.mid_round():
        return True          # every module (HTTP last) has its turn between two wirings
    if sup.busy():
        now = ticks_ms()
        if _waiting_since is None:
            _waiting_since = now
        if ticks_diff(now, _waiting_since) < WIRING_WAITS_MS:
            return True
    _waiting_since = None
    name, module_name = app.starting.pop(0)
    wire_feature(app, name, module_name)

    if not app.starting:
        app.log.info("Meter Plus up, device %s", app.device_id)
    return True


def run(app):
    """The cooperative loop: one supervisor step per cycle; an orderly stop flushes through stop()."""
    from core import idle  # through the module: the host runtime replaces idle.wait

    sup = app.supervisor
    try:
        while True:
            sup.step()          # feeds the watchdog: each wire_next() gets its own WATCHDOG_S
            if not wire_next(app):
                idle.wait()
    finally:
        sup.stop_all()


run(build())
