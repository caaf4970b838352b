"""The API feature: tokens (and whether authentication is on), the HTTP server, the settings and token routes.

Wired early and essential: it is what a user needs to repair the device, so a later feature that runs out of
memory never takes it along. Route modules of later features join app.routes before the server starts.
"""

from core.app import LazyRoutes
from services.api.auth import Tokens
from services.api.service import HttpApi

TOKENS_PATH = "tokens.json"
SETTINGS_PATH = "settings.json"


def seed_wifi(app):
    """First boot: settings.toml's WiFi keys seed the settings document once."""
    settings = app.settings
    if settings.exists() or not app.env("CIRCUITPY_WIFI_SSID", ""):
        return
    try:
        settings.update({"wifi": {"primary": {"ssid": app.env("CIRCUITPY_WIFI_SSID", ""),
                                              "password": app.env("CIRCUITPY_WIFI_PASSWORD", "")}}})
    except Exception as exc:
        app.log.warning("settings.toml WiFi not taken: %s", exc)


def load_tokens(app):
    """The token file, with authentication as it says: a damaged settings.json (zeroed, truncated, `null`: the
    defaults say "off") never switches authentication off."""
    settings, log = app.settings, app.log
    app.auth = Tokens(TOKENS_PATH)
    app.auth.load()
    if app.auth.locked:
        log.error("auth: %s unreadable: authentication stays on and no token is valid; press the button briefly, then "
                  "make a new token pair on the page within 2 minutes", TOKENS_PATH)
    elif app.auth.load_error:
        log.error("auth: %s: %s", TOKENS_PATH, app.auth.load_error)
    if settings.damaged:
        log.error("settings: %s unreadable, defaults in use (%d load errors); authentication stays as the token "
                  "file says: %s", SETTINGS_PATH, settings.load_errors, "on" if app.auth.required else "off")
    if settings.get("api_auth_required") and app.auth.configured() and not app.auth.required:
        try:
            app.auth.set_required(True)      # an older firmware kept it in settings.json only
        except OSError as exc:
            log.error("auth: cannot note authentication in the token file: %s", exc)
    elif app.auth.required and not settings.get("api_auth_required"):
        try:
            settings.update({"api_auth_required": True})
        except Exception as exc:
            settings.doc["api_auth_required"] = True   # on in RAM at least: the check reads it
            log.error("settings: cannot store api_auth_required again: %s", exc)


def wire(app):
    """Register the HTTP server (never given up, polled last) with the settings and token routes."""
    seed_wifi(app)
    load_tokens(app)
    app.routes.append(LazyRoutes("services.api.routes_settings", ("/api/v1/settings",)))
    app.routes.append(LazyRoutes("services.api.routes_auth", ("/api/v1/auth/",)))
    app.http = app.supervisor.add(HttpApi(app.pool, app, host=app.env("METERPLUS_BIND", "0.0.0.0"),
                                          port=app.http_port, route_modules=app.routes,
                                          rate_limit=int(app.env("METERPLUS_API_RATE_LIMIT", 25))),
                                  essential=True, last=True)
