"""The meter emulations (docs/emulation.md): the Shelly's HTTP routes, and a loader that brings the Shelly listeners
and the SMA sender into the heap only while their setting is on (both off by default)."""

from services.emulation import shelly_routes
from services.emulation.loader import EmulationLoader


def wire(app):
    """Register the loader and the routes (404 until emulation.shelly); METERPLUS_SMA_GROUP moves the SMA group on
    a host."""
    app.emulation = app.supervisor.add(EmulationLoader(app, bind=app.env("METERPLUS_BIND", "0.0.0.0"),
                                                       sma_group=app.env("METERPLUS_SMA_GROUP", None)))
    app.routes.append(shelly_routes)
