"""The composition's shared objects, handed to services that need more than one of them (the HTTP routes)."""


class App:
    """Plain holder filled by code.py: bus, settings, log, supervisor, led, lifecycle, modules by name, device facts."""

    def __init__(self, bus, settings, log):
        self.bus = bus
        self.settings = settings
        self.log = log
        self.supervisor = None
        self.led = None
        self.lifecycle = None
        self.clock = None
        self.meter = None       # the meter pipeline (health, stale)
        self.ir_head = None     # raw ring for /logs/rawdump
        self.history = None
        self.tariff = None      # services.tariff.service.TariffService: prices, cost, peaks
        self.mqtt = None
        self.energy_floor = None  # services.metering.energy_floor.EnergyFloor: one rule for MQTT and the REST API
        self.modbus = None
        self.radio = None       # wifi.radio
        self.wifi = None        # drivers.radio.WifiManager: profiles, access point, scans
        self.wifi_scanner = None
        self.mdns = None        # services.network.mdns_service.MdnsAdvertiser
        self.captive_dns = None  # services.network.captive_dns.CaptiveDns
        self.improv = None      # services.network.provisioning.ImprovProvisioning (None without BLE)
        self.http = None        # services.api.service.HttpApi
        self.auth = None        # services.api.auth.Tokens
        self.flash_log = None
        self.ota = None
        self.outages = None
        self.cloud = None
        self.cloud_pairing = None
        self.emulation = None   # services.emulation.loader.EmulationLoader (brings the emulations in while on)
        self.shelly_ident = None  # services.emulation.shelly_rpc.Identity (emulated Shelly Pro 3EM)
        self.shelly_udp = None  # services.emulation.shelly_udp.ShellyUdp
        self.shelly_ws = None   # services.emulation.shelly_ws.ShellyWs (Home Assistant's WebSocket RPC)
        self.sma = None         # services.emulation.sma_sender (SMA Energy Meter datagrams)
        self.heap_largest = None  # callable: the largest free block (espidf), or None
        # What the features' wiring entries (services/*/wiring.py) share while code.py builds them:
        self.pool = None        # socketpool.SocketPool
        self.sockets = None     # core.sockbudget.SocketBudget: asked before a feature takes one more socket
        self.routes = []        # route modules: each has routes(app) -> [Route]; the HTTP server starts with them
        self.flushables = []    # services that buffer writes to the flash (flush() on reboot, button, reset)
        self.env = None         # env(name, default): a settings.toml value
        self.pin = None         # pin(name): a board pin by its name
        self.http_port = 80
        self.features_off = {}  # feature name -> why it is not running (e.g. out of memory at start)
        self.starting = []      # (name, wiring module) of the features code.py wires from the loop, one a cycle
        self.device_id = ""     # last 12 hex digits of the MAC
        self.mem_free = None    # callable: free heap bytes (gc.mem_free)
        self.boot_ticks = 0
        self.reset_reason = ""


class LazyRoutes:
    """A feature's route module by name, not imported: the HTTP API imports it at the first request for a path under
    one of its prefixes. CircuitPython keeps every imported module's code in the heap and collects after each import,
    so a handler nobody asked for costs the start nothing and the heap nothing."""

    def __init__(self, module, prefixes, open_paths=()):
        self.module = module
        self.prefixes = prefixes
        self.OPEN_PATHS = open_paths    # the name a route module uses: token-free paths are known before the import

