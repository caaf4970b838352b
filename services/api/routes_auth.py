"""Token routes: two-phase renewal (generate a pending pair, confirm it within 60 s)."""

from adafruit_httpserver import POST, JSONResponse, Route
from adafruit_ticks import ticks_ms

from services.api.auth import PENDING_MS, TokenError
from services.api.answers import ApiError, read_json


def routes(app, ticks=ticks_ms):
    """Route list of /api/v1/auth/tokens/*; app.auth is a services.api.auth.Tokens."""
    tokens = app.auth

    def generate(request):
        read, write = tokens.generate(ticks())
        return JSONResponse(request, {
            "success": True,
            "pending": {"token_read": read, "token_write": write},
            "expires_in": PENDING_MS // 1000,
            "message": "Call /api/v1/auth/tokens/confirm with new_write_token within 60 seconds to activate "
                       "the new tokens; until then the old tokens stay valid.",
        })

    def confirm(request):
        body = read_json(request)
        token = body.get("new_write_token")
        unknown = [k for k in body if k != "new_write_token"]
        if not isinstance(token, str) or not token or unknown:
            fields = dict((k, "unknown key") for k in unknown)
            if not isinstance(token, str) or not token:
                fields["new_write_token"] = "required: the WRITE token returned by generate"
            raise ApiError(400, "Invalid request", fields=fields)
        try:
            tokens.confirm(token, ticks())
        except TokenError as exc:
            raise ApiError(exc.status, exc.message, code="pair_expired" if exc.status == 410 else "pair_mismatch")
        except OSError as exc:
            raise ApiError(500, "Tokens could not be stored (%s)" % exc, code="storage_failed")
        app.log.info("API tokens renewed")
        return JSONResponse(request, {"success": True,
                                      "message": "New tokens are active; the previous tokens are invalid."})

    return [
        Route("/api/v1/auth/tokens/generate", POST, generate),
        Route("/api/v1/auth/tokens/confirm", POST, confirm),
    ]
