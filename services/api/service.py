"""The REST API service: the hardened server plus rate limit, low-heap guard, routing (404/405) and token levels."""

import json
import sys

from adafruit_httpserver import Redirect, Response
from adafruit_ticks import ticks_diff, ticks_ms

from core.app import LazyRoutes
from core.elapsed import fresh
from core.module import Module
from services.api.auth import OPEN, READ, RECOVERY_MS, RECOVERY_TRIES, WRITE
from services.api.origin import cross_site, device_names, host_allowed
from services.api.ratelimit import LENT, STRANGER, TOKEN, RateLimiter
from services.api.answers import ApiError, error_response, read_json
from services.api.http_parse import bearer_token
from services.api.server import HardenedServer

ALIVE_PATH = "/api/v1/system/alive"
METRICS_PATH = "/metrics"   # services/metrics: outside /api/ as Prometheus expects, but an API request
# services/emulation: the emulated Shelly's paths. Batteries send no token and poll once a second: read-only
# answers, token-free, on a request budget of their own that neither spends nor waits for the API's.
EMULATION_PATHS = ("/shelly", "/rpc")
# The page's own 429 (both languages: the page cannot know the user's yet); it reloads itself after Retry-After.
# By script: every view of the page is a deep link (/#/settings/wifi), and Chromium takes a meta refresh to the same
# URL with a fragment as a jump within the page, so it never reloaded; location.reload() keeps the view. The meta
# refresh stays for a browser without scripts. The policy allows only this script (its hash) and inline style.
PAGE_429_SCRIPT = "setTimeout(function(){location.reload()},10000)"
PAGE_429_CSP = ("default-src 'none'; script-src 'sha256-jygDiboCukX3RL6VOiQzeK3dewnWsWaMQZO5Tlgr6ao='; "
                "style-src 'unsafe-inline'")
PAGE_429 = ('<!doctype html><html><head><meta charset="utf-8"><noscript><meta http-equiv="refresh" content="10">'
            '</noscript><meta name="viewport" content="width=device-width,initial-scale=1"><title>Meter Plus</title>'
            '<script>' + PAGE_429_SCRIPT + '</script></head><body style="font-family:sans-serif;margin:2rem">'
            '<h1>Meter Plus</h1><p lang="de">Zu viele Anfragen: Die Seite lädt sich in 10 Sekunden von selbst neu.</p>'
            '<p lang="en">Too many requests: the page reloads by itself in 10 seconds.</p></body></html>')

# The page while the start in stages still wires features (code.py): it reloads itself a second later (Retry-After),
# under the same kind of policy as the 429 page.
PAGE_STARTING_SCRIPT = "setTimeout(function(){location.reload()},1000)"
PAGE_STARTING_CSP = ("default-src 'none'; script-src 'sha256-MRpFkKGRSJ0dMzqydNEsHjwXEJNJ5U72b9hK1hJN1zM='; "
                     "style-src 'unsafe-inline'")
PAGE_STARTING = ('<!doctype html><html><head><meta charset="utf-8"><noscript><meta http-equiv="refresh" content="1">'
                 '</noscript><meta name="viewport" content="width=device-width,initial-scale=1"><title>Meter Plus'
                 '</title><script>' + PAGE_STARTING_SCRIPT + '</script></head><body style="font-family:sans-serif;'
                 'margin:2rem"><h1>Meter Plus</h1><p lang="de">Meter Plus startet: Die Seite lädt sich gleich von '
                 'selbst neu.</p><p lang="en">Meter Plus is starting: the page reloads by itself in a moment.</p>'
                 '</body></html>')

# Token level by path prefix and method (None = any method); the first matching row wins. Routes of other
# services (history, mqtt, modbus) are covered here, so their modules register plain Routes and stay auth-free.
AUTH_TABLE = (
    (ALIVE_PATH, None, OPEN),
    ("/api/v1/system/wifi_scan", None, OPEN),
    ("/api/v1/history/", "GET", READ),
    ("/api/v1/mqtt/", "GET", READ),
    ("/api/v1/modbus/", "GET", READ),
    ("/api/", "GET", READ),
    ("/api/", None, WRITE),
    (METRICS_PATH, "GET", READ),
    ("/shelly", "GET", OPEN),
    ("/rpc", None, OPEN),
    ("/", "GET", OPEN),   # outside /api/ only the web interface's static files: the page asks for the token itself
)


# The token pair routes a button press on the device opens for RECOVERY_MS (services/api/auth.py) without a token.
RECOVERY_PATHS = ("/api/v1/auth/tokens/generate", "/api/v1/auth/tokens/confirm")
UNAUTHORIZED = ("Missing or invalid token. Token lost? Press the device's button briefly: for 2 minutes the page "
                "may then make a new token pair without one, with the recovery code the device shows (serial "
                "console, LED)")
RECOVERY_CODE_NEEDED = ("The recovery window is open: send the recovery code the device shows (serial console, "
                        "LED) as recoveryCode")


def is_emulation(path):
    """True for the emulated Shelly's paths (/shelly, /rpc, /rpc/<Method>)."""
    for p in EMULATION_PATHS:
        if path == p or path.startswith(p + "/"):
            return True
    return False


def required_level(method, path):
    """The token level a request needs while authentication is on."""
    for prefix, want, level in AUTH_TABLE:
        if path.startswith(prefix) and (want is None or want == method):
            return level
    return WRITE


class HttpApi(Module):
    """pool: socketpool.SocketPool; app: core.app.App (settings, auth, mem_free, log);
    route_modules: modules with routes(app) -> [Route]."""

    name = "http"
    min_free_heap = 25 * 1024     # below this, answer 503 (spec)
    retry_after_429 = "10"
    retry_after_503 = "5"
    alive_reserve = 5             # alive answers per window beyond the spent budget (see _over_budget)
    page_budget = 10              # page and static-file requests per window: a budget of their own (_page_refused)
    emulation_budget = 30         # emulated-Shelly requests per window: two batteries polling once a second, + 50 %
    unauthenticated_share = 40    # while authentication is on, requests without a valid token (404s, 401s, alive) have
    #                               a budget of their own, this percentage of the API's (10 of 25 per window), so they
    #                               never spend the token holders' budget
    accept_every_ms = 10          # an idle listener is asked this often (HardenedServer.accept_every_ms)
    follow_up_ms = 100            # busy() this long after a request: a client's next one usually follows at once

    def __init__(self, pool, app, host="0.0.0.0", port=80, route_modules=(), rate_limit=25, rate_window_ms=10000,
                 ticks=ticks_ms):
        Module.__init__(self)
        self._pruned_at = None     # ticks of the last expiry of the limiters and the pending token pair
        self._pool = pool
        self._app = app
        self.host = host
        self.port = port
        self._route_modules = route_modules
        self._ticks = ticks
        self._server = None
        self._routes = []
        self.limiter = RateLimiter(rate_limit, rate_window_ms)
        self.alive_limiter = RateLimiter(self.alive_reserve, rate_window_ms)
        self.page_limiter = RateLimiter(self.page_budget, rate_window_ms)
        self.emulation_limiter = RateLimiter(self.emulation_budget, rate_window_ms)
        self.unauthenticated_budget = max(1, rate_limit * self.unauthenticated_share // 100)
        self.unauthenticated_limiter = RateLimiter(self.unauthenticated_budget, rate_window_ms)
        self._names = ()
        self._open_paths = ()
        self._routes_of = 0        # how many of route_modules gave their routes (_take_routes)
        self._lazy = []            # core.app.LazyRoutes not imported yet
        self.last_open_error = ""  # the last failure of a request without a valid token (counted, never logged)
        self._events = None        # the bus's "event" ring: a button press opens the token recovery window

    def start(self):
        self._names = device_names(self._app.device_id)
        if self._events is None and getattr(self._app, "bus", None) is not None:
            self._events = self._app.bus.subscribe("event", 4)
        self._open_paths = ()
        self._routes = []
        self._lazy = []
        self._routes_of = 0
        self._take_routes()
        server = HardenedServer(self._pool, self._dispatch, ticks=self._ticks, log=self._app.log)
        server.accept_every_ms = self.accept_every_ms
        server.flooding = self._refused_lately   # a flooder's unfinished connection gives way to a polite one
        server.spare = self._spare_socket
        server.start(self.host, self.port)
        self._server = server

    def _take_routes(self):
        """The routes (and token-free paths, e.g. captive-portal probes) of route modules not taken yet: the server
        starts with the first features' and takes each later one's as code.py wires it (the start in stages)."""
        mods = self._route_modules
        if self._routes_of == len(mods):
            return
        new = mods[self._routes_of:]
        self._routes_of = len(mods)
        open_paths = list(self._open_paths)
        for mod in new:
            open_paths.extend(getattr(mod, "OPEN_PATHS", ()))
            if isinstance(mod, LazyRoutes):
                self._lazy.append(mod)      # imported at the first request for one of its paths (_load_lazy)
            else:
                self._routes.extend(mod.routes(self._app))
        self._open_paths = tuple(open_paths)

    def _load_lazy(self, path):
        """Import the route modules whose prefixes cover path (core.app.LazyRoutes) and take their routes."""
        # Asked on every request while a module waits: no list is built unless one matches.
        i = 0
        while i < len(self._lazy):
            lazy = self._lazy[i]
            for p in lazy.prefixes:
                if path.startswith(p):
                    break
            else:
                i += 1
                continue
            __import__(lazy.module)       # may raise (out of memory): it stays waiting, the next request tries again
            self._routes.extend(sys.modules[lazy.module].routes(self._app))
            del self._lazy[i]
            self.count("routes_loaded")

    def _refused_lately(self, peer, now):
        """True while a rate limit refuses peer (it was refused within the window, or it is a stranger while the
        strangers' pool is refused: services/api/ratelimit.py); asked only with both slots full. An address known
        to one budget (a token, or asking politely for minutes) is no stranger to the others."""
        known = self._known(peer)
        return self.limiter.flooding(peer, now, known) or self.emulation_limiter.flooding(peer, now, known) or \
            self.page_limiter.flooding(peer, now, known) or self.unauthenticated_limiter.flooding(peer, now, known)

    def _known(self, who):
        """True for an address one of the budgets knows (it earned its place there, or showed a token): it keeps a
        floor of its own in every budget beside a flood of strangers (services/api/ratelimit.py)."""
        return who is not None and (self.limiter.known(who) or self.emulation_limiter.known(who) or
                                    self.page_limiter.known(who) or self.unauthenticated_limiter.known(who))

    def poll(self, now_ms):
        # Time-limited state is expired here, once a second (allow() prunes before it decides), so no stamp grows
        # old enough for the tick wrap.
        if self._pruned_at is None or not 0 <= ticks_diff(now_ms, self._pruned_at) < 1000:
            self._pruned_at = now_ms
            self.limiter.prune(now_ms)
            self.alive_limiter.prune(now_ms)
            self.page_limiter.prune(now_ms)
            self.emulation_limiter.prune(now_ms)
            self.unauthenticated_limiter.prune(now_ms)
            auth = getattr(self._app, "auth", None)
            if auth is not None:
                auth.poll(now_ms)
                ev = self._events.pop() if self._events is not None else None
                while ev is not None:
                    if ev == ("button", "short"):
                        self._open_recovery(auth, now_ms)
                    ev = self._events.pop()
                if self._code_shown and not auth.recovering(now_ms):
                    self._show_code(None, now_ms)    # confirmed, timed out or closed by wrong codes: LED as before
        if self._routes_of != len(self._route_modules):
            self._take_routes()
        self._server.poll()

    _asked_at = None              # ticks of the last request taken (_dispatch)
    _code_shown = False           # the LED blinks a recovery code

    def _open_recovery(self, auth, now_ms):
        """A short press of the button while authentication is on: a recovery window with a new code, shown only at
        the device (the serial console and the LED), never in the log, an answer or /system/info. With
        authentication off nothing is locked and the press opens nothing."""
        if not self._auth_on():
            return
        code = auth.open_recovery(now_ms)
        print("auth: recovery code %s %s (valid %d s): enter it on the page under \"Token lost?\""
              % (code[:3], code[3:], RECOVERY_MS // 1000))
        self._show_code(code, now_ms)
        self._app.log.info("auth: button pressed, a new token pair may be made for %d s with the code the device "
                           "shows (serial console, LED)", RECOVERY_MS // 1000)

    def _show_code(self, code, now_ms):
        led = getattr(self._app, "led", None)
        if led is not None and hasattr(led, "show_code"):
            led.show_code(code, now_ms, RECOVERY_MS)
        self._code_shown = code is not None

    def busy(self):
        """A connection is open (its answer takes a few more polls), or a request came within follow_up_ms: a page's
        next file or a script's next call comes right after an answer, and code.py's start then wires its next
        feature (~1 S3 s with nothing answered) after it."""
        server = self._server
        if server is None:
            return False
        if server.connections() > 0:
            return True
        at = self._asked_at
        if at is None:
            return False
        if fresh(at, self._ticks(), self.follow_up_ms):
            return True
        self._asked_at = None       # dropped once old: 2**29 ms later the stamp would look recent again
        return False

    def _spare_socket(self):
        """True while the system has a socket beyond those held (core/sockbudget.py): the server accepts past a
        newcomer waiting in its momentary place only then (an accept with none left resets the client)."""
        budget = getattr(self._app, "sockets", None)
        return budget is None or budget.held() < budget.total

    def sockets_held(self):
        """Sockets the API holds: its listener and the connections open now (core/sockbudget.py)."""
        server = self._server
        if server is None:
            return 0
        return (0 if server.stopped else 1) + server.connections()

    def stop(self):
        if self._server is not None:
            try:
                self._server.stop()
            except Exception:
                pass
            self._server = None

    def _find(self, method, path):
        """(handler, params) of the matching route, or (None, allowed methods of the path)."""
        if self._lazy:
            self._load_lazy(path)
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
        """_route(request); what fails in it for a request without a valid token is counted (open_errors, with the
        last one's method, path and exception type in describe()) and answered 500, never logged: a stranger's
        errors must not fill the persistent log (issue 26). The owner's errors go on to the server, which logs them."""
        self._asked_at = self._ticks()
        try:
            return self._route(request)
        except ApiError:
            raise
        except Exception as exc:
            if self._authenticated(request):
                raise
            self.count("open_errors")
            self.last_open_error = "%s %s: %s" % (request.method, request.path[:48], type(exc).__name__)
            return error_response(request, 500, "Internal error")

    def _authenticated(self, request):
        """True when the request carries a valid token (only then may its failure reach the log)."""
        auth = getattr(self._app, "auth", None)
        token = bearer_token(request.headers.get("Authorization"))
        return bool(token) and auth is not None and auth.level(token) is not None

    def _route(self, request):
        """Browser rules first (421, 403), limits (429, 503), routing (404, 405), the token level (401, 403), handler.

        The browser rules come before the rate limit so a hostile page's refused requests cost no budget of the
        owner's clients; they are answered as cheaply as a 429. The rate limit comes before authentication so
        guessing tokens is throttled too.
        """
        hosts = request.headers.get_list("Host")
        if len(hosts) > 1 or not host_allowed(hosts[0] if hosts else None, self._names):
            setup = self._captive_setup_url()
            if setup is not None and request.method in ("GET", "HEAD"):
                # A phone on the setup AP asks its connectivity-check host (the captive DNS sent it here): the
                # portal sends it to the setup page. A redirect carries no data, so a rebinding page learns nothing.
                self.count("captive_redirect")
                return Redirect(request, setup)
            self.count("misdirected")
            return error_response(request, 421, "Host not accepted: address the device by its IP address or its "
                                                ".local name")
        refused = cross_site(request.method, request.headers)
        if refused is not None:
            self.count("cross_site")
            return error_response(request, 403, "Cross-site request refused (%s): changes are accepted from the "
                                                "device's own web page or from clients that are not browsers" % refused,
                                  key="cross_site")
        now = self._ticks()
        if is_emulation(request.path):
            addr = request.client_address
            who = addr[0] if isinstance(addr, tuple) and addr else None
            if not self.emulation_limiter.allow(now, who, LENT if self._known(who) else STRANGER):
                self.count("emulation_rate_limited")
                return error_response(request, 429, "Too many requests", headers={"Retry-After": "1"})
        elif request.method in ("GET", "HEAD") and not request.path.startswith("/api/") and \
                request.path != METRICS_PATH:
            # The page (one request, then 304s) never waits for the API's budget, which its own polling and any
            # other client spend; it has a budget of its own, and its refusal is a page, not raw JSON.
            addr = request.client_address
            who = addr[0] if isinstance(addr, tuple) and addr else None
            if not self.page_limiter.allow(now, who, LENT if self._known(who) else STRANGER):
                self.count("page_rate_limited")
                return Response(request, PAGE_429, status=(429, "Too Many Requests"), content_type="text/html",
                                headers={"Retry-After": self.retry_after_429, "Cache-Control": "no-store",
                                         "Content-Security-Policy": PAGE_429_CSP})
        elif self._over_budget(request, now):
            self.count("rate_limited")
            return error_response(request, 429, "Too many requests", headers={"Retry-After": self.retry_after_429})
        mem_free = self._app.mem_free
        if mem_free is not None and mem_free() < self.min_free_heap:
            self.count("low_heap")
            return error_response(request, 503, "Service temporary unavailable", key="busy",
                                  headers={"Retry-After": self.retry_after_503})
        handler, extra = self._find(request.method, request.path)
        if handler is None:
            if extra:
                self.count("method_not_allowed")
                return error_response(request, 405, "Method not allowed", headers={"Allow": ", ".join(sorted(extra))})
            if getattr(self._app, "starting", None):
                # The start in stages (code.py): the feature that owns this path may not be wired yet.
                self.count("starting")
                if request.method == "GET" and not request.path.startswith("/api/"):
                    return Response(request, PAGE_STARTING, status=(503, "Service Unavailable"),
                                    content_type="text/html", headers={"Retry-After": "1", "Cache-Control": "no-store",
                                                                       "Content-Security-Policy": PAGE_STARTING_CSP})
                return error_response(request, 503, "Starting: try again in a moment", key="starting",
                                      headers={"Retry-After": "1"})
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

    def _captive_setup_url(self):
        """The setup page's URL while a first setup on the access point redirects every name, else None."""
        dns = getattr(self._app, "captive_dns", None)
        if dns is None or not dns.wanted():
            return None
        return dns.setup_url

    def _over_budget(self, request, now):
        """True when the request is refused by its budget.

        Every request counts, alive included, so a flood of alive spends the budget like any other. While
        authentication is on, a request without a valid token (a 404, a 401, a guess, alive asked by a stranger)
        spends the unauthenticated budget, never the token holders' (the audit: token-free 404s from one address
        left Home Assistant 6 of 10 answers, from eight none); a token is checked first (one SHA-256), and a wrong
        one is throttled with the token-free requests. Once its budget is spent, GET alive is still answered from a
        small reserve of its own (alive_reserve per window): a health check (Home Assistant) and a locked-out owner
        can still see that the device is up while another client floods it, and the flood gains at most
        alive_reserve tiny answers per window.
        """
        addr = request.client_address
        who = addr[0] if isinstance(addr, tuple) and addr else None
        limiter = self.limiter
        # A valid token makes its address known (a floor of its own beside any number of strangers), also while
        # authentication is off; the token is only checked for a request that carries one.
        known = TOKEN if self._token_level(request) is not None else STRANGER
        if self._auth_on() and not known:   # a locked token file counts as on
            limiter = self.unauthenticated_limiter
        if not known and self._known(who):
            known = LENT
        if limiter.allow(now, who, known):
            return False
        if limiter is self.unauthenticated_limiter:
            self.count("unauthenticated_rate_limited")
        return not (request.method == "GET" and request.path == ALIVE_PATH and
                    self.alive_limiter.allow(now, who, known))

    def _token_level(self, request):
        """The level of the request's token (READ, WRITE) or None without a valid one; worked out once."""
        level = getattr(request, "token_level", False)
        if level is False:
            token = bearer_token(request.headers.get("Authorization"))
            auth = self._app.auth
            level = auth.level(token) if token and auth is not None else None
            request.token_level = level
            sockets = getattr(self._app, "sockets", None)
            addr = request.client_address
            if level is not None and sockets is not None and isinstance(addr, tuple) and addr:
                # A known address (core/sockbudget.py): its token-free WebSocket session (Home Assistant's Shelly
                # integration beside its WattWaechter one) comes before a stranger's.
                sockets.vouch(addr[0], self._ticks())
        return level

    def _auth_on(self):
        """Authentication is on when the settings say so or the token file does (a locked, unreadable one too)."""
        auth = getattr(self._app, "auth", None)
        return bool(self._app.settings.get("api_auth_required", False)) or (auth is not None and auth.required)

    def _check_token(self, request):
        """None when the request may proceed, else the 401/403 answer."""
        app = self._app
        if not self._auth_on():
            return None
        need = OPEN if request.path in self._open_paths else required_level(request.method, request.path)
        if need == OPEN:
            return None
        have = self._token_level(request)
        if (have is None or have < need) and request.path in RECOVERY_PATHS and request.method == "POST" and \
                app.auth.recovering(self._ticks()):
            # Presence at the device: the button was pressed within RECOVERY_MS and generate carries the code only
            # the device showed. Confirm needs the pending pair's WRITE token, which only generate's asker has.
            # Cross-site requests were refused before.
            if request.path == RECOVERY_PATHS[0]:
                refused = self._check_recovery_code(request)
                if refused is not None:
                    return refused
            self.count("recovery")
            return None
        if have is None:
            self.count("unauthorized")
            return error_response(request, 401, UNAUTHORIZED, headers={"WWW-Authenticate": "Bearer"})
        if have < need:
            self.count("forbidden")
            return error_response(request, 403, "This endpoint needs the WRITE token", key="write_token_needed")
        return None

    def _check_recovery_code(self, request):
        """None when generate's body carries the open window's recovery code ({"recoveryCode": "123456"}), else the
        answer: 401 without a code (nothing counted: a stranger without one cannot close the owner's window), 403
        for a wrong one (counted: the third closes the window, auth.RECOVERY_TRIES). The code is never echoed."""
        auth = self._app.auth
        body = read_json(request, required=False)
        code = body.get("recoveryCode") if body is not None else None
        if code is None:
            self.count("recovery_code_missing")
            return error_response(request, 401, RECOVERY_CODE_NEEDED, key="recovery_code_needed",
                                  headers={"WWW-Authenticate": "Bearer"})
        if auth.check_recovery(code, self._ticks()):
            return None
        self.count("recovery_code_wrong")
        left = auth.recovery_tries_left()
        if left:
            return error_response(request, 403, "Wrong recovery code: %d more tries in this window" % left,
                                  key="recovery_code_wrong")
        self._app.log.warning("auth: %d wrong recovery codes, the window is closed: press the button again",
                              RECOVERY_TRIES)
        return error_response(request, 403, "Wrong recovery code: the window is closed. Press the device's button "
                              "again for a new code", key="recovery_closed")

    def describe(self):
        d = Module.describe(self)
        if self._server is not None:
            d.update(self._server.counters)
            d["open_connections"] = self._server.other_connections()   # besides the asker, if a request asks
        budget = getattr(self._app, "sockets", None)
        if budget is not None:   # core/sockbudget.py: sockets the firmware holds now, openings refused for HTTP's sake
            d["sockets_held"] = budget.held()
            d["sockets_refused"] = budget.refused
            d["sockets_reclaimed"] = budget.reclaimed   # given up by a lower-ranked holder for a newcomer
            d["sockets_lent"] = budget.lent             # our mDNS responder's socket lent to an NTP round
        if self.last_open_error:
            d["last_open_error"] = self.last_open_error
        return d
