"""GET /api/v1/modbus/status: whether the Modbus server runs, its clients and what its registers hold now."""

from adafruit_httpserver import GET, JSONResponse, Route


def routes(app):
    """[Route] for the status; app.modbus is the ModbusServer (None when code.py built none)."""

    def modbus_status(request):
        server = app.modbus
        if server is None:
            body = {"enabled": False, "running": False, "port": app.settings.get("modbus.port", 502),
                    "active_connections": 0, "registers": []}
        else:
            body = server.status()
        return JSONResponse(request, body)

    return [Route("/api/v1/modbus/status", GET, modbus_status)]
