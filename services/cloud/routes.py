"""Cloud pairing routes: the pairing token sent by the app (no cloud connection yet)."""

from adafruit_httpserver import DELETE, POST, JSONResponse, Route

from services.api.server import ApiError, read_json


class CloudState:
    """What the cloud service will pick up: the pairing token sent by the app; nothing connects yet."""

    def __init__(self):
        self.pairing_token = None
        self.paired = False


def _valid_pairing_token(token):
    if not isinstance(token, str) or not 1 <= len(token) <= 64:
        return False
    for ch in token:
        if not (ch.isalpha() or ch.isdigit() or ch in "-_") or ord(ch) > 127:
            return False
    return True


def routes(app):
    """Route list of /api/v1/cloud/pair."""
    cloud = getattr(app, "cloud", None)
    if cloud is None:
        cloud = CloudState()
        app.cloud = cloud

    def pair(request):
        body = read_json(request)
        token = body.get("pairing_token")
        fields = dict((k, "unknown key") for k in body if k != "pairing_token")
        if not _valid_pairing_token(token):
            fields["pairing_token"] = "required: 1 to 64 letters, digits, - or _ (e.g. WW-XXXXXXXX)"
        if fields:
            raise ApiError(400, "Invalid request", fields=fields)
        cloud.pairing_token = token
        return JSONResponse(request, {"success": True, "paired": cloud.paired,
                                      "message": "Pairing token stored; the device pairs when the cloud "
                                                 "connection is available"})

    def unpair(request):
        cloud.pairing_token = None
        cloud.paired = False
        return JSONResponse(request, {"success": True, "paired": False, "message": "Cloud pairing removed"})

    return [
        Route("/api/v1/cloud/pair", POST, pair),
        Route("/api/v1/cloud/pair", DELETE, unpair),
    ]
