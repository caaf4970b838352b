"""The cloud feature (optional, off until paired): the pairing file, the uploader and the pairing routes."""

from core.app import LazyRoutes
from core.version import VERSION
from services.cloud.pairing import Pairing
from services.cloud.service import CloudService


def wire(app):
    """Register the cloud service; a factory reset forgets the pairing."""
    try:
        import ssl
    except ImportError:
        ssl = None
    app.cloud_pairing = Pairing("cloud.json")   # the cloud/pair routes store through it
    app.cloud_pairing.load()
    app.lifecycle.wipe_paths.append("cloud.json")
    app.cloud = app.supervisor.add(CloudService(app.pool, app.bus, app.settings, app.cloud_pairing, app.device_id,
                                                VERSION, ssl_factory=ssl.create_default_context if ssl else None,
                                                clock=app.clock, log=app.log))
    app.routes.append(LazyRoutes("services.cloud.routes", ("/api/v1/cloud/",)))
