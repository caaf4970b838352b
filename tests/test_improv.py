"""Improv Wi-Fi over BLE: a test plays the phone through the _bleio stand-in with frames encoded and decoded by
py-improv-ble-client's protocol layer; the device side is adafruit_ble, the WiFi manager and the settings code."""

import ipaddress
import os

import _bleio
import _hostenv
import dns.message
import dns.query
import mdns
import pytest
import wifi

from core.bus import Bus
from core.settings import Settings
from drivers.ble_provision import BleImprovTransport
from drivers.radio import AP_OFF, AP_TIMED, WifiManager
from drivers.status_led import StatusLed
from core import improv
from services.network.mdns_service import MdnsAdvertiser
from services.network.improv_standby import ImprovStandby
from services.network.provisioning import CAPABILITIES, ImprovProvisioning
from tests import improv_peer
from tests.steppedclock import SteppedClock

P = improv_peer.load()
DEV = "024d50000001"
HOME = {"ssid": "Home Net", "password": "correct horse battery", "rssi": -52, "channel": 6}
MIN = 60 * 1000


class Pixels(list):
    def __init__(self):
        list.__init__(self, [(0, 0, 0)])

    def show(self):
        pass


@pytest.fixture(autouse=True)
def air(monkeypatch):
    monkeypatch.setattr(_hostenv, "air", [dict(HOME), {"ssid": "Cafe", "password": "", "rssi": -80, "channel": 1}])
    monkeypatch.setattr(_hostenv, "ap_stations", [])
    _bleio.adapter.host_reset()
    return _hostenv.air


class Device:
    """The network part of the firmware, wired as code.py wires it, stepped by hand."""

    def __init__(self, patch=None, reason="POWER_ON", url="http://127.0.0.1:8080/", standby=False):
        self.clock = SteppedClock()
        self.radio = wifi.Radio()
        self.settings = Settings(None, zone_ok=lambda z: True)
        if patch:
            self.settings.update(patch)
        self.bus = Bus()
        self.changes = self.bus.subscribe("settings", 4)
        self.led = StatusLed(Pixels())
        self.wifi = WifiManager(self.radio, wifi.AuthMode, self.settings, reason, DEV,
                                ip_address=ipaddress.ip_address)
        self.transport = BleImprovTransport(_bleio.adapter, "Meter-Plus-000001", CAPABILITIES)
        self.improv = ImprovProvisioning(self.transport, self.wifi, self.settings, self.bus, self.led,
                                         ("Meter Plus", "1.4.0", "ESP32-S3"), lambda: url if self.wifi.ip() else "")
        if standby:   # as services/network/improv_wiring.py wires it: the session built at a press or in setup mode
            session = self.improv
            self.improv = ImprovStandby(lambda: session, self.wifi, self.bus)
        self.modules = [self.wifi, self.improv]
        for m in self.modules:
            m.start()
        self.step()

    def step(self, ms=0, n=1):
        for _ in range(n):
            self.clock.advance(ms)
            for m in self.modules:
                m.poll(self.clock())

    def press(self):
        self.bus.publish("event", ("button", "short"))
        self.step()


class Phone:
    """A central speaking Improv with py-improv-ble-client's frames, writing at most 20 bytes at a time."""

    def __init__(self, device, mtu=185):
        self.dev = device
        self.central = _bleio.adapter.host_connect(mtu=mtu)
        device.step()

    def send(self, frame, chunk=20):
        for i in range(0, len(frame), chunk):
            self.central.write(P.CHARACTERISTIC_UUID_RPC_COMMAND, frame[i:i + chunk])
            self.dev.step(10)
        self.dev.step(10, n=3)

    def state(self):
        return self.central.read(P.CHARACTERISTIC_UUID_STATE)[0]

    def error(self):
        return self.central.read(P.CHARACTERISTIC_UUID_ERROR)[0]

    def states(self):
        return [d[0] for d in self.central.notified(P.CHARACTERISTIC_UUID_STATE)]

    def results(self):
        return [P.parse_result(d) for d in self.central.notified(P.CHARACTERISTIC_UUID_RPC_RESULT)]


def advertised(adapter=None):
    adv, _scan = (adapter or _bleio.adapter).host_advertisement()
    return improv_peer.ad_structures(adv), adv


# --- frames against the independent implementation ---

def test_our_frames_are_theirs():
    cmd = P.WiFiSettingsCmd(b"Home Net", b"correct horse battery").as_bytes()
    assert improv.encode(improv.WIFI_SETTINGS, [b"Home Net", b"correct horse battery"]) == cmd
    assert improv.encode(improv.IDENTIFY, []) == P.IdentifyCmd().as_bytes()
    info = P.parse_result(improv.encode(improv.DEVICE_INFO, [b"Meter Plus", b"1.4.0", b"ESP32-S3", b"Keller"]))
    assert (info.firmware_name, info.firmware_version, info.hardware_chip, info.device_name) == \
        (b"Meter Plus", b"1.4.0", b"ESP32-S3", b"Keller")
    url = P.parse_result(improv.encode(improv.WIFI_SETTINGS, [b"http://192.168.1.50/"]))
    assert url.redirect_url == b"http://192.168.1.50/"
    sd = P.ImprovServiceData.from_bytes(bytes(improv.service_data(improv.AUTHORIZED, CAPABILITIES)))
    assert sd.state == P.State.AUTHORIZED and sd.capabilities == P.Capabilities.IDENTIFY | \
        P.Capabilities.DEVICE_INFO | P.Capabilities.SCAN_WIFI


def test_reassembly_of_their_frames_split_over_writes():
    r = improv.Reassembler()
    frame = P.WiFiSettingsCmd(b"A" * 32, b"p" * 63).as_bytes()   # 100 bytes: five 20-byte writes
    for i in range(0, len(frame), 20):
        assert r.take() is None
        r.add(frame[i:i + 20])
    err, cmd, data = r.take()
    assert err == improv.NO_ERROR and cmd == improv.WIFI_SETTINGS and improv.strings(data) == [b"A" * 32, b"p" * 63]
    assert r.pending() == 0 and r.take() is None
    bad = bytearray(P.IdentifyCmd().as_bytes())
    bad[-1] ^= 0xFF
    r.add(bad)
    assert r.take()[0] == improv.INVALID_RPC


def test_protocol_module_runs_in_micropython():
    from tools.mpvm import MicroVM

    src = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "core", "improv.py")
    frame = P.WiFiSettingsCmd(b"Home Net", b"correct horse battery").as_bytes()
    with MicroVM(extra_files=[(src, "improv.py")]) as vm:
        out, _fuel = vm.run("import improv\nr = improv.Reassembler()\nf = %r\n"
                            "for i in range(0, len(f), 20):\n    r.add(f[i:i + 20])\n"
                            "e, c, d = r.take()\nprint(e, c, improv.strings(d))\n"
                            "print(improv.encode(1, [b'http://x/']).hex())\n" % frame)
    lines = out.strip().splitlines()
    assert lines[0] == "0 1 [b'Home Net', b'correct horse battery']"
    assert lines[1] == improv.encode(1, [b"http://x/"]).hex()


# --- the advertisement ---

def test_advertisement_has_the_service_and_service_data_0x4677():
    dev = Device()
    ads, raw = advertised()
    assert len(raw) <= 31   # a legacy advertisement: every phone sees it
    uuids = [u for t in (0x06, 0x07) for u in ads.get(t, [])]
    assert bytes(reversed(bytes.fromhex(P.SERVICE_UUID.replace("-", "")))) in uuids
    data = [d for d in ads[0x16] if d[:2] == b"\x77\x46"]
    sd = P.ImprovServiceData.from_bytes(data[0][2:])
    assert sd.state == P.State.AUTHORIZATION_REQUIRED and sd.capabilities & P.Capabilities.IDENTIFY
    _adv, scan = _bleio.adapter.host_advertisement()
    assert b"Meter-Plus-000001" in scan       # the name in the scan response
    assert dev.led.is_active("BLE_ACTIVE")
    dev.press()
    ads, _raw = advertised()
    sd = P.ImprovServiceData.from_bytes([d for d in ads[0x16] if d[:2] == b"\x77\x46"][0][2:])
    assert sd.state == P.State.AUTHORIZED


# --- the session ---

def test_from_factory_state_to_joined_ap_closed_and_found_by_mdns():
    dev = Device()                 # factory state: no WiFi, the AP is on, the BLE window is open
    assert dev.radio.ap_active and dev.wifi.ap_mode == "always" and _bleio.adapter.advertising
    phone = Phone(dev)
    assert dev.led.is_active("BLE_CONNECTED") and not dev.led.is_active("BLE_ACTIVE")
    assert phone.state() == P.State.AUTHORIZATION_REQUIRED
    dev.press()                    # the user presses the button on the device
    assert phone.state() == P.State.AUTHORIZED
    phone.send(P.WiFiSettingsCmd(b"Home Net", b"correct horse battery").as_bytes())
    assert phone.states()[-3:] == [P.State.AUTHORIZED, P.State.PROVISIONING, P.State.PROVISIONED]
    assert phone.error() == P.Error.NO_ERROR
    res = phone.results()[-1]
    assert isinstance(res, P.WiFiSettingsRes) and res.redirect_url == b"http://127.0.0.1:8080/"
    # Stored through the settings code, announced on the bus like an API change.
    assert dev.settings.get("wifi.primary.ssid") == "Home Net"
    assert dev.settings.get("wifi.primary.password") == "correct horse battery"
    assert "wifi.primary.ssid" in dev.changes.pop()
    # Joined; the AP leaves the factory row for the cold-start one and closes after 15 minutes with nobody on it.
    assert dev.radio.connected and dev.wifi.ssid() == "Home Net" and dev.wifi.ap_mode == AP_TIMED
    phone.central.disconnect()
    dev.step(16 * MIN)
    assert not dev.radio.ap_active and dev.wifi.ap_mode == AP_OFF and dev.radio.connected
    # A client finds it by mDNS.
    port = mdns.serve(0)
    adv = MdnsAdvertiser(lambda: mdns.Server(dev.radio), DEV, 8080)
    adv.start()
    try:
        q = dns.message.make_query("_wattwaechter._tcp.local.", "PTR")
        instance = dns.query.udp(q, "127.0.0.1", port=port, timeout=2).answer[0][0].target
        srv = dns.query.udp(dns.message.make_query(instance, "SRV"), "127.0.0.1", port=port, timeout=2).answer[0][0]
        a = dns.query.udp(dns.message.make_query(srv.target, "A"), "127.0.0.1", port=port, timeout=2).answer[0][0]
        assert (a.address, srv.port) == ("127.0.0.1", 8080)
    finally:
        adv.stop()


def test_settings_without_authorization_are_refused():
    dev = Device()
    phone = Phone(dev)
    phone.send(P.WiFiSettingsCmd(b"Home Net", b"correct horse battery").as_bytes())
    assert phone.error() == P.Error.NOT_AUTHORIZED and phone.state() == P.State.AUTHORIZATION_REQUIRED
    assert dev.settings.get("wifi.primary.ssid") == "" and dev.radio.connect_calls == []


def test_wrong_checksum_is_an_invalid_rpc():
    dev = Device()
    phone = Phone(dev)
    dev.press()
    frame = bytearray(P.WiFiSettingsCmd(b"Home Net", b"correct horse battery").as_bytes())
    frame[-1] = (frame[-1] + 1) & 0xFF
    phone.send(bytes(frame))
    assert phone.error() == P.Error.INVALID_RPC_PACKET and dev.radio.connect_calls == []
    phone.send(P.IdentifyCmd().as_bytes())     # the next good frame clears the error
    assert phone.error() == P.Error.NO_ERROR


def test_unknown_command_is_reported():
    dev = Device()
    phone = Phone(dev)
    dev.press()
    phone.send(P.HostnameCmd(b"keller").as_bytes())    # v2.3 hostname: not among our capabilities
    assert phone.error() == P.Error.UNKNOWN_RPC_COMMAND
    phone.send(P.UnknownCommand(0x7F, [b"x"]).as_bytes())
    assert phone.error() == P.Error.UNKNOWN_RPC_COMMAND


def test_bad_password_ends_in_error_3_and_the_old_settings_stay(air):
    air.append({"ssid": "Old Net", "password": "old-password", "rssi": -60, "channel": 3})
    old = {"wifi": {"primary": {"ssid": "Old Net", "password": "old-password"}}}
    dev = Device(old, reason="POWER_ON")
    assert dev.wifi.ssid() == "Old Net"
    dev.improv.open_window(dev.clock())
    dev.step()
    phone = Phone(dev)
    dev.press()
    phone.send(P.WiFiSettingsCmd(b"Home Net", b"wrong password!").as_bytes())
    assert P.State.PROVISIONING in phone.states()
    assert phone.error() == P.Error.UNABLE_TO_CONNECT and phone.state() == P.State.AUTHORIZED
    assert dev.settings.get("wifi.primary.ssid") == "Old Net"
    assert dev.settings.get("wifi.primary.password") == "old-password"
    assert dev.changes.pop() is None
    dev.step(dev.wifi.reconnect_grace_ms + 1)      # and the device goes back to the network it had
    assert dev.radio.connected and dev.wifi.ssid() == "Old Net"


def test_invalid_credentials_are_refused_by_the_settings_rules():
    dev = Device()
    phone = Phone(dev)
    dev.press()
    phone.send(P.WiFiSettingsCmd(b"Home Net", b"short").as_bytes())   # WPA2 needs 8..63 bytes
    assert phone.error() == P.Error.UNABLE_TO_CONNECT and dev.radio.connect_calls == []
    phone.send(P.WiFiSettingsCmd(b"N" * 33, b"long enough").as_bytes())   # SSIDs have 32 bytes at most
    assert phone.error() == P.Error.UNABLE_TO_CONNECT and dev.settings.get("wifi.primary.ssid") == ""


def test_open_network_clears_a_stored_password(air):
    dev = Device({"wifi": {"primary": {"ssid": "Old Net", "password": "old-password"}}})
    dev.improv.open_window(dev.clock())
    dev.step()
    phone = Phone(dev)
    dev.press()
    phone.send(P.WiFiSettingsCmd(b"Cafe", b"").as_bytes())
    assert phone.state() == P.State.PROVISIONED
    assert dev.settings.get("wifi.primary.password") == "" and dev.wifi.ssid() == "Cafe"


def test_device_info_identify_and_scan():
    dev = Device({"device_name": "Keller"})
    phone = Phone(dev)
    phone.send(P.DeviceInfoCmd().as_bytes())
    info = phone.results()[-1]
    assert (info.firmware_name, info.firmware_version, info.hardware_chip, info.device_name) == \
        (b"Meter Plus", b"1.4.0", b"ESP32-S3", b"Keller")
    phone.send(P.IdentifyCmd().as_bytes())
    seen = set()
    for _ in range(20):
        dev.step(100)
        seen.add(dev.led.enabled)
    assert seen == {True, False}           # the LED blinks
    dev.step(dev.improv.identify_ms)
    assert dev.led.enabled is True         # and is back afterwards
    phone.send(P.ScanWifiCmd().as_bytes())
    dev.step(10, n=10)
    scans = [r for r in phone.results() if isinstance(r, P.ScanWifiRes)]
    assert scans[-1].networks == []        # the terminating empty result
    assert [n for r in scans[:-1] for n in r.networks] == [(b"Home Net", b"-52", b"YES"), (b"Cafe", b"-80", b"NO")]


def test_incomplete_frame_is_dropped_after_a_while():
    dev = Device()
    phone = Phone(dev)
    frame = P.DeviceInfoCmd().as_bytes()
    phone.central.write(P.CHARACTERISTIC_UUID_RPC_COMMAND, frame[:2])
    dev.step(10)
    dev.step(dev.improv.partial_ms)
    assert phone.error() == P.Error.INVALID_RPC_PACKET
    phone.send(frame)
    assert isinstance(phone.results()[-1], P.DeviceInfoRes)


def test_window_closes_after_a_few_minutes_and_a_press_reopens_it():
    dev = Device({"wifi": {"primary": {"ssid": "Home Net", "password": "correct horse battery"}}}, "SOFTWARE")
    assert not _bleio.adapter.advertising and not dev.led.is_active("BLE_ACTIVE")   # configured: no setup mode
    dev.press()
    assert _bleio.adapter.advertising and dev.led.is_active("BLE_ACTIVE")
    dev.step(dev.improv.window_ms - 1000)
    assert _bleio.adapter.advertising
    dev.step(2000)
    assert not _bleio.adapter.advertising and not dev.led.is_active("BLE_ACTIVE")
    assert dev.improv.improv_state == improv.AUTHORIZATION_REQUIRED


def test_authorization_expires():
    dev = Device()
    phone = Phone(dev)
    dev.press()
    dev.step(dev.improv.authorized_ms + 1)
    assert phone.state() == P.State.AUTHORIZATION_REQUIRED


def test_a_write_longer_than_the_att_payload_is_refused_by_the_stack():
    dev = Device()
    phone = Phone(dev, mtu=23)
    with pytest.raises(_bleio.BluetoothError):
        phone.central.write(P.CHARACTERISTIC_UUID_RPC_COMMAND, P.WiFiSettingsCmd(b"Home Net", b"x" * 20).as_bytes())


def test_a_phone_that_stays_connected_cannot_hold_the_window_open():
    """The window closes at window_max_ms even with a phone connected; the phone is disconnected and nothing it
    writes afterwards is acted on (before, a connected phone kept the window open forever)."""
    dev = Device({"wifi": {"primary": {"ssid": "Home Net", "password": "correct horse battery"}}}, "SOFTWARE")
    dev.press()
    phone = Phone(dev)
    assert dev.transport.connected
    dev.step(dev.improv.window_ms + 1000)
    assert dev.improv.window_since is not None         # a connected phone may finish (up to window_max_ms)
    for _ in range(10):
        dev.step(60 * 1000)
    assert dev.improv.window_since is None and not dev.transport.connected
    assert not _bleio.adapter.advertising and dev.improv.counters["sessions_ended"] == 1
    with pytest.raises(_bleio.BluetoothError):         # the link is gone: nothing more reaches the device
        phone.send(P.WiFiSettingsCmd(b"Evil Net", b"evil password").as_bytes())


def test_the_session_is_loaded_at_a_press_or_in_setup_mode_only():
    """services/network/improv_standby.py: a configured device holds no provisioning code until the button is
    pressed; the press that loads it opens the window and authorizes; in setup mode it loads at start (issue 35)."""
    dev = Device({"wifi": {"primary": {"ssid": "Home Net", "password": "correct horse battery"}}}, "SOFTWARE",
                 standby=True)
    dev.step(1000, 5)
    assert dev.improv.session is None and not _bleio.adapter.advertising
    assert dev.improv.describe()["loaded"] is False
    dev.press()
    s = dev.improv.session
    assert s is not None and s.window_since is not None and s.improv_state == improv.AUTHORIZED
    assert _bleio.adapter.advertising and dev.led.is_active("BLE_ACTIVE") and dev.improv.describe()["window_open"]
    _bleio.adapter.host_reset()
    setup = Device(standby=True)
    assert setup.improv.session is not None and _bleio.adapter.advertising
