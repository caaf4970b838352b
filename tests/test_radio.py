"""WiFi manager on the wifi stand-in: every row of the access point table, both profiles, static IP, loss and
reconnect, scans, tick wrap."""

import ipaddress

import _hostenv
import pytest
import wifi

from core.settings import Settings
from drivers.radio import AP_ALWAYS, AP_OFF, AP_RESCUE, AP_TIMED, WifiManager, ap_rule, expired
from tests.steppedclock import SteppedClock

DEV = "024d50000001"
HOME = {"ssid": "Home", "password": "home-password", "rssi": -50, "channel": 1}
OFFICE = {"ssid": "Office", "password": "office-password", "rssi": -60, "channel": 11}
MIN = 60 * 1000


@pytest.fixture(autouse=True)
def air(monkeypatch):
    monkeypatch.setattr(_hostenv, "air", [dict(HOME), dict(OFFICE)])
    monkeypatch.setattr(_hostenv, "ap_stations", [])
    return _hostenv.air


def settings(**patch):
    s = Settings(None, zone_ok=lambda z: True)
    if patch:
        s.update(patch)
    return s


def home(**extra):
    p = {"ssid": "Home", "password": "home-password", "enable": True}
    p.update(extra)
    return {"primary": p}


class Rig:
    """A WifiManager on a fresh stand-in radio, stepped by hand."""

    def __init__(self, s, reason="POWER_ON"):
        self.radio = wifi.Radio()
        self.clock = SteppedClock()
        self.wm = WifiManager(self.radio, wifi.AuthMode, s, reason, DEV, ip_address=ipaddress.ip_address)
        self.wm.start()

    def step(self, ms=0, n=1):
        for _ in range(n):
            self.clock.advance(ms)
            self.wm.poll(self.clock())

    def calls(self):
        return [c[0] for c in self.radio.connect_calls]


# --- the access point table ---

@pytest.mark.parametrize("reason", ["POWER_ON", "SOFTWARE", "WATCHDOG"])
def test_no_wifi_configured_keeps_the_ap_on_whatever_the_reset(reason):
    rig = Rig(settings(), reason)
    rig.step()
    assert rig.wm.ap_mode == AP_ALWAYS and rig.radio.ap_active
    rig.step(20 * MIN, n=5)
    assert rig.radio.ap_active and rig.radio.connect_calls == []
    assert str(rig.radio.ipv4_address_ap) == "192.168.4.1"


def test_cold_start_runs_the_ap_next_to_the_home_wifi_for_15_minutes():
    rig = Rig(settings(wifi=home()), "POWER_ON")
    rig.step()
    assert rig.wm.ap_mode == AP_TIMED and rig.radio.ap_active and rig.radio.connected
    rig.step(14 * MIN)
    assert rig.radio.ap_active
    rig.step(MIN + 1)
    assert not rig.radio.ap_active and rig.wm.ap_mode == AP_OFF
    assert rig.radio.connected  # the home WiFi stays


def test_cold_start_ap_stays_while_a_phone_is_connected_then_closes():
    rig = Rig(settings(wifi=home()), "POWER_ON")
    rig.step()
    _hostenv.ap_stations.append((b"\x01" * 6, -40, None))
    rig.step(16 * MIN)
    assert rig.radio.ap_active and rig.wm.ap_used
    _hostenv.ap_stations.clear()
    rig.step(1000)
    assert not rig.radio.ap_active


@pytest.mark.parametrize("reason", ["SOFTWARE", "WATCHDOG"])
def test_software_restart_starts_no_ap(reason):
    rig = Rig(settings(wifi=home()), reason)
    rig.step()
    assert rig.wm.ap_mode == AP_OFF and not rig.radio.ap_active and rig.radio.connected


@pytest.mark.parametrize("reason", ["POWER_ON", "SOFTWARE"])
def test_ap_enable_keeps_the_ap_on_permanently(reason):
    rig = Rig(settings(wifi=home(), accessPoint={"enable": True}), reason)
    rig.step()
    rig.step(60 * MIN, n=3)
    assert rig.wm.ap_mode == AP_ALWAYS and rig.radio.ap_active and rig.radio.connected


def test_ap_rule_table():
    assert ap_rule(False, "SOFTWARE", False) == AP_ALWAYS
    assert ap_rule(True, "POWER_ON", False) == AP_TIMED
    assert ap_rule(True, "BROWNOUT", False) == AP_TIMED
    assert ap_rule(True, "SOFTWARE", False) == AP_OFF
    assert ap_rule(True, "SOFTWARE", True) == AP_ALWAYS


def test_ap_ssid_and_security():
    rig = Rig(settings())
    assert rig.radio.ap_ssid == "Meter-Plus-000001" and rig.radio.ap_password == ""
    assert rig.radio.ap_authmode == (wifi.AuthMode.OPEN,)
    rig = Rig(settings(accessPoint={"ssid": "Zähler", "password_enable": True, "password": "geheim123"}))
    assert rig.radio.ap_ssid == "Zähler" and rig.radio.ap_password == "geheim123"
    assert rig.radio.ap_authmode == (wifi.AuthMode.WPA2, wifi.AuthMode.PSK)
    # A stored password without password_enable leaves the AP open; password_enable without a password too.
    rig = Rig(settings(accessPoint={"password_enable": False, "password": "geheim123"}))
    assert rig.radio.ap_password == "" and rig.radio.ap_authmode == (wifi.AuthMode.OPEN,)
    rig = Rig(settings(accessPoint={"password_enable": True}))
    assert rig.radio.ap_password == ""


# --- station profiles ---

def test_primary_is_tried_first_at_boot():
    rig = Rig(settings(wifi={"primary": {"ssid": "Home", "password": "home-password"},
                             "secondary": {"ssid": "Office", "password": "office-password", "enable": True}}))
    rig.step()
    assert rig.calls() == ["Home"] and rig.wm.active == "primary" and rig.wm.ssid() == "Home"


def test_secondary_only_when_primary_unreachable_at_boot(air):
    air.remove(air[0])  # Home is not on the air
    rig = Rig(settings(wifi={"primary": {"ssid": "Home", "password": "home-password"},
                             "secondary": {"ssid": "Office", "password": "office-password", "enable": True}}))
    rig.step(n=2)
    assert rig.calls() == ["Home", "Office"] and rig.wm.active == "secondary"
    # Home comes back: the joined profile is kept, also for reconnects after a loss.
    air.append(dict(HOME))
    rig.radio.lose_connection()
    rig.step(1000)
    rig.step(rig.wm.reconnect_grace_ms)
    assert rig.calls()[-1] == "Office" and rig.radio.connected and rig.wm.ssid() == "Office"


def test_disabled_secondary_is_never_tried(air):
    air.remove(air[0])
    rig = Rig(settings(wifi={"primary": {"ssid": "Home", "password": "home-password"},
                             "secondary": {"ssid": "Office", "password": "office-password", "enable": False}}))
    rig.step(MIN, n=5)
    assert set(rig.calls()) == {"Home"} and not rig.radio.connected


def test_wrong_password_is_a_failure_with_the_reason():
    rig = Rig(settings(wifi=home(password="wrong-password")))
    rig.step()
    assert not rig.radio.connected and rig.wm.last_error == "Authentication failure"
    assert rig.wm.counters["connect_failures"] == 1


def test_static_addressing_with_empty_dns_uses_the_gateway():
    rig = Rig(settings(wifi=home(static_ip=True, ip="192.168.1.50", subnet="255.255.255.0", gateway="192.168.1.1")))
    rig.step()
    assert str(rig.radio.ipv4_address) == "192.168.1.50" and str(rig.radio.ipv4_subnet) == "255.255.255.0"
    assert str(rig.radio.ipv4_gateway) == "192.168.1.1" and str(rig.radio.ipv4_dns) == "192.168.1.1"
    assert rig.wm.ip() == "192.168.1.50"


def test_static_addressing_with_dns_then_dhcp():
    s = settings(wifi=home(static_ip=True, ip="10.0.0.7", subnet="255.255.0.0", gateway="10.0.0.1", dns="9.9.9.9"))
    rig = Rig(s)
    rig.step()
    assert str(rig.radio.ipv4_dns) == "9.9.9.9" and rig.wm.ip() == "10.0.0.7"
    s.update({"wifi": {"primary": {"static_ip": False}}})
    rig = Rig(s)
    rig.step()
    assert rig.wm.ip() == "127.0.0.1"  # the stand-in's DHCP lease


def test_loss_then_reconnect_with_backoff_one_connect_per_poll(air):
    rig = Rig(settings(wifi=home()), "SOFTWARE")
    rig.step()
    assert rig.radio.connected and len(rig.calls()) == 1
    net = air[0]
    air.remove(net)          # the router goes away
    rig.step(100)
    assert not rig.radio.connected and rig.wm.counters["losses"] == 1
    rig.radio.lose_connection()  # CircuitPython's own retries gave up
    rig.step(rig.wm.reconnect_grace_ms - 200)
    assert len(rig.calls()) == 1  # the grace period: CircuitPython reconnects by itself first
    stamps = []
    for _ in range(4000):
        before = len(rig.calls())
        rig.step(250)
        assert len(rig.calls()) - before <= 1   # never more than one (blocking) connect() in a poll
        if len(rig.calls()) > before:
            stamps.append(rig.clock())
        if len(stamps) == 5:
            break
    gaps = [(b - a) % (1 << 29) for a, b in zip(stamps, stamps[1:])]
    assert gaps == sorted(gaps) and gaps[-1] > gaps[0] * 4   # backoff doubles
    # Each attempt used the channel of the last join (no full scan).
    assert all(c[2] == HOME["channel"] for c in rig.radio.connect_calls[1:])
    air.append(net)
    rig.step(rig.wm.backoff_max_ms)
    assert rig.radio.connected and rig.wm.state == "OK"


def test_circuitpython_reconnecting_by_itself_needs_no_connect(air):
    rig = Rig(settings(wifi=home()), "SOFTWARE")
    rig.step()
    net = air.pop(0)
    rig.step(100)
    assert not rig.radio.connected
    air.insert(0, net)       # back within the grace: the radio's own reconnect holds
    rig.step(1000)
    assert rig.radio.connected and len(rig.calls()) == 1 and rig.wm.counters["losses"] == 1


# --- the lock-out rule: a station that cannot join brings the AP back ---

def _step_minutes(rig, minutes):
    for _ in range(minutes * 6):
        rig.step(10 * 1000)


@pytest.mark.parametrize("reason", ["SOFTWARE", "WATCHDOG"])
def test_a_wrong_password_and_a_software_restart_bring_the_ap_back_after_a_minute(air, reason):
    """The reported lock-out: a wrong password saved, then "Restart now" (no AP by the table): the station has not
    joined once since the start, so after a minute (not the 5 of a lost network, issue 37) the AP is back, across
    the tick wrap; once the WiFi works again and nobody uses it, it goes."""
    rig = Rig(settings(wifi=home(password="wrong-password")), reason)
    rig.clock.now = (1 << 29) - 30 * 1000   # the minute runs across the wrap
    rig.step()
    assert rig.wm.ap_mode == AP_OFF and not rig.radio.ap_active and not rig.radio.connected
    for _ in range(5):
        rig.step(10 * 1000)
    assert not rig.radio.ap_active
    rig.step(10 * 1000)
    rig.step(1000)
    assert rig.wm.ap_mode == AP_RESCUE and rig.radio.ap_active and rig.wm.counters["ap_rescues"] == 1
    _hostenv.ap_stations.append((b"\x01" * 6, -40, None))     # the owner connects to repair it
    air[0]["password"] = "wrong-password"                     # (the router's password changed to the saved one)
    _step_minutes(rig, 6)                                      # the backoff reaches the next attempt
    assert rig.radio.connected and rig.radio.ap_active         # joined, but the owner is still on the AP
    _hostenv.ap_stations.clear()
    rig.step(1000)
    assert rig.wm.ap_mode == AP_OFF and not rig.radio.ap_active and rig.radio.connected
    _step_minutes(rig, 30)
    assert not rig.radio.ap_active                             # the WiFi works: the software-restart row holds


def test_a_working_wifi_after_a_software_restart_never_opens_the_ap():
    rig = Rig(settings(wifi=home()), "SOFTWARE")
    rig.step()
    _step_minutes(rig, 60)
    assert rig.radio.connected and not rig.radio.ap_active and rig.wm.counters.get("ap_rescues", 0) == 0


def test_a_lost_network_brings_the_ap_back_after_5_minutes(air):
    rig = Rig(settings(wifi=home()), "SOFTWARE")
    rig.step()
    assert rig.radio.connected and not rig.radio.ap_active
    air.remove(air[0])                          # the router is gone
    rig.radio.lose_connection()
    _step_minutes(rig, 4)
    assert not rig.radio.ap_active
    _step_minutes(rig, 2)
    assert rig.radio.ap_active and rig.wm.ap_mode == AP_RESCUE


def test_the_cold_start_window_does_not_close_the_ap_while_the_station_cannot_join():
    rig = Rig(settings(wifi=home(password="wrong-password")), "POWER_ON")
    rig.step()
    assert rig.wm.ap_mode == AP_TIMED and rig.radio.ap_active
    _step_minutes(rig, 20)
    assert rig.radio.ap_active and rig.wm.ap_mode == AP_RESCUE


# --- tick wrap ---

def test_ap_window_across_the_tick_wrap():
    rig = Rig(settings(wifi=home()), "POWER_ON")
    rig.clock.now = (1 << 29) - 60 * 1000   # one minute before the wrap
    rig.step()
    rig.step(14 * MIN)
    assert rig.radio.ap_active
    rig.step(2 * MIN)
    assert not rig.radio.ap_active


def test_a_stamp_older_than_half_the_tick_range_is_expired():
    since = 1000
    assert not expired(since + 10, since, 100)
    assert expired(since + 100, since, 100)
    # 2**28 + 1 ms later ticks_diff turns negative: that must read as expired, not as "in the future".
    assert expired((since + (1 << 28) + 1) % (1 << 29), since, 15 * MIN)


# --- scans ---

def test_scan_runs_one_network_per_poll_and_is_cached(air):
    air.append({"ssid": "Open Cafe", "password": "", "rssi": -70, "channel": 3})
    air.append({"ssid": "Home", "password": "home-password", "rssi": -30, "channel": 1})  # a second AP of Home
    rig = Rig(settings(), "POWER_ON")
    sc = rig.wm.scanner
    sc.request()
    rig.step()
    assert sc.scanning and not sc.scanned
    rig.step(n=10)
    assert sc.scanned and not sc.scanning and sc.scans == 1
    assert sc.networks == [{"ssid": "Home", "rssi": -30, "secure": True},
                           {"ssid": "Office", "rssi": -60, "secure": True},
                           {"ssid": "Open Cafe", "rssi": -70, "secure": False}]
    air.append({"ssid": "Later", "password": "", "rssi": -20, "channel": 1})
    rig.step(n=3)
    assert "Later" not in [n["ssid"] for n in sc.networks]   # cached until the next request
    sc.request()
    rig.step(n=10)
    assert sc.networks[0]["ssid"] == "Later" and sc.scans == 2


def test_no_connect_while_scanning(air):
    rig = Rig(settings(wifi=home()), "SOFTWARE")
    rig.wm.scanner.request()
    rig.step()
    assert rig.wm.scanner.scanning and rig.calls() == []
    rig.step(n=5)
    assert rig.calls() == ["Home"]


def test_a_scan_refused_by_the_radio_is_counted_and_a_later_request_retries():
    rig = Rig(settings(), "POWER_ON")
    busy = rig.radio.start_scanning_networks()   # someone else scans: the radio refuses a second scan
    rig.wm.scanner.request()
    rig.step()
    assert rig.wm.scanner.errors == 1 and not rig.wm.scanner.scanning and not rig.wm.scanner.scanned
    del busy
    rig.radio.stop_scanning_networks()
    rig.wm.scanner.request()
    rig.step(n=5)
    assert rig.wm.scanner.scanned and rig.wm.scanner.networks[0]["ssid"] == "Home"


def test_a_station_joined_before_start_is_adopted_without_a_connect():
    s = settings(wifi={"primary": {"ssid": "Home", "password": "home-password"},
                       "secondary": {"ssid": "Office", "password": "office-password", "enable": True}})
    radio = wifi.Radio()
    radio.connect("Office", "office-password")   # CircuitPython joined at boot (settings.toml's CIRCUITPY_WIFI_SSID)
    wm = WifiManager(radio, wifi.AuthMode, s, "SOFTWARE", DEV, ip_address=ipaddress.ip_address)
    wm.start()
    wm.poll(0)
    assert wm.active == "secondary" and len(radio.connect_calls) == 1 and wm.describe()["profile"] == "secondary"
