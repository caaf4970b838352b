"""Captive-portal probes: while the AP serves a first setup, the paths phones and browsers probe lead to the setup
page (a 302 to http://192.168.4.1/), so the system's "sign in to network" sheet opens the web interface."""

from adafruit_httpserver import GET, Redirect, Route

from services.api.answers import ApiError

# Android, Apple, Windows, Firefox, Chrome OS: what each fetches over the DNS answers of services/network/captive_dns.
PROBES = ("/generate_204", "/gen_204", "/hotspot-detect.html", "/library/test/success.html", "/connecttest.txt",
          "/ncsi.txt", "/redirect", "/success.txt", "/canonical.html")
OPEN_PATHS = PROBES   # answered without a token: a phone's connectivity check carries none (services/api/service.py)


def routes(app):
    """Route list of the probe paths; app.captive_dns says whether a first setup is running."""

    def probe(request):
        dns = getattr(app, "captive_dns", None)
        if dns is None or not dns.wanted():
            raise ApiError(404, "Not found")
        return Redirect(request, dns.setup_url)

    return [Route(path, GET, probe) for path in PROBES]
