"""The BLE provisioning feature (Improv Wi-Fi): only on boards with BLE; the session loads at a button press or in
setup mode (services/network/improv_standby.py), adafruit_ble when a window opens."""

from core.version import VERSION
from drivers.radio import ap_ssid
from services.network.improv_standby import ImprovStandby


def ble_adapter():
    """The BLE adapter, or None on a board without BLE (4 MB S3 on CircuitPython 10)."""
    try:
        import _bleio
    except ImportError:
        return None
    return _bleio.adapter


def wire(app):
    """Register Improv provisioning over BLE, or say in the log that setup goes over the access point only."""
    if app.wifi is None:
        app.log.warning("BLE provisioning off: the network feature is off")
        return
    adapter = ble_adapter()
    if adapter is None:
        app.log.info("no BLE provisioning on this board: setup over the access point only")
        return
    port = app.http_port
    name = ap_ssid(app.settings, app.device_id)

    def improv_url():
        """Where the phone continues after provisioning: the web interface on the joined network."""
        ip = app.wifi.ip()
        if not ip:
            return ""
        return "http://%s/" % ip if port == 80 else "http://%s:%d/" % (ip, port)

    def transport():
        from drivers.ble_provision import BleImprovTransport   # imports adafruit_ble: only when a window opens
        from services.network.provisioning import CAPABILITIES

        return BleImprovTransport(adapter, name, CAPABILITIES)

    def session():
        from services.network.ble_on_demand import OnDemandTransport
        from services.network.provisioning import ImprovProvisioning

        return ImprovProvisioning(OnDemandTransport(transport, app.log), app.wifi, app.settings, app.bus, app.led,
                                  ("Meter Plus", VERSION, "ESP32-S3"), improv_url, log=app.log)

    app.improv = app.supervisor.add(ImprovStandby(session, app.wifi, app.bus, log=app.log))
