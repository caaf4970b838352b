"""The metrics feature: GET /metrics for Prometheus (a route only: nothing polls)."""

from services.metrics import routes as metrics_routes


def wire(app):
    """Serve /metrics."""
    app.routes.append(metrics_routes)
