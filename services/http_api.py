"""The REST API service: an adafruit_httpserver Server polled without blocking, with routes from route modules."""

from adafruit_httpserver import GET, JSONResponse, Route, Server

from core.module import Module
from core.version import VERSION


class HttpApi(Module):
    """pool: a socketpool.SocketPool; app: core.app.App; route_modules: modules with routes(app) -> [Route]."""

    name = "http"

    def __init__(self, pool, app, host="0.0.0.0", port=80, route_modules=()):
        Module.__init__(self)
        self._pool = pool
        self._app = app
        self.host = host
        self.port = port
        self._route_modules = route_modules
        self._server = None

    def _alive(self, request):
        return JSONResponse(request, {"alive": True, "version": VERSION})

    def start(self):
        server = Server(self._pool, root_path=None, debug=False)
        server.add_routes([Route("/api/v1/system/alive", GET, self._alive)])
        for mod in self._route_modules:
            server.add_routes(mod.routes(self._app))
        server.socket_timeout = 0.25
        server.start(self.host, self.port)
        self._server = server

    def poll(self, now_ms):
        self._server.poll()

    def stop(self):
        if self._server is not None:
            try:
                self._server.stop()
            except Exception:
                pass
            self._server = None
