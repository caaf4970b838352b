"""mDNS: meterplus-<device id>.local, the web interface as _http._tcp and the API as _wattwaechter._tcp; while the
Shelly emulation is on, also _shelly._tcp under the instance name shellypro3em-<mac> (docs/emulation.md)."""

from core.module import Module

# The WattWächter Home Assistant integration discovers devices by this zeroconf type (its manifest's "zeroconf").
SERVICES = (("_http", "_tcp"), ("_wattwaechter", "_tcp"))
SHELLY = ("_shelly", "_tcp")   # Home Assistant's Shelly integration also takes _http._tcp instances named shelly*


class MdnsAdvertiser(Module):
    """server_factory: a callable returning mdns.Server(wifi.radio) (CircuitPython's one server per interface);
    device_id; port: the HTTP port. The ESP-IDF responder announces again by itself when the station (re)joins."""

    name = "mdns"
    poll_every_ms = 100     # RFC 6762 asks a responder to answer within 20-120 ms

    def __init__(self, server_factory, device_id, port, shelly=None):
        Module.__init__(self)
        self._factory = server_factory
        self.hostname = "meterplus-" + device_id
        self.shelly_name = "shellypro3em-" + device_id
        self.port = port
        self._shelly = shelly        # callable -> whether the Shelly emulation is on (None: never)
        self._shelly_on = False
        self._server = None

    def fqdn(self):
        """The name a client resolves: meterplus-<device id>.local."""
        return self.hostname + ".local"

    def start(self):
        shelly_on = self._shelly is not None and bool(self._shelly())
        server = self._factory()
        server.hostname = self.hostname
        # One instance name per interface: a battery or Home Assistant looks for shelly*, the rest for the name.
        server.instance_name = self.shelly_name if shelly_on else self.hostname
        services = SERVICES + ((SHELLY,) if shelly_on else ())
        for service_type, protocol in services:
            # Espressif publishes no TXT records (CircuitPython 10 raises NotImplementedError for txt_records):
            # clients read the rest from /system/info or GET /shelly.
            server.advertise_service(service_type=service_type, protocol=protocol, port=self.port)
        self._server = server
        self._shelly_on = shelly_on
        self.count("advertised", len(services))

    def poll(self, now_ms):
        # The responder cannot withdraw one service: switching the emulation re-creates it with the new set.
        if self._shelly is not None and bool(self._shelly()) != self._shelly_on:
            self.stop()
            self.start()

    def stop(self):
        if self._server is not None:
            try:
                self._server.deinit()
            except Exception:
                pass
            self._server = None

    def describe(self):
        d = Module.describe(self)
        d["hostname"] = self.fqdn()
        return d
