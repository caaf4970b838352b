"""The system feature: the lifecycle (restart, flush, factory reset), the status LED policy, the system routes."""

import microcontroller

from services.system import routes as system_routes
from services.system.lifecycle import Lifecycle
from services.system.status_policy import StatusPolicy

WIPE_PATHS = ("settings.json", "tokens.json", "mqtt_ca.pem")   # what a factory reset forgets


def wire(app):
    """Register the lifecycle and the LED policy; app.flushables fills up as later features are wired."""
    sup = app.supervisor
    sup.add(StatusPolicy(app.bus, app.led, sup, wifi=lambda: app.wifi))
    app.lifecycle = sup.add(Lifecycle(app.bus, app.led, microcontroller.reset, flushables=app.flushables,
                                      wipe_paths=WIPE_PATHS, log=app.log))
    app.routes.append(system_routes)
