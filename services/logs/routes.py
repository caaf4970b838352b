"""Log routes: the IR head's raw ring (binary), the persistent CSV log, a CSV snapshot of the RAM log."""

from adafruit_httpserver import GET, ChunkedResponse, Response, Route

from services.logs.flash_log import HEADER, csv_field


def routes(app):
    """Route list of /api/v1/logs/*."""

    def rawdump(request):
        ir = app.ir_head
        data = ir.rawdump() if ir is not None else b""
        if not data:
            return Response(request, b"", status=(204, "No Content"))
        return Response(request, data, content_type="application/octet-stream")

    def persistent(request):
        flog = getattr(app, "flash_log", None)

        def body():
            if flog is None:
                yield HEADER
                return
            for piece in flog.chunks():
                yield piece

        return ChunkedResponse(request, body, content_type="text/csv; charset=utf-8")

    def ram(request):
        # A snapshot first: the ring may change while the answer is sent.
        lines = ["uptime_s,level,message\n"]
        for up_ms, level, text in app.log.entries():
            lines.append("%d,%s,%s\n" % (up_ms // 1000, level, csv_field(text)))
        return Response(request, "".join(lines), content_type="text/csv; charset=utf-8")

    return [
        Route("/api/v1/logs/rawdump", GET, rawdump),
        Route("/api/v1/logs/persistent", GET, persistent),
        Route("/api/v1/logs/ram", GET, ram),
    ]
