"""Settings routes: GET the whole document (no secrets), POST a partial update (all or nothing), restore a backup.

The work (the answers, the checks of core/settings_check.py) is services/api/settings_job.py, imported for the request
and let go after it: CircuitPython keeps every imported module's code in the heap, and the settings are read and saved
a few times a day (issue 35)."""

from adafruit_httpserver import GET, POST, Route

from core.modules import unload

JOB = ("services.api.settings_job", "core.settings_check")


def _job(app, name):
    def handler(request):
        import sys

        was = JOB[0] in sys.modules      # a caller that holds it (a test) keeps it
        from services.api import settings_job

        try:
            return getattr(settings_job, name)(app, request)
        finally:
            if not was:
                unload(*JOB, collect=False)   # freed by the next collection (the answer's or the supervisor's)
    return handler


def routes(app):
    """Route list of /api/v1/settings."""
    return [
        Route("/api/v1/settings", GET, _job(app, "get_settings")),
        Route("/api/v1/settings", POST, _job(app, "post_settings")),
        Route("/api/v1/settings/restore", POST, _job(app, "restore")),
    ]
