"""mDNS: our responder (TXT records for WattWächter's and Home Assistant's discovery) or CircuitPython's own, wired
after the first reading (code.py FEATURES): its three modules were ~0.3-0.4 S3 s of imports on the way to it, and a
discovery a few seconds later costs nobody anything.

Socket budget: our responder takes one socket only while it fits beside what the features on may hold at once
(mdns_budget; docs/api.md); CircuitPython's responder, the fallback, uses none (ESP-IDF's own UDP pcb)."""

import wifi

from core.sockbudget import NTP_ROUND, TOTAL, responder_fits, worst_case

SOCKETS = TOTAL   # socketpool sockets in the whole system on the ESP32-S3 build (CONFIG_LWIP_MAX_SOCKETS)


def mdns_budget(settings):
    """None while our responder's socket fits beside what the features on may hold at once (it lends its socket to
    an NTP round), else why not (then CircuitPython's responder, which uses no socket, answers instead, without TXT
    records): core/sockbudget.py responder_fits()."""
    if responder_fits(settings.get):
        return None
    need = worst_case(settings.get) - NTP_ROUND
    return ("socket budget: the features on may hold %d of the %d sockets besides an NTP round, and the HTTP API "
            "keeps its own; the system responder uses none (no TXT records)" % (need, SOCKETS))


def _station_address():
    """The station's IPv4 as 4 bytes, None while it has none (what the mDNS A record says)."""
    ip = wifi.radio.ipv4_address
    return ip.packed if ip is not None else None


def wire(app):
    """Register the mDNS advertiser: our responder (METERPLUS_MDNS_PORT, 5353 on the device) with CircuitPython's as
    its fallback, or CircuitPython's alone where the build has mdns."""
    sup, env = app.supervisor, app.env

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
