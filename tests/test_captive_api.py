"""The API during a first setup on the access point: phones' connectivity checks, sent to the device by the captive
DNS under their own host names, are redirected to the setup page instead of the Host rule's 421, and need no token."""

import pytest

from services.network import routes as network_routes
from tests.test_api_guards import Api


class _CaptiveDns:
    """What HttpApi and the probe routes read of services.network.captive_dns.CaptiveDns."""

    setup_url = "http://192.168.4.1/"

    def __init__(self):
        self.setup = True

    def wanted(self):
        return self.setup


@pytest.fixture
def api(tmp_path):
    a = Api(tmp_path)
    a.app.captive_dns = _CaptiveDns()
    a.api._route_modules = list(a.api._route_modules) + [network_routes]
    a.api.stop()
    a.api.start()
    a.port = a.api._server._sock._sock.getsockname()[1]
    a.host = "127.0.0.1:%d" % a.port
    yield a
    a.stop()


@pytest.mark.parametrize("host, path", [("connectivitycheck.gstatic.com", "/generate_204"),
                                        ("captive.apple.com", "/hotspot-detect.html"),
                                        ("www.msftconnecttest.com", "/connecttest.txt"),
                                        ("example.org", "/anything/else")])
def test_during_setup_a_foreign_host_is_sent_to_the_setup_page(api, host, path):
    status, headers, _ = api.send("GET", path, host=host)
    assert status == 302 and headers["location"] == "http://192.168.4.1/"


def test_during_setup_a_foreign_host_still_cannot_change_or_read_anything(api):
    assert api.send("POST", "/api/v1/system/reboot", host="evil.example")[0] == 421
    assert api.fake.changes == []


def test_after_setup_a_foreign_host_is_misdirected_again(api):
    api.app.captive_dns.setup = False
    assert api.send("GET", "/generate_204", host="connectivitycheck.gstatic.com")[0] == 421
    assert api.send("GET", "/generate_204")[0] == 404  # the probe paths exist only during a first setup


def test_probe_paths_need_no_token_when_authentication_is_on(api):
    api.app.settings.update({"api_auth_required": True})
    assert api.send("GET", "/api/v1/settings")[0] == 401
    status, headers, _ = api.send("GET", "/generate_204")
    assert status == 302 and headers["location"] == "http://192.168.4.1/"


def test_the_device_sends_phones_to_its_ap_address_and_the_host_runtime_to_itself():
    from services.network.captive_dns import CaptiveDns

    assert CaptiveDns(None, None).setup_url == "http://192.168.4.1/"
    assert CaptiveDns(None, None, setup_url="http://127.0.0.1:8080/").setup_url == "http://127.0.0.1:8080/"
