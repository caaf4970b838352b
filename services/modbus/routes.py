"""GET /api/v1/modbus/status: whether the Modbus server runs, its clients and what its registers hold now."""

from adafruit_httpserver import GET, Response, Route

from services.modbus.server import status_json


def routes(app):
    """[Route] for the status; app.modbus is the ModbusServer (None when code.py built none)."""

    def modbus_status(request):
        server = app.modbus
        if server is None:
            port = app.settings.get("modbus.port", 502)
            body = status_json(False, False, port if isinstance(port, int) else 502, 0, "[]")
        else:
            body = server.status_json()
        return Response(request, body, content_type="application/json")

    return [Route("/api/v1/modbus/status", GET, modbus_status)]
