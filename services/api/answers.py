"""What route handlers answer with and read their input through: JSON errors, status lines, JSON bodies, queries."""

import json

from adafruit_httpserver import Response


class ApiError(Exception):
    """Raised by handlers (and the server) for a JSON error answer: status, message, optional fields, headers and a
    stable code (else the status's)."""

    def __init__(self, status, message, fields=None, headers=None, code=None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.fields = fields
        self.headers = headers
        self.code = code


_REASONS = {
    200: "OK", 202: "Accepted", 204: "No Content", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden",
    404: "Not Found", 405: "Method Not Allowed", 408: "Request Timeout", 409: "Conflict", 410: "Gone",
    411: "Length Required", 413: "Payload Too Large", 415: "Unsupported Media Type", 421: "Misdirected Request",
    422: "Unprocessable Entity", 431: "Request Header Fields Too Large", 429: "Too Many Requests",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


def status(code):
    """(code, reason) as adafruit_httpserver responses take it."""
    return (code, _REASONS.get(code, "Error"))


# The stable code of an error answer, by status, where the handler names none. "error" is English for people
# reading logs and curl output; clients (the web interface) translate the code, which never changes wording.
_CODES = {
    400: "bad_request", 401: "token_missing_or_wrong", 403: "forbidden", 404: "not_found",
    405: "method_not_allowed", 408: "timeout", 409: "conflict", 410: "gone", 411: "length_required",
    413: "too_large", 415: "unsupported_type", 421: "wrong_host", 422: "unprocessable", 429: "too_many_requests",
    431: "headers_too_large", 500: "device_error", 503: "unavailable",
}


def error_response(request, code, message, fields=None, headers=None, key=None):
    """The uniform JSON error answer {"error": message, "code": stable code[, "fields": {...}]}; key names the code
    where the status alone does not say enough (a 400 with fields is always invalid_fields)."""
    # Written by hand in a fixed order (error, code, fields by name): CircuitPython's dicts keep no order, and an
    # answer must not change its bytes with the interpreter.
    name = key or ("invalid_fields" if fields else _CODES.get(code, "error"))
    body = '{"error": %s, "code": %s' % (json.dumps(message), json.dumps(name))
    if fields:
        pairs = ["%s: %s" % (json.dumps(k), json.dumps(fields[k])) for k in sorted(fields)]
        body += ', "fields": {%s}' % ", ".join(pairs)
    return Response(request, body + "}", status=status(code), headers=headers, content_type="application/json")


def read_json(request, required=True, exact=None):
    """The JSON object of a request body; ApiError 400 for a wrong Content-Type, bad JSON or a non-object.
    exact: object keys whose numbers are handed over as their decimal text (core.money.quote_money_numbers)."""
    body = request.body
    if not body:
        if required:
            raise ApiError(400, "Request body must be a JSON object")
        return None
    ctype = request.headers.get_directive("Content-Type")
    if ctype is None or ctype.lower() != "application/json":
        raise ApiError(400, "Content-Type must be application/json")
    try:
        if exact is not None:
            from core.money import quote_money_numbers
            body = quote_money_numbers(body, exact)
        data = json.loads(body)
    except Exception:  # ValueError, UnicodeError, or a recursion error from deep nesting (RuntimeError on the device)
        raise ApiError(400, "Malformed JSON")
    if not isinstance(data, dict):
        raise ApiError(400, "Request body must be a JSON object")
    return data


def query(request, name):
    """A query value, percent-decoded, or None (no HTML escaping, no warning print)."""
    values = request.query_params._storage.get(name)
    return values[0] if values else None
