"""The Modbus feature: the SunSpec server (listening only while modbus.enable) and its status route."""

from core.app import LazyRoutes
from core.version import VERSION
from services.modbus.server import ModbusServer


def wire(app):
    """Register the Modbus server; the host runtime's --modbus-port wins over modbus.port."""
    port = app.env("METERPLUS_MODBUS_PORT", None)
    app.modbus = app.supervisor.add(ModbusServer(app.pool, app.bus, app.settings,
                                                 host=app.env("METERPLUS_BIND", "0.0.0.0"),
                                                 port_override=int(port) if port is not None else None,
                                                 serial=app.device_id, version=VERSION, log=app.log))
    app.modbus.budget = app.sockets
    app.routes.append(LazyRoutes("services.modbus.routes", ("/api/v1/modbus/",)))
