"""Settings routes: GET the whole document (no secrets), POST a partial update (all or nothing), restore a backup.

The work (the answers, the checks of core/settings_check.py) is services/api/settings_job.py, imported for the request
and let go after it: CircuitPython keeps every imported module's code in the heap, and the settings are read and saved
a few times a day (issue 35). Each import on the device is a whole-heap collection besides the loading, so the answer
is made in steps, one per poll (services/api/server.py, _work): a save loads the checks in one cycle, the routes'
work in the next, then checks and stores, and the loop runs in between."""

from adafruit_httpserver import GET, POST, Route

from core.modules import unload

JOB = ("services.api.settings_job", "core.settings_check")


def _steps(app, name, request):
    """The request's answer, one import per step; the job's modules are let go once the answer is made."""
    import sys

    was = JOB[0] in sys.modules      # a caller that holds it (a test) keeps it
    try:
        if name != "get_settings" and JOB[1] not in sys.modules:
            import core.settings_check  # noqa: F401  (the checks a save and a restore run)

            yield None
        from services.api import settings_job

        if not was:
            yield None
        yield getattr(settings_job, name)(app, request)
    finally:
        if not was:
            unload(*JOB, collect=False)   # freed by the next collection (the answer's or the supervisor's)


def _job(app, name):
    def handler(request):
        return _steps(app, name, request)
    return handler


def routes(app):
    """Route list of /api/v1/settings."""
    return [
        Route("/api/v1/settings", GET, _job(app, "get_settings")),
        Route("/api/v1/settings", POST, _job(app, "post_settings")),
        Route("/api/v1/settings/restore", POST, _job(app, "restore")),
    ]
