"""Meter Plus: the composition root. Builds drivers and services from CircuitPython modules and runs the supervisor."""

import gc
import os
import time

import board
import busio
import digitalio
import microcontroller
import neopixel
import socketpool
import wifi
from adafruit_ticks import ticks_ms

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
# an update back (docs/ota.md). Importing and building take well under WATCHDOG_S before the first feed.
WATCHDOG, WATCHDOG_ERROR = arm_watchdog()

from core.app import App
from core.bus import Bus
from core.log import Log
from core.settings import Settings
from core.supervisor import Supervisor
from drivers.button import Button
from drivers.status_led import StatusLed
from services.api import service as http_api
from services.system.lifecycle import Lifecycle
from services.system.status_policy import StatusPolicy

SETTINGS_PATH = "settings.json"
TOKENS_PATH = "tokens.json"
CA_PATH = "mqtt_ca.pem"
IDLE_SLEEP_S = 0.005     # yields the CPU between cycles; the UART buffer covers 4 s at 9600 baud


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


def build():
    """Construct every driver and service (allocation only) and register them with the supervisor."""
    log = Log(capacity=64, echo=print)
    bus = Bus()
    settings = Settings(SETTINGS_PATH)
    app = App(bus, settings, log)
    app.radio = wifi.radio
    app.device_id = device_id(wifi.radio)
    app.mem_free = gc.mem_free
    app.boot_ticks = ticks_ms()
    app.reset_reason = str(microcontroller.cpu.reset_reason).split(".")[-1]

    if WATCHDOG is None:
        log.warning("watchdog unavailable: %s", WATCHDOG_ERROR)

    sup = Supervisor(ticks_ms, watchdog=WATCHDOG, gc_collect=gc.collect, log=log)
    app.supervisor = sup

    pixels = neopixel.NeoPixel(pin(env("METERPLUS_LED", "NEOPIXEL")), 1, brightness=0.3, auto_write=False)
    led = sup.add(StatusLed(pixels, enabled=settings.get("ledEnable", True)))
    app.led = led

    button_io = digitalio.DigitalInOut(pin(env("METERPLUS_BUTTON", "BUTTON")))
    button_io.switch_to_input(pull=digitalio.Pull.UP)
    sup.add(Button(button_io, bus))

    pool = socketpool.SocketPool(wifi.radio)
    routes = []       # route modules: each has routes(app) -> [Route]
    flushables = []   # services that buffer writes to the flash (flush() on reboot, button, reset)

    # Socket budget: the ESP32-S3 build has 8 sockets in the whole system. HTTP listen + 2 clients (3), Modbus listen
    # + 2 clients (3, only when modbus.enable), MQTT (1), NTP (1, only during a query), captive DNS (1, only while the
    # AP is up and the station is not joined). mDNS and BLE use no socketpool sockets (ESP-IDF's own UDP pcb / NimBLE).
    # --- network: WiFi profiles, access point, scans ---
    import ipaddress

    from drivers.radio import WifiManager

    app.wifi = sup.add(WifiManager(wifi.radio, wifi.AuthMode, settings, app.reset_reason, app.device_id,
                                   ip_address=ipaddress.ip_address, log=log))
    app.wifi_scanner = app.wifi.scanner
    try:
        import mdns

        from services.network.mdns_service import MdnsAdvertiser

        app.mdns = sup.add(MdnsAdvertiser(lambda: mdns.Server(wifi.radio), app.device_id,
                                          int(env("METERPLUS_HTTP_PORT", 80))))
    except ImportError:  # a build without mdns: the device is still reachable by its address
        log.warning("mdns unavailable")
    from services.network.captive_dns import CaptiveDns

    app.captive_dns = sup.add(CaptiveDns(pool, app.wifi, host=env("METERPLUS_BIND", "0.0.0.0"),
                                         port=int(env("METERPLUS_DNS_PORT", 53)),
                                         setup_url=env("METERPLUS_SETUP_URL", None)))
    from services.network import join as wifi_join_routes
    from services.network import routes as network_routes
    from services.outages import routes as outage_routes

    routes.append(network_routes)
    routes.append(wifi_join_routes)
    routes.append(outage_routes)   # app.outages is built after the OTA service (a rollback names its reason)
    # BLE provisioning (Improv Wi-Fi); boards without BLE (4 MB S3 on CircuitPython 10) run everything else.
    try:
        import _bleio

        ble_adapter = _bleio.adapter
    except ImportError:
        ble_adapter = None
    if ble_adapter is not None:
        try:
            from drivers.ble_provision import BleImprovTransport
        except ImportError as exc:  # adafruit_ble not copied onto the drive: everything else still runs
            log.warning("BLE provisioning off: %s", exc)
            ble_adapter = None
    if ble_adapter is not None:
        from core.version import VERSION as FIRMWARE_VERSION
        from drivers.radio import ap_ssid
        from services.network.provisioning import CAPABILITIES, ImprovProvisioning

        improv_port = int(env("METERPLUS_HTTP_PORT", 80))

        def improv_url():
            """Where the phone continues after provisioning: the web interface on the joined network."""
            ip = app.wifi.ip()
            if not ip:
                return ""
            return "http://%s/" % ip if improv_port == 80 else "http://%s:%d/" % (ip, improv_port)

        transport = BleImprovTransport(ble_adapter, ap_ssid(settings, app.device_id), CAPABILITIES)
        app.improv = sup.add(ImprovProvisioning(transport, app.wifi, settings, bus, led,
                                                ("Meter Plus", FIRMWARE_VERSION, "ESP32-S3"), improv_url, log=log))
    else:
        log.info("no BLE provisioning on this board: setup over the access point only")
    # --- end network ---

    # --- meter: IR head UART -> framer/decoder -> filter, ctRatio, health ---
    from drivers.ir_head import IrHead
    from services.metering.pipeline import MeterPipeline
    from services.metering.register import EnergyRegister

    # "auto" keeps one 8N1 UART: a D0 (7E1) character then carries its parity in bit 7, checked in software.
    ir_mode = env("METERPLUS_IR_MODE", "auto")
    seven_e1 = ir_mode in ("d0", "pull")
    uart = busio.UART(tx=pin(env("METERPLUS_IR_TX", "IO17")), rx=pin(env("METERPLUS_IR_RX", "IO18")),
                      baudrate=300 if ir_mode == "pull" else 9600, bits=7 if seven_e1 else 8,
                      parity=busio.UART.Parity.EVEN if seven_e1 else None, timeout=0,
                      receiver_buffer_size=4096)
    app.ir_head = sup.add(IrHead(uart, ir_mode))
    # The register keeps energy totals continuous through ctRatio changes (rewritten only at a change).
    app.meter = sup.add(MeterPipeline(bus, settings, app.ir_head, register=EnergyRegister("register.json", log)))
    # --- end meter ---

    # --- clock: NTP + time zone ---
    import rtc

    from core.clock import Clock

    ntp = env("METERPLUS_NTP_OVERRIDE", None)  # the host runtime's NTP stand-in: no public backups then
    app.clock = sup.add(Clock(pool, settings, bus=bus, rtc=rtc.RTC(), server=ntp, backups=() if ntp else None))
    # --- end clock ---

    # --- history ---
    from services.history import routes as history_routes
    from services.history.service import History
    from services.history.store import HistoryStore

    # history/ of its own: the file's entry, rewritten at every flush, shares no directory sector with other files.
    store = HistoryStore("history/history.bin", legacy="history.bin", log=log)  # legacy: before 2026-11
    app.history = sup.add(History(bus, app.clock, settings, store, log=log))
    flushables.append(app.history)
    routes.append(history_routes)
    # --- end history ---

    # --- api: routes, auth, settings ---
    from services.api import routes_auth, routes_settings
    from services.api.auth import Tokens
    from services.cloud import routes as cloud_routes
    from services.logs import routes as log_routes
    from services.logs.flash_log import FlashLog
    from services.ota import routes as ota_routes
    from services.system import routes as system_routes

    if not settings.exists() and env("CIRCUITPY_WIFI_SSID", ""):
        try:  # first boot: settings.toml's WiFi keys seed the document once
            settings.update({"wifi": {"primary": {"ssid": env("CIRCUITPY_WIFI_SSID", ""),
                                                  "password": env("CIRCUITPY_WIFI_PASSWORD", "")}}})
        except Exception as exc:
            log.warning("settings.toml WiFi not taken: %s", exc)
    app.auth = Tokens(TOKENS_PATH)
    app.auth.load()
    # Whether authentication is on is kept with the tokens too, so a damaged settings.json (zeroed, truncated,
    # `null`: the defaults say "off") never switches it off.
    if settings.damaged:
        log.error("settings: %s unreadable, defaults in use (%d load errors); authentication stays as the token "
                  "file says: %s", SETTINGS_PATH, settings.load_errors, "on" if app.auth.required else "off")
    if settings.get("api_auth_required") and app.auth.configured() and not app.auth.required:
        try:
            app.auth.set_required(True)      # an older firmware kept it in settings.json only
        except OSError as exc:
            log.error("auth: cannot note authentication in the token file: %s", exc)
    elif app.auth.required and not settings.get("api_auth_required"):
        try:
            settings.update({"api_auth_required": True})
        except Exception as exc:
            settings.doc["api_auth_required"] = True   # on in RAM at least: the check reads it
            log.error("settings: cannot store api_auth_required again: %s", exc)
    try:
        import espidf  # the largest free block of the heap, for /system/info

        app.heap_largest = espidf.heap_caps_get_largest_free_block
    except ImportError:
        app.heap_largest = None
    sup.add(log.uptime)  # folds ticks into the uptime every cycle (entries, /system/info, logs stay wrap-safe)
    flash_log = sup.add(FlashLog(wall_time=lambda: app.clock.time()
                                 if app.clock is not None and app.clock.synced else None))
    log.sinks.append(flash_log.sink)
    flushables.append(flash_log)
    app.flash_log = flash_log
    routes.extend((system_routes, routes_settings, routes_auth, ota_routes, cloud_routes, log_routes))
    # --- end api ---

    # --- mqtt ---
    try:
        import ssl
    except ImportError:  # a build without ssl: TLS brokers fail with a clear last_error, plain ones work
        ssl = None
    from services.metering.energy_floor import EnergyFloor
    from services.mqtt import routes as mqtt_routes
    from services.mqtt.ca_store import CaStore
    from services.mqtt.service import MqttService

    mqtt_web_port = int(env("METERPLUS_HTTP_PORT", 80))

    def mqtt_web_url():
        """The device's web address for Home Assistant's device page (the address can change with DHCP)."""
        ip = wifi.radio.ipv4_address
        if ip is None:
            return None
        return "http://%s/" % ip if mqtt_web_port == 80 else "http://%s:%d/" % (ip, mqtt_web_port)

    # One energy floor for everything that hands out totals: MQTT and GET /history/latest (the REST API).
    app.energy_floor = EnergyFloor()
    app.mqtt = sup.add(MqttService(pool, bus, settings, app.device_id, clock=app.clock,
                                   ssl_context=ssl.create_default_context if ssl is not None else None,
                                   ca_store=CaStore(CA_PATH), web_url=mqtt_web_url, log=log,
                                   energy_floor=app.energy_floor))
    routes.append(mqtt_routes)
    # --- end mqtt ---

    # --- modbus ---
    from core.version import VERSION
    from services.modbus import routes as modbus_routes
    from services.modbus.server import ModbusServer

    modbus_port = env("METERPLUS_MODBUS_PORT", None)  # the host runtime's --modbus-port wins over modbus.port
    app.modbus = sup.add(ModbusServer(pool, bus, settings, host=env("METERPLUS_BIND", "0.0.0.0"),
                                      port_override=int(modbus_port) if modbus_port is not None else None,
                                      serial=app.device_id, version=VERSION, log=log))
    routes.append(modbus_routes)
    # --- end modbus ---

    # --- web: the interface's pre-compressed files from web/ (web/files.tsv lists them) ---
    from services.web import static as web_static

    routes.append(web_static)
    # --- end web ---

    app.http = sup.add(http_api.HttpApi(pool, app, host=env("METERPLUS_BIND", "0.0.0.0"),
                                        port=int(env("METERPLUS_HTTP_PORT", 80)), route_modules=routes,
                                        rate_limit=int(env("METERPLUS_API_RATE_LIMIT", 25))),
                       essential=True)   # the one service a user needs to repair the device: never given up
    sup.add(StatusPolicy(bus, led, sup))
    app.lifecycle = sup.add(Lifecycle(bus, led, microcontroller.reset, flushables=flushables,
                                      wipe_paths=(SETTINGS_PATH, TOKENS_PATH, CA_PATH), log=log))

    # --- ota ---
    import boot  # the update anchor on the drive: its journal functions (main() runs only as boot.py itself)

    from core.module import FAILED
    from core.version import VERSION as OTA_VERSION
    from services.ota.service import OtaService

    try:
        import ssl as ota_ssl
    except ImportError:
        ota_ssl = None
    app.ota = sup.add(OtaService(pool, settings, OTA_VERSION, boot, clock=app.clock, led=led,
                                 flush=app.lifecycle.flush_all, restart=app.lifecycle.request_reboot,
                                 health=lambda: app.http.state != FAILED,
                                 ssl_factory=ota_ssl.create_default_context if ota_ssl is not None else None,
                                 rand=lambda n: int.from_bytes(os.urandom(2), "big") % n, log=log))
    # --- end ota ---

    # --- outages: when the device went down, when it came back, why (docs/outages.md) ---
    from services.outages.journal import OutageJournal
    from services.outages.service import Outages

    def last_seen():
        last = app.history.store.hr.last   # the newest flushed quarter hour: the device was up until its end
        return last[1] + 900 if last is not None else 0

    app.outages = sup.add(Outages(OutageJournal("logs/outages.bin"), app.clock, app.reset_reason,
                                  last_seen=last_seen, ota=app.ota, log=log))
    app.lifecycle.before_restart.append(app.outages.note_restart)
    # --- end outages ---

    # --- cloud ---
    from core.version import VERSION as CLOUD_VERSION
    from services.cloud.pairing import Pairing
    from services.cloud.service import CloudService

    try:
        import ssl as cloud_ssl
    except ImportError:
        cloud_ssl = None

    app.cloud_pairing = Pairing("cloud.json")   # the cloud/pair routes store through it
    app.cloud_pairing.load()
    app.lifecycle.wipe_paths.append("cloud.json")   # a factory reset forgets the pairing
    app.cloud = sup.add(CloudService(pool, bus, settings, app.cloud_pairing, app.device_id, CLOUD_VERSION,
                                     ssl_factory=cloud_ssl.create_default_context if cloud_ssl is not None else None,
                                     clock=app.clock, log=log))
    # --- end cloud ---
    return app


def run(app):
    """The cooperative loop: one supervisor step per cycle; an orderly stop flushes through stop()."""
    sup = app.supervisor
    app.log.info("Meter Plus up, device %s", app.device_id)
    try:
        while True:
            sup.step()
            time.sleep(IDLE_SLEEP_S)
    finally:
        sup.stop_all()


run(build())
