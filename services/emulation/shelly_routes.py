"""The Shelly Pro 3EM over HTTP: GET /shelly, GET /rpc/<Method>?id=0 and JSON-RPC POST /rpc, without a token and
read-only (batteries send none; no method changes a setting or a state). 404 while emulation.shelly is off."""

import json

from adafruit_httpserver import GET, POST, Response, Route
from adafruit_ticks import ticks_ms

from services.api.answers import error_response, status
from services.api.origin import foreign

_JSON = "application/json"
PATHS = ("/shelly", "/rpc")     # the API service gives these their own request budget and needs no token for them


def _params(request, rpc):
    """A GET's query as RPC params: each value as JSON where it parses (id=0 -> 0), else as the text; RpcError
    (400) for a value the parser cannot take at all (nested too deep: RecursionError on CPython, RuntimeError
    "maximum recursion depth exceeded" on CircuitPython; MemoryError), never an exception past the route."""
    out = {}
    storage = request.query_params._storage
    for name in storage:
        text = storage[name][0]
        try:
            out[name] = json.loads(text)
        except ValueError:
            out[name] = text
        except Exception:
            raise rpc.RpcError(rpc.BAD_ARGUMENT, "Invalid value of %s" % name[:32])
    return out


def _rpc():
    """The answer code, imported on use: it is in the heap only while the emulation is on (loader.py)."""
    from services.emulation import shelly_rpc

    return shelly_rpc


def _http_status(err):
    rpc = _rpc()
    return 503 if err.code == rpc.UNAVAILABLE else 404 if err.code == rpc.NOT_FOUND else 400


def _standing(app, request):
    """The standing (services/emulation/shelly_ws.py) of a WebSocket newcomer: TOKEN with a valid token in its
    Authorization header; else what the socket budget knows of its address (VOUCHED: it showed a token to the API
    within the hour, as Home Assistant's WattWaechter integration does; SETTLED: a session of it was served for
    10 minutes within the hour); the device's own page (a same-origin Origin: foreign() let it by) counts as
    SETTLED while authentication is off (a script can send any Origin, so it never outranks a known client; with
    authentication on the page's own token calls make its address VOUCHED); else ANON."""
    from services.api.http_parse import bearer_token
    from services.emulation import shelly_ws

    token = bearer_token(request.headers.get("Authorization"))
    auth = getattr(app, "auth", None)
    if token and auth is not None and auth.level(token) is not None:
        return shelly_ws.TOKEN
    budget = getattr(app, "sockets", None)
    addr = request.client_address
    host = addr[0] if isinstance(addr, tuple) and addr else None
    standing = shelly_ws.standing_of(budget.known(host, ticks_ms())) if budget is not None else shelly_ws.ANON
    if standing < shelly_ws.SETTLED and request.headers.get("Origin") and not _auth_on(app):
        standing = shelly_ws.SETTLED
    return standing


def _auth_on(app):
    """Authentication is on (the settings or the token file say so), as the API service decides it."""
    auth = getattr(app, "auth", None)
    return bool(app.settings.get("api_auth_required", False)) or (auth is not None and bool(auth.required))


def routes(app):
    """[Route] of the emulated Shelly; app.shelly_ident (shelly_rpc.Identity), bus, settings, energy floor."""

    def on():
        # Loaded by the emulation's loader (its next poll after the setting turned on): until then, as off.
        return app.shelly_ident is not None and app.settings.get("emulation.shelly", False) is True

    def current():
        from services.emulation.meter_view import view

        return view(app.bus.latest("reading"), ticks_ms(), app.energy_floor)

    def uptime():
        return app.log.uptime.ms() // 1000

    def off(request):
        return error_response(request, 404, "Not found")

    def shelly(request):
        if not on():
            return off(request)
        return Response(request, _rpc().device_info(app.shelly_ident), content_type=_JSON)

    def rpc_get(request, method):
        """A Shelly answers GET /rpc/<Method> with the bare result, or {"code", "message"} and an HTTP error."""
        if not on():
            return off(request)
        shelly_rpc = _rpc()
        try:
            try:
                body = shelly_rpc.result(method, _params(request, shelly_rpc), current(), app.shelly_ident, uptime())
            except shelly_rpc.RpcError:
                raise
            except Exception:   # token-free: whatever the input makes fail is a bad request, never a 500 or a log
                raise shelly_rpc.RpcError(shelly_rpc.BAD_ARGUMENT, "Invalid request")
        except shelly_rpc.RpcError as err:
            body = '{"code":%d,"message":%s}' % (err.code, json.dumps(err.message))
            return Response(request, body, status=status(_http_status(err)), content_type=_JSON)
        return Response(request, body, content_type=_JSON)

    def rpc_post(request):
        """JSON-RPC over HTTP: {"id", "method", "params"} -> a frame with the result or the error."""
        if not on():
            return off(request)
        try:
            doc = json.loads(request.body or b"")
        except Exception:   # ValueError, UnicodeError, a recursion error from deep nesting
            doc = None
        req_id, src = None, None
        shelly_rpc = _rpc()
        try:
            try:
                req_id, src, method, params = shelly_rpc.request_fields(doc)
                body = shelly_rpc.result(method, params, current(), app.shelly_ident, uptime())
            except shelly_rpc.RpcError:
                raise
            except Exception:   # as in rpc_get
                raise shelly_rpc.RpcError(shelly_rpc.BAD_ARGUMENT, "Invalid request")
        except shelly_rpc.RpcError as err:
            return Response(request, shelly_rpc.frame(req_id, app.shelly_ident.id, src, error=err),
                            content_type=_JSON)
        return Response(request, shelly_rpc.frame(req_id, app.shelly_ident.id, src, body), content_type=_JSON)

    def rpc_ws(request):
        """The WebSocket handshake of ws://device/rpc; the session then belongs to app.shelly_ws, not to a slot."""
        if not on() or app.shelly_ws is None:
            return off(request)
        headers = request.headers
        refused = foreign(headers)
        if refused is not None:
            # The upgrade is a GET, so the API's same-origin rule lets it by; a page on another origin must not
            # read live power (with authentication on). Home Assistant sends no Origin; the device's own page would.
            return error_response(request, 403, "Cross-site WebSocket refused (%s)" % refused, key="cross_site")
        key = headers.get("Sec-WebSocket-Key")
        if (headers.get("Upgrade") or "").lower() != "websocket" or not key or len(key) > 64:
            return error_response(request, 400, "WebSocket upgrade expected (JSON-RPC: POST /rpc)")
        live = current()
        if live is None or live.power is None:
            # Nothing live to push (the session would end at once, shelly_ws._stale): Home Assistant's Shelly
            # entities go unavailable rather than show old values, and it tries again on its own (every 60 s).
            return error_response(request, 503, "No fresh meter reading", key="stale",
                                  headers={"Retry-After": "10"})
        ws = app.shelly_ws
        standing = _standing(app, request)
        if not ws.room(standing):
            return error_response(request, 503, "Both WebSocket sessions are in use", key="busy",
                                  headers={"Retry-After": "60"})
        from services.emulation.ws_frames import accept_key

        def take_over(sock, addr):
            ws.adopt(sock, addr, standing)

        request.take_over = take_over
        return Response(request, "", status=(101, "Switching Protocols"), content_type=None,
                        headers={"Upgrade": "websocket", "Connection": "Upgrade",
                                 "Sec-WebSocket-Accept": accept_key(key)})

    return [Route("/shelly", GET, shelly), Route("/rpc/<method>", GET, rpc_get), Route("/rpc", POST, rpc_post),
            Route("/rpc", GET, rpc_ws)]
