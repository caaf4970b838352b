"""The network feature: WiFi profiles and the access point, mDNS, the captive DNS of a first setup, their routes.

Socket budget: the ESP32-S3 build has 8 sockets in the whole system. HTTP listen + 2 clients (3), Modbus listen
+ 2 clients (3, only when modbus.enable), MQTT (1), NTP (1, only during a query), captive DNS (1, only while the
AP is up and the station is not joined), our mDNS responder (1, only while it fits beside the rest: mdns_budget;
docs/api.md). CircuitPython's own mdns module (the fallback) and BLE use no socketpool sockets (ESP-IDF's own UDP
pcb / NimBLE).
"""

from core.app import LazyRoutes
import ipaddress

import wifi

from core.sockbudget import TOTAL, worst_case
from drivers.radio import WifiManager
from services.network import routes as network_routes
from services.network.captive_dns import CaptiveDns


SOCKETS = TOTAL   # socketpool sockets in the whole system on the ESP32-S3 build (CONFIG_LWIP_MAX_SOCKETS)


def mdns_budget(settings):
    """None while our responder's socket fits beside what the features on may hold at once, else why not (then
    CircuitPython's responder, which uses no socket, answers instead): core/sockbudget.py worst_case()."""
    need = worst_case(settings.get)
    if need + 1 > SOCKETS:
        return ("socket budget: the features on may hold %d of the %d sockets, and the HTTP API keeps its own; "
                "the system responder uses none (no TXT records)" % (need, SOCKETS))
    return None


def _station_address():
    """The station's IPv4 as 4 bytes, None while it has none (what the mDNS A record says)."""
    ip = wifi.radio.ipv4_address
    return ip.packed if ip is not None else None


def wire(app):
    """Register the WiFi manager, the mDNS advertiser (where the build has mdns) and the captive DNS."""
    sup, env = app.supervisor, app.env
    app.wifi = sup.add(WifiManager(wifi.radio, wifi.AuthMode, app.settings, app.reset_reason, app.device_id,
                                   ip_address=ipaddress.ip_address, log=app.log))
    app.wifi_scanner = app.wifi.scanner
    def shelly_on():
        """The emulated Shelly's mDNS records are on: the emulation's word once it is wired (code.py wires it from
        the loop, after the responder's first probe), the setting's before, so the first probe already has them."""
        if app.emulation is not None:
            return app.emulation.wanted("shelly")
        return app.settings.get("emulation.shelly", False) is True

    try:
        import mdns

        from services.network.mdns_service import MdnsAdvertiser

        def system_mdns():
            return MdnsAdvertiser(lambda: mdns.Server(wifi.radio), app.device_id, app.http_port, shelly=shelly_on)
    except ImportError:  # a build without mdns: without our responder the device is reachable by its address only
        system_mdns = None
    port = int(env("METERPLUS_MDNS_PORT", 5353))   # 0: CircuitPython's responder only (the host runtime's default)
    if port:
        from core.version import VERSION
        from services.network.mdns_responder import MdnsResponder, service_list

        device_id, http_port = app.device_id, app.http_port
        app.mdns = sup.add(MdnsResponder(
            app.pool, _station_address, "meterplus-" + device_id,
            lambda: service_list(device_id, http_port, VERSION, shelly_on()), changed=shelly_on,
            host="0.0.0.0" if port == 5353 else env("METERPLUS_BIND", "0.0.0.0"), port=port,
            fallback=system_mdns, log=app.log, budget=lambda: mdns_budget(app.settings)))
        app.mdns.sockets = app.sockets
    elif system_mdns is not None:
        app.mdns = sup.add(system_mdns())
    else:
        app.log.warning("mdns unavailable")
    app.captive_dns = sup.add(CaptiveDns(app.pool, app.wifi, host=env("METERPLUS_BIND", "0.0.0.0"),
                                         port=int(env("METERPLUS_DNS_PORT", 53)),
                                         setup_url=env("METERPLUS_SETUP_URL", None)))
    app.captive_dns.budget = app.sockets
    app.routes.append(network_routes)
    app.routes.append(LazyRoutes("services.network.join", ("/api/v1/wifi/join",)))
