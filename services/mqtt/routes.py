"""MQTT routes: GET /api/v1/mqtt/status, POST/GET /api/v1/mqtt/test, GET/POST/DELETE /api/v1/mqtt/ca (token levels are
the server's job)."""

import json

from adafruit_httpserver import DELETE, GET, POST, JSONResponse, Route

from core.settings import check
from services.api.answers import ApiError, error_response, read_json
from services.mqtt.ca_store import MAX_BYTES, CertError, TooLarge


def _certificate_text(request):
    """The PEM text of a POST: text/plain (the spec) or {"certificate": "..."} (aio-wattwaechter); raises."""
    body = request.body or b""
    ctype = request.headers.get_directive("Content-Type")
    if ctype is not None and ctype.lower() == "application/json":
        try:
            data = json.loads(body)
        except (ValueError, UnicodeError):
            raise CertError("malformed JSON")
        if not isinstance(data, dict) or not isinstance(data.get("certificate"), str):
            raise CertError('JSON body must be {"certificate": "<PEM text>"}')
        return data["certificate"]
    if len(body) > MAX_BYTES:
        raise TooLarge("certificate larger than %d bytes" % MAX_BYTES)
    return body  # mqtt_ca.validate decodes and checks it


def routes(app):
    """[Route] for the MQTT status and the custom CA; app.mqtt is the MqttService (its .ca the CaStore)."""

    def mqtt_status(request):
        return JSONResponse(request, app.mqtt.status())

    def ca_status(request):
        return JSONResponse(request, app.mqtt.ca.status())

    def ca_upload(request):
        ca = app.mqtt.ca
        try:
            ca.save(_certificate_text(request))
        except TooLarge as exc:
            return error_response(request, 413, str(exc))
        except CertError as exc:
            return error_response(request, 400, str(exc))
        except OSError as exc:
            return error_response(request, 500, "certificate could not be stored (%s)" % exc, key="storage_failed")
        app.mqtt.ca_changed()
        return JSONResponse(request, {"success": True, "message": "CA certificate stored; MQTT over TLS uses it "
                                      "instead of the built-in bundle", "bundle_size": ca.status()["bundle_size"]})

    def ca_delete(request):
        ca = app.mqtt.ca
        if not ca.delete():
            return error_response(request, 404, "no custom CA certificate is stored")
        app.mqtt.ca_changed()
        return JSONResponse(request, {"success": True, "message": "CA certificate deleted; MQTT over TLS uses the "
                                      "built-in bundle", "bundle_size": ca.status()["bundle_size"]})

    def test_start(request):
        """Try a broker with the body's values, storing nothing: 202, then GET /mqtt/test says how it went."""
        doc = read_json(request)
        values = {}
        fields = {}
        for key, default in (("host", None), ("port", 1883), ("use_tls", False), ("user", ""), ("password", None)):
            value = doc.get(key, default)
            if value is None and key == "password":
                values[key] = None      # the stored password, if this is the broker it was stored for (start_test)
                continue
            norm, err = check("mqtt." + key, value, lambda z: True)
            if err is None and key == "host" and not norm:
                err = "must not be empty"
            if err is not None:
                fields[key] = err
            values[key] = norm
        if fields:
            raise ApiError(400, "Invalid MQTT test values", fields=fields)
        why = app.mqtt.start_test(values["host"], values["port"], values["use_tls"], values["user"],
                                  values["password"])
        if why is not None:
            raise ApiError(400, "Cannot test: %s" % why)
        return JSONResponse(request, app.mqtt.test_result, status=(202, "Accepted"))

    def test_state(request):
        return JSONResponse(request, app.mqtt.test_result or {"state": "idle"})

    return [
        Route("/api/v1/mqtt/test", POST, test_start),
        Route("/api/v1/mqtt/test", GET, test_state),
        Route("/api/v1/mqtt/status", GET, mqtt_status),
        Route("/api/v1/mqtt/ca", GET, ca_status),
        Route("/api/v1/mqtt/ca", POST, ca_upload),
        Route("/api/v1/mqtt/ca", DELETE, ca_delete),
    ]
