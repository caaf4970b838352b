"""mDNS: meterplus-<device id>.local, the web interface as _http._tcp and the API as _wattwaechter._tcp."""

from core.module import Module

# The WattWächter Home Assistant integration discovers devices by this zeroconf type (its manifest's "zeroconf").
SERVICES = (("_http", "_tcp"), ("_wattwaechter", "_tcp"))


class MdnsAdvertiser(Module):
    """server_factory: a callable returning mdns.Server(wifi.radio) (CircuitPython's one server per interface);
    device_id; port: the HTTP port. The ESP-IDF responder announces again by itself when the station (re)joins."""

    name = "mdns"

    def __init__(self, server_factory, device_id, port):
        Module.__init__(self)
        self._factory = server_factory
        self.hostname = "meterplus-" + device_id
        self.port = port
        self._server = None

    def fqdn(self):
        """The name a client resolves: meterplus-<device id>.local."""
        return self.hostname + ".local"

    def start(self):
        server = self._factory()
        server.hostname = self.hostname
        server.instance_name = self.hostname
        for service_type, protocol in SERVICES:
            # Espressif publishes no TXT records (CircuitPython 10): clients read the rest from /system/info.
            server.advertise_service(service_type=service_type, protocol=protocol, port=self.port)
        self._server = server
        self.count("advertised", len(SERVICES))

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
