"""OTA routes: GET /ota/check answers from the last check (and starts one when it is old), POST /ota/start installs,
POST /ota/upload?offset=N takes a release archive piece by piece (docs/ota.md)."""

from adafruit_httpserver import GET, POST, JSONResponse, Route

from core.version import VERSION
from services.api.answers import ApiError, query, status
from services.api.http_parse import ascii_uint


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
        return JSONResponse(request, {"ok": False, "update_available": False, "code": "no_update", "version": "",
                                          "message": "No update available"})

    def ota_upload(request):
        if ota is None:
            raise ApiError(503, "Updates are not available on this device")
        offset = ascii_uint(query(request, "offset") or "")
        if offset is None:
            raise ApiError(400, "offset must be the byte offset of this piece in the archive (0 starts an upload)")
        code, answer = ota.upload_piece(offset, request.body or b"")
        return JSONResponse(request, answer, status=status(code))

    return [
        Route("/api/v1/ota/check", GET, ota_check),
        Route("/api/v1/ota/start", POST, ota_start),
        Route("/api/v1/ota/upload", POST, ota_upload),
    ]
