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
        self.mqtt = None
        self.energy_floor = None  # services.metering.energy_floor.EnergyFloor: one rule for MQTT and the REST API
        self.modbus = None
        self.radio = None       # wifi.radio
        self.wifi = None        # drivers.radio.WifiManager: profiles, access point, scans
        self.wifi_scanner = None
        self.mdns = None        # services.network.mdns_service.MdnsAdvertiser
        self.captive_dns = None  # services.network.captive_dns.CaptiveDns
        self.improv = None      # services.network.provisioning.ImprovProvisioning (None without BLE)
        self.device_id = ""     # last 12 hex digits of the MAC
        self.mem_free = None    # callable: free heap bytes (gc.mem_free)
        self.boot_ticks = 0
        self.reset_reason = ""
