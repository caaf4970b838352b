"""Cloud pairing routes: POST stores the pairing token (as a hash, never echoed), DELETE removes the pairing."""

from adafruit_httpserver import DELETE, POST, JSONResponse, Route

from services.api.answers import ApiError, read_json
from services.cloud.pairing import Pairing, valid_token


def routes(app):
    """Route list of /api/v1/cloud/pair. app.cloud_pairing is the stored pairing (code.py's cloud block)."""
    pairing = getattr(app, "cloud_pairing", None)
    if pairing is None:
        pairing = Pairing("cloud.json")
        pairing.load()
        app.cloud_pairing = pairing

    def connected():
        cloud = getattr(app, "cloud", None)
        return bool(cloud is not None and cloud.connected)

    def pair(request):
        body = read_json(request)
        token = body.get("pairing_token")
        fields = dict((k, "unknown key") for k in body if k != "pairing_token")
        if not valid_token(token):
            fields["pairing_token"] = "required: 1 to 64 letters, digits, - or _ (e.g. WW-XXXXXXXX)"
        if fields:
            raise ApiError(400, "Invalid request", fields=fields)
        try:
            pairing.pair(token)
        except OSError as exc:
            raise ApiError(503, "Pairing could not be stored: %s" % exc, code="storage_failed")
        enabled = bool(app.settings.get("cloudIotEnabled", False))
        return JSONResponse(request, {"success": True, "paired": True, "connected": connected(),
                                      "message": "Pairing stored" + ("" if enabled else
                                                                     "; enable cloudIotEnabled to connect")})

    def unpair(request):
        try:
            pairing.unpair()
        except OSError as exc:
            raise ApiError(503, "Pairing could not be removed: %s" % exc, code="storage_failed")
        return JSONResponse(request, {"success": True, "paired": False, "connected": False,
                                      "message": "Cloud pairing removed"})

    return [
        Route("/api/v1/cloud/pair", POST, pair),
        Route("/api/v1/cloud/pair", DELETE, unpair),
    ]
