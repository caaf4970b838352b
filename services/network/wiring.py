"""The network feature: WiFi profiles and the access point, mDNS, the captive DNS of a first setup, their routes.

Socket budget: the ESP32-S3 build has 8 sockets in the whole system. HTTP listen + 2 clients (3), Modbus listen
+ 2 clients (3, only when modbus.enable), MQTT (1), NTP (1, only during a query), captive DNS (1, only while the
AP is up and the station is not joined). mDNS and BLE use no socketpool sockets (ESP-IDF's own UDP pcb / NimBLE).
"""

import ipaddress

import wifi

from drivers.radio import WifiManager
from services.network import join as wifi_join_routes
from services.network import routes as network_routes
from services.network.captive_dns import CaptiveDns


def wire(app):
    """Register the WiFi manager, the mDNS advertiser (where the build has mdns) and the captive DNS."""
    sup, env = app.supervisor, app.env
    app.wifi = sup.add(WifiManager(wifi.radio, wifi.AuthMode, app.settings, app.reset_reason, app.device_id,
                                   ip_address=ipaddress.ip_address, log=app.log))
    app.wifi_scanner = app.wifi.scanner
    try:
        import mdns

        from services.network.mdns_service import MdnsAdvertiser

        app.mdns = sup.add(MdnsAdvertiser(lambda: mdns.Server(wifi.radio), app.device_id, app.http_port,
                                          shelly=lambda: app.emulation is not None and app.emulation.wanted("shelly")))
    except ImportError:  # a build without mdns: the device is still reachable by its address
        app.log.warning("mdns unavailable")
    app.captive_dns = sup.add(CaptiveDns(app.pool, app.wifi, host=env("METERPLUS_BIND", "0.0.0.0"),
                                         port=int(env("METERPLUS_DNS_PORT", 53)),
                                         setup_url=env("METERPLUS_SETUP_URL", None)))
    app.routes.append(network_routes)
    app.routes.append(wifi_join_routes)
