"""The cloud feature (optional, off until paired): the pairing file, the uploader and the pairing routes."""

from core.app import LazyRoutes
from core.version import VERSION
from services.cloud.loader import CloudLoader


def wire(app):
    """Register the cloud loader (the uploader's code is imported only while cloudIotEnabled is on); a factory reset
    forgets the pairing."""
    try:
        import ssl
    except ImportError:
        ssl = None
    app.lifecycle.wipe_paths.append("cloud.json")
    app.supervisor.add(CloudLoader(app, VERSION, ssl_factory=ssl.create_default_context if ssl else None))
    app.routes.append(LazyRoutes("services.cloud.routes", ("/api/v1/cloud/",)))
