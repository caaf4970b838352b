"""The network feature: WiFi profiles and the access point, the captive DNS of a first setup, their routes (mDNS is
wired after the first reading: mdns_wiring.py).

Socket budget: the ESP32-S3 build has 8 sockets in the whole system. HTTP listen + 2 clients (3), Modbus listen
+ 2 clients (3, only when modbus.enable), MQTT (1), NTP (1, only during a query), captive DNS (1, only while the
AP is up and the station is not joined), our mDNS responder (1, only while it fits beside the rest: mdns_budget;
docs/api.md). CircuitPython's own mdns module (the fallback) and BLE use no socketpool sockets (ESP-IDF's own UDP
pcb / NimBLE).
"""

from core.app import LazyRoutes
import ipaddress

import wifi

from drivers.radio import WifiManager
from services.network import routes as network_routes
from services.network.captive_dns import CaptiveDns


def wire(app):
    """Register the WiFi manager and the captive DNS."""
    sup, env = app.supervisor, app.env
    app.wifi = sup.add(WifiManager(wifi.radio, wifi.AuthMode, app.settings, app.reset_reason, app.device_id,
                                   ip_address=ipaddress.ip_address, log=app.log))
    app.wifi_scanner = app.wifi.scanner
    app.captive_dns = sup.add(CaptiveDns(app.pool, app.wifi, host=env("METERPLUS_BIND", "0.0.0.0"),
                                         port=int(env("METERPLUS_DNS_PORT", 53)),
                                         setup_url=env("METERPLUS_SETUP_URL", None)))
    app.captive_dns.budget = app.sockets
    app.routes.append(network_routes)
    app.routes.append(LazyRoutes("services.network.join", ("/api/v1/wifi/join",)))
