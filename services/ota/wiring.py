"""The update feature: signed releases from the update server or uploaded as a file, applied by boot.py."""

from core.app import LazyRoutes
import os

from core.module import FAILED
from core.version import VERSION
from services.ota.service import OtaService


def wire(app):
    """Register the OTA service; it flushes and restarts through the lifecycle and trusts the HTTP server's health."""
    import boot  # the update anchor on the drive: its journal functions (main() runs only as boot.py itself)

    try:
        import ssl
    except ImportError:
        ssl = None
    http = app.http
    app.ota = app.supervisor.add(OtaService(app.pool, app.settings, VERSION, boot, clock=app.clock, led=app.led,
                                            flush=app.lifecycle.flush_all, restart=app.lifecycle.request_reboot,
                                            health=lambda: http is not None and http.state != FAILED,
                                            ssl_factory=ssl.create_default_context if ssl is not None else None,
                                            rand=lambda n: int.from_bytes(os.urandom(2), "big") % n, log=app.log))
    app.routes.append(LazyRoutes("services.ota.routes", ("/api/v1/ota/",)))
