"""The metrics feature: GET /metrics for Prometheus (a route only, nothing polls; loaded at the first scrape)."""

from core.app import LazyRoutes


def wire(app):
    """Serve /metrics."""
    app.routes.append(LazyRoutes("services.metrics.routes", ("/metrics",)))
