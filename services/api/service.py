"""The REST API service: the hardened server plus rate limit, low-heap guard, routing (404/405) and token levels."""

import json

from adafruit_ticks import ticks_diff, ticks_ms

from core.module import Module
from services.api.auth import OPEN, READ, WRITE
from services.api.server import HardenedServer, bearer_token, error_response

# Token level by path prefix and method (None = any method); the first matching row wins. Routes of other
# services (history, mqtt, modbus) are covered here, so their modules register plain Routes and stay auth-free.
AUTH_TABLE = (
    ("/api/v1/system/alive", None, OPEN),
    ("/api/v1/system/wifi_scan", None, OPEN),
    ("/api/v1/history/", "GET", READ),
    ("/api/v1/mqtt/", "GET", READ),
    ("/api/v1/modbus/", "GET", READ),
    ("/", "GET", READ),
    ("/", None, WRITE),
)


def required_level(method, path):
    """The token level a request needs while authentication is on."""
    for prefix, want, level in AUTH_TABLE:
        if path.startswith(prefix) and (want is None or want == method):
            return level
    return WRITE


class RateLimiter:
    """Sliding window: at most limit requests in any window_ms, device-wide (a ring of the last limit times)."""

    def __init__(self, limit=25, window_ms=10000):
        self.limit = limit
        self.window_ms = window_ms
        self._times = [0] * limit
        self._next = 0
        self._count = 0

    def allow(self, now):
        """Record and allow a request, or refuse it (a refused request is not recorded)."""
        if self._count == self.limit:
            if ticks_diff(now, self._times[self._next]) < self.window_ms:
                return False
        else:
            self._count += 1
        self._times[self._next] = now
        self._next = (self._next + 1) % self.limit
        return True


class HttpApi(Module):
    """pool: socketpool.SocketPool; app: core.app.App (settings, auth, mem_free, log);
    route_modules: modules with routes(app) -> [Route]."""

    name = "http"
    min_free_heap = 25 * 1024     # below this, answer 503 (spec)
    retry_after_429 = "10"
    retry_after_503 = "5"

    def __init__(self, pool, app, host="0.0.0.0", port=80, route_modules=(), rate_limit=25, rate_window_ms=10000,
                 ticks=ticks_ms):
        Module.__init__(self)
        self._pool = pool
        self._app = app
        self.host = host
        self.port = port
        self._route_modules = route_modules
        self._ticks = ticks
        self._server = None
        self._routes = []
        self.limiter = RateLimiter(rate_limit, rate_window_ms)

    def start(self):
        server = HardenedServer(self._pool, self._dispatch, ticks=self._ticks, log=self._app.log)
        routes = []
        for mod in self._route_modules:
            routes.extend(mod.routes(self._app))
        self._routes = routes
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

    def _find(self, method, path):
        """(handler, params) of the matching route, or (None, allowed methods of the path)."""
        allowed = []
        for route in self._routes:
            ok, params = route.matches(method, path)
            if ok:
                return route.handler, params
            if route.path_pattern.match(path) is not None:
                for m in route.methods:
                    if m not in allowed:
                        allowed.append(m)
        return None, allowed

    def _dispatch(self, request):
        """Limits first (429, 503), then routing (404, 405), then the token level (401, 403), then the handler."""
        now = self._ticks()
        if not self.limiter.allow(now):
            self.count("rate_limited")
            return error_response(request, 429, "Too many requests", headers={"Retry-After": self.retry_after_429})
        mem_free = self._app.mem_free
        if mem_free is not None and mem_free() < self.min_free_heap:
            self.count("low_heap")
            return error_response(request, 503, "Service temporary unavailable",
                                  headers={"Retry-After": self.retry_after_503})
        handler, extra = self._find(request.method, request.path)
        if handler is None:
            if extra:
                self.count("method_not_allowed")
                return error_response(request, 405, "Method not allowed", headers={"Allow": ", ".join(sorted(extra))})
            self.count("not_found")
            return error_response(request, 404, "Not found")
        denied = self._check_token(request)
        if denied is not None:
            return denied
        if request.body:
            ctype = request.headers.get_directive("Content-Type")
            if ctype is not None and ctype.lower() == "application/json":
                # Checked here for every route (other services' too): a malformed or too deeply nested body is
                # 400 before any handler sees it. Bodies are at most 8 KB, so the second parse is cheap.
                try:
                    json.loads(request.body)
                except Exception:
                    return error_response(request, 400, "Malformed JSON")
        return handler(request, **extra)

    def _check_token(self, request):
        """None when the request may proceed, else the 401/403 answer."""
        app = self._app
        if not app.settings.get("api_auth_required", False):
            return None
        need = required_level(request.method, request.path)
        if need == OPEN:
            return None
        token = bearer_token(request.headers.get("Authorization"))
        have = app.auth.level(token) if token else None
        if have is None:
            self.count("unauthorized")
            return error_response(request, 401, "Missing or invalid token", headers={"WWW-Authenticate": "Bearer"})
        if have < need:
            self.count("forbidden")
            return error_response(request, 403, "This endpoint needs the WRITE token")
        return None

    def describe(self):
        d = Module.describe(self)
        if self._server is not None:
            d.update(self._server.counters)
            d["open_connections"] = self._server.connections()
        return d
