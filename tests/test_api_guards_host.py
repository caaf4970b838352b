"""The request guards end to end: `python -m host` driven by requests (a real HTTP client): the Host rule, the
same-origin rule, no CORS, and the rate limit recovering after ~3 days of silence (simulated at --speed 10000)."""

import pytest
import requests

from host.ntp_server import scaled_clock, start_ntp_server
from tests.test_api_harness import start_host

pytestmark = pytest.mark.slow

DEVICE_NAME = "meterplus-024d50000001.local"  # the host runtime's MAC 02:4d:50:00:00:01


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    # Joined to the (simulated) home WiFi: in the factory state the captive portal would redirect unknown names.
    h = start_host(tmp_path_factory, "guards",
                   settings={"wifi": {"primary": {"ssid": "HostNetwork", "password": "host-password"}}})
    yield h
    h.stop()


def test_host_rule_with_a_real_client(host):
    port = host.port
    for name in ("127.0.0.1:%d" % port, "localhost:%d" % port, DEVICE_NAME, DEVICE_NAME + ":%d" % port):
        assert requests.get(host.url + "/api/v1/system/alive", headers={"Host": name}, timeout=10).status_code == 200
    for name in ("evil.example", "evil.example:%d" % port, "meterplus-024d50000001.local.evil.example"):
        r = requests.get(host.url + "/api/v1/settings", headers={"Host": name}, timeout=10)
        assert r.status_code == 421 and r.headers["Content-Type"] == "application/json" and "Host" in r.json()["error"]


def test_cross_site_post_is_refused_and_same_origin_passes(host):
    url = host.url + "/api/v1/auth/tokens/generate"
    r = requests.post(url, headers={"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}, timeout=10)
    assert r.status_code == 403 and r.json()["error"].startswith("Cross-site request refused")
    assert "pending" not in r.json()
    r = requests.post(url, headers={"Origin": host.url, "Sec-Fetch-Site": "same-origin"}, timeout=10)
    assert r.status_code == 200 and len(r.json()["pending"]["token_write"]) == 64
    assert requests.post(url, timeout=10).status_code == 200  # a script: no Origin, no Sec-Fetch-Site


def test_no_cors_for_a_preflight_or_a_cross_origin_read(host):
    r = requests.options(host.url + "/api/v1/system/reboot", timeout=10, headers={
        "Origin": "http://evil.example", "Access-Control-Request-Method": "POST"})
    assert r.status_code == 405 and not [k for k in r.headers if k.lower().startswith("access-control-")]
    r = requests.get(host.url + "/api/v1/settings", headers={"Origin": "http://evil.example"}, timeout=10)
    assert r.status_code == 200 and not [k for k in r.headers if k.lower().startswith("access-control-")]


def test_rate_limit_recovers_after_three_days_of_silence(tmp_path_factory):
    """25 requests, then 2**28 ms (74.6 h) and more of simulated silence: the old ring answered 429 to everything
    here for up to another ~75 h. The silence is simulated at --speed 10000; the host's clock runs at most 2 s a
    loop cycle (a slow PC slows it), so the test does not sleep a computed time: it counts the firmware's NTP
    rounds (one every 6 simulated hours after a good answer), which cost no request of the budget."""
    sim = scaled_clock(10000.0)
    ntp_host, ntp_port, stop_ntp = start_ntp_server(clock=sim)
    h = start_host(tmp_path_factory, "rate_wrap", rate_limit=25,
                   args=["--speed", "10000", "--ntp", "%s:%d" % (ntp_host, ntp_port)])
    try:
        for _ in range(25):
            requests.get(h.url + "/api/v1/settings", timeout=10)
        # The round before the requests was at most 6 h before them: 15 more rounds are >= 84 h after them,
        # past 2**28 ms + 5.5 h of device time.
        rounds = stop_ntp.stats["answers"] + 15
        h.wait_for(lambda: stop_ntp.stats["answers"] >= rounds, timeout=900, interval=1.0)
        codes = [requests.get(h.url + "/api/v1/settings", timeout=10).status_code for _ in range(3)]
        assert codes == [200] * 3, h.log()[-2000:]
    finally:
        h.stop()
        stop_ntp()
