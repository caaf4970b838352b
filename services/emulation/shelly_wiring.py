"""The Shelly Pro 3EM emulation: HTTP routes (/shelly, /rpc) and the UDP JSON-RPC listeners (off by default)."""

from core.version import VERSION
from services.emulation import shelly_routes
from services.emulation.shelly_rpc import Identity
from services.emulation.shelly_udp import ShellyUdp
from services.emulation.shelly_ws import ShellyWs


def wire(app):
    """Register the UDP listeners and the routes; both stay silent (404, no socket) until emulation.shelly."""
    app.shelly_ident = Identity(app.device_id, app.settings.get("device_name", None), VERSION)
    app.shelly_udp = app.supervisor.add(ShellyUdp(app.pool, app.bus, app.settings, app.shelly_ident,
                                                  energy_floor=app.energy_floor,
                                                  uptime=lambda: app.log.uptime.ms() // 1000,
                                                  host=app.env("METERPLUS_BIND", "0.0.0.0")))
    app.shelly_ws = app.supervisor.add(ShellyWs(app.bus, app.settings, app.shelly_ident,
                                                energy_floor=app.energy_floor,
                                                uptime=lambda: app.log.uptime.ms() // 1000))
    app.routes.append(shelly_routes)
