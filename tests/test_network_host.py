"""The network on the host runtime (`python -m host` as a subprocess): provisioning from factory state over the BLE
stand-in, the access point rows across restarts, mDNS lookup, the wifi fields aio-wattwaechter reads."""

import asyncio
import http.client
import json
import os
import socket
import time

import dns.exception
import dns.message
import dns.query
import pytest
import requests
from aio_wattwaechter import Wattwaechter

from core.json_store import read_json_file
from tests import improv_peer
from tests.hostproc import HostProcess, free_port

pytestmark = pytest.mark.slow
P = improv_peer.load()
HOME = {"wifi": {"primary": {"ssid": "HostNetwork", "password": "host-password", "enable": True}}}


def post(h, path):
    return requests.post(h.url + path, timeout=10).status_code


def info(h):
    data = h.get("/api/v1/system/info")[1]
    return {sec: {e["name"]: e["value"] for e in data[sec]} for sec in ("wifi", "ap", "uptime")}


class BridgePhone:
    """The phone of host/ble_bridge.py, speaking py-improv-ble-client's frames."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.f = self.sock.makefile("rwb")

    def call(self, **req):
        self.f.write((json.dumps(req) + "\n").encode())
        self.f.flush()
        out = json.loads(self.f.readline())
        assert "error" not in out, out
        return out

    def send(self, frame):
        for i in range(0, len(frame), 20):   # at most 20 bytes a write: the device reassembles
            self.call(op="write", uuid=P.CHARACTERISTIC_UUID_RPC_COMMAND, hex=frame[i:i + 20].hex())

    def states(self):
        return [bytes.fromhex(h)[0] for h in self.call(op="notified", uuid=P.CHARACTERISTIC_UUID_STATE)["hex"]]

    def results(self):
        return [P.parse_result(bytes.fromhex(h))
                for h in self.call(op="notified", uuid=P.CHARACTERISTIC_UUID_RPC_RESULT)["hex"]]

    def close(self):
        self.sock.close()


def wait(cond, timeout=15):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError("condition not met within %s s" % timeout)


def press(h):
    """A short press of the BOOT button (IO0, low while pressed)."""
    h.control("pin_IO0", "0")
    time.sleep(0.3)
    h.control("pin_IO0", None)


def test_factory_state_provisioned_over_ble_joins_follows_the_ap_table_and_is_found_by_mdns(tmp_path):
    ble, mdns_port, dns_port = free_port(), free_port(), free_port()
    h = HostProcess(tmp_path / "drive", args=["--ble-port", str(ble), "--mdns-port", str(mdns_port),
                                              "--dns-port", str(dns_port)]).start()
    try:
        first = info(h)
        assert first["wifi"]["connected"] is False and first["ap"]["active"] is True and \
            first["ap"]["mode"] == "always"
        # First setup on the AP: every name is the device, and the phone's probe lands on the setup page.
        got = wait(lambda: _captive_answer(dns_port))
        assert got == ["192.168.4.1"]
        probe = requests.get(h.url + "/generate_204", allow_redirects=False, timeout=5)
        # the device sends phones to http://192.168.4.1/; the host runtime to its own listener (never off the box)
        assert probe.status_code == 302 and probe.headers["Location"] == h.url + "/"
        other = requests.get(h.url + "/", headers={"Host": "connectivitycheck.gstatic.com"}, allow_redirects=False,
                             timeout=5)
        assert other.status_code == 302 and other.headers["Location"] == h.url + "/"
        phone = BridgePhone(ble)
        adv = wait(lambda: phone.call(op="adv")["adv"])
        ads = improv_peer.ad_structures(bytes.fromhex(adv))
        sd = P.ImprovServiceData.from_bytes([d for d in ads[0x16] if d[:2] == b"\x77\x46"][0][2:])
        assert sd.state == P.State.AUTHORIZATION_REQUIRED
        phone.call(op="connect", mtu=185)
        authorized = False
        for _ in range(5):   # a loaded machine can stretch a cycle past the press: press again, as a person would
            press(h)
            try:
                authorized = wait(lambda: P.State.AUTHORIZED in phone.states(), timeout=3)
                break
            except AssertionError:
                continue
        assert authorized
        phone.send(P.WiFiSettingsCmd(b"HostNetwork", b"host-password").as_bytes())
        wait(lambda: P.State.PROVISIONED in phone.states())
        res = wait(lambda: [r for r in phone.results() if isinstance(r, P.WiFiSettingsRes)])
        assert res[0].redirect_url == ("http://127.0.0.1:%d/" % h.port).encode()
        phone.close()
        now = info(h)
        assert now["wifi"]["connected"] is True and now["wifi"]["ssid"] == "HostNetwork"
        # Joined: no more captive answers, the probe path is an ordinary unknown path.
        assert requests.get(h.url + "/generate_204", allow_redirects=False, timeout=5).status_code == 404
        assert not _captive_answer(dns_port)
        assert now["ap"]["mode"] == "timed"        # configured now: the cold-start row, 15 minutes
        stored = read_json_file(os.path.join(h.state, "settings.json"))
        assert stored["wifi"]["primary"]["ssid"] == "HostNetwork"
        # A client finds it by mDNS.
        q = dns.message.make_query("_wattwaechter._tcp.local.", "PTR")
        inst = dns.query.udp(q, "127.0.0.1", port=mdns_port, timeout=10).answer[0][0].target
        srv = dns.query.udp(dns.message.make_query(inst, "SRV"), "127.0.0.1", port=mdns_port,
                            timeout=10).answer[0][0]
        a = dns.query.udp(dns.message.make_query(srv.target, "A"), "127.0.0.1", port=mdns_port,
                          timeout=10).answer[0][0]
        assert srv.target.to_text() == "meterplus-024d50000001.local." and srv.port == h.port
        assert a.address == "127.0.0.1"
        # A software restart: the home WiFi again, no AP.
        assert post(h, "/api/v1/system/reboot") == 200
        wait(lambda: _up_again(h), timeout=60)   # the firmware starts again: as long as a first start may take
        after = info(h)
        assert after["uptime"]["reset_reason"] == "SOFTWARE"
        assert after["ap"]["active"] is False and after["ap"]["mode"] == "off"
        wait(lambda: info(h)["wifi"]["connected"] is True)
    finally:
        h.stop()


def _captive_answer(port):
    """The A answer of the captive DNS for a probe name, or None when nothing answers."""
    try:
        r = dns.query.udp(dns.message.make_query("connectivitycheck.gstatic.com.", "A"), "127.0.0.1", port=port,
                          timeout=0.5)
    except (dns.exception.Timeout, OSError):
        return None
    return [rd.address for rd in r.answer[0]] if r.answer else None


def _up_again(h):
    try:
        return h.get("/api/v1/system/info", timeout=1)[0] == 200 and \
            info(h)["uptime"]["reset_reason"] == "SOFTWARE"
    except (OSError, http.client.HTTPException, ValueError, KeyError):   # mid-restart: a cut or odd answer
        return False


def test_cold_start_ap_closes_after_15_minutes_and_ha_reads_the_wifi_fields(tmp_path):
    h = HostProcess(tmp_path / "drive", settings=HOME, args=["--speed", "120"]).start()
    try:
        first = info(h)
        assert first["ap"]["mode"] == "timed" and first["ap"]["active"] is True

        async def read():
            async with Wattwaechter("127.0.0.1:%d" % h.port) as c:
                return await c.system_info()

        si = wait(lambda: _joined(h) and asyncio.run(read()))
        assert si.get_value("wifi", "signal_strength") == "-48"
        assert si.get_value("wifi", "ip_address") == "127.0.0.1"
        assert si.get_value("wifi", "mdns_name") == "meterplus-024d50000001.local"
        assert si.get_value("wifi", "mac_address") == "02:4D:50:00:00:01"
        assert si.get_value("wifi", "rssi") == "-48" and si.get_value("wifi", "ip") == "127.0.0.1"
        # The (section, key) pairs the integration's diagnostic sensors read (its const.py DIAGNOSTIC_SENSORS).
        assert si.get_value("wifi", "ssid") == "HostNetwork"
        assert si.get_value("esp", "os_version") and si.get_value("uptime", "uptime") is not None
        # 15 simulated minutes are 7.5 s here; nobody joined the AP.
        wait(lambda: info(h)["ap"]["active"] is False, timeout=30)
        assert info(h)["wifi"]["connected"] is True
    finally:
        h.stop()


def _joined(h):
    return info(h)["wifi"]["connected"] is True


def test_ap_enable_keeps_the_ap_after_a_software_restart_and_no_ble_board_runs(tmp_path):
    settings = dict(HOME, accessPoint={"enable": True, "ssid": "Zaehler", "password_enable": True,
                                       "password": "geheim123"})
    h = HostProcess(tmp_path / "drive", settings=settings, args=["--no-ble"]).start()
    try:
        assert post(h, "/api/v1/system/reboot") == 200
        wait(lambda: _up_again(h), timeout=60)   # the firmware starts again: as long as a first start may take
        now = info(h)
        assert now["ap"]["active"] is True and now["ap"]["mode"] == "always" and now["ap"]["ssid"] == "Zaehler"
        assert "no BLE provisioning on this board" in h.log()
    finally:
        h.stop()
