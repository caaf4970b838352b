"""The logs feature: the persistent log on the flash and the log routes."""

from core.app import LazyRoutes
from services.logs.flash_log import FlashLog


def wire(app):
    """Register the flash log; the log's entries reach the flash from here on."""
    sup, log = app.supervisor, app.log
    flash_log = sup.add(FlashLog(wall_time=lambda: app.clock.time()
                                 if app.clock is not None and app.clock.synced else None))
    log.sinks.append(flash_log.sink)
    app.flushables.append(flash_log)
    app.flash_log = flash_log
    app.routes.append(LazyRoutes("services.logs.routes", ("/api/v1/logs/",)))
