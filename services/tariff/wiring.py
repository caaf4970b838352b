"""The tariff feature: the price in force, day-ahead prices, cost booked with the history, peaks; its routes."""

from core.app import LazyRoutes
from services.tariff.service import TariffService


def wire(app):
    """Register the tariff service after the history (it prices the history's quarter hours)."""
    try:
        import ssl
    except ImportError:
        ssl = None
    app.tariff = app.supervisor.add(TariffService(app.pool, app.settings, app.bus, app.clock, history=app.history,
                                                  ssl_factory=ssl.create_default_context if ssl is not None else None,
                                                  log=app.log))
    if app.mqtt is not None:        # MQTT is wired before the tariff (code.py: the first reading comes sooner)
        app.mqtt.money = app.tariff.money_values
    app.routes.append(LazyRoutes("services.tariff.routes", ("/api/v1/cost", "/api/v1/tariff",
                                                             "/api/v1/peaks")))
