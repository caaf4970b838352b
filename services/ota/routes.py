"""OTA routes: GET /ota/check answers from the last check (and starts one when it is old), POST /ota/start installs."""

from adafruit_httpserver import GET, POST, JSONResponse, Route

from core.version import VERSION


def routes(app):
    """Route list of /api/v1/ota/*."""
    ota = getattr(app, "ota", None)

    def ota_check(request):
        if ota is not None:
            return JSONResponse(request, ota.check_result())
        return JSONResponse(request, {"ok": True, "data": {
            "update_available": False, "version": VERSION, "tag": "", "release_date": "",
            "release_note_de": "", "release_note_en": "", "last_checked": 0, "url": "", "md5": "",
        }})

    def ota_start(request):
        if ota is not None:
            return JSONResponse(request, ota.start_update())
        return JSONResponse(request, {"ok": False, "update_available": False, "message": "No update available"})

    return [
        Route("/api/v1/ota/check", GET, ota_check),
        Route("/api/v1/ota/start", POST, ota_start),
    ]
