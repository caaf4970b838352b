"""Our mDNS responder found by the peers that look for it: python-zeroconf (Home Assistant's library) browsing and
resolving every service with its TXT over real multicast (224.0.0.251 on loopback, in a network namespace this
test creates), a WattWächter-style zeroconf step reading the device id, aioshelly's discovery and Home Assistant's
zeroconf matching of the Shelly record."""

import fnmatch
import json
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEV = "024d50000001"
HOST = "meterplus-%s.local." % DEV
WW = "meterplus-000001._wattwaechter._tcp.local."
HTTP = "meterplus-000001._http._tcp.local."
SHELLY = "shellypro3em-%s._shelly._tcp.local." % DEV
SHELLY_HTTP = "shellypro3em-%s._http._tcp.local." % DEV


def _netns_ok():
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return False
    return subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode == 0


# "module": the responder alone in the test's namespace; "host": the whole firmware as python -m host --mdns-port 5353
# (joined to the simulated WiFi, the Shelly emulation switched off through the settings API)
@pytest.fixture(scope="module", params=["module", pytest.param("host", marks=pytest.mark.slow)])
def seen(request):
    if not _netns_ok():
        pytest.skip("needs unshare -n (a network namespace) for multicast on loopback")
    args = ["host"] if request.param == "host" else []
    out = subprocess.run(["unshare", "-n", sys.executable, os.path.join(ROOT, "tests", "mdns_netns.py"), *args],
                         capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    doc["port"] = doc.get("http_port", 8080)
    return doc


def wattwaechter_zeroconf_step(info):
    """The WattWächter integration's zeroconf step as it parses the properties (custom_components/wattwaechter/
    config_flow.py, async_step_zeroconf): the device id from "id" (a "WWP-" prefix allowed), model, ver, mac;
    without an id it aborts with no_device_id."""
    props = info["properties"]
    device_id = props.get("id")
    if not device_id:
        return {"type": "abort", "reason": "no_device_id"}
    if device_id.startswith("WWP-"):
        device_id = device_id[4:]
    return {"type": "form", "unique_id": device_id, "host": info["addresses"][0], "port": info["port"],
            "model": props.get("model"), "firmware": props.get("ver"), "mac": props.get("mac")}


# Home Assistant's Shelly manifest (homeassistant/components/shelly/manifest.json, "zeroconf") and its matcher
# (homeassistant/components/zeroconf: the type, then fnmatch on the lower-case instance name)
SHELLY_MATCHERS = ({"type": "_http._tcp.local.", "name": "shelly*"}, {"type": "_shelly._tcp.local."})


def ha_shelly_matches(service_type, name):
    for m in SHELLY_MATCHERS:
        if m["type"] != service_type:
            continue
        if "name" in m and not fnmatch.fnmatch(name.lower(), m["name"]):
            continue
        return True
    return False


def mac_address_from_name(name):
    """homeassistant/components/shelly/utils.py: the MAC from a Shelly's instance name (shellypro3em-<mac>)."""
    mac = name.partition(".")[0].partition("-")[-1]
    return mac.upper() if len(mac) == 12 else None


def test_zeroconf_browses_every_service(seen):
    assert seen["found"] == {"_http._tcp.local.": [HTTP, SHELLY_HTTP], "_shelly._tcp.local.": [SHELLY],
                             "_wattwaechter._tcp.local.": [WW]}
    assert seen["counters"]["answers"] >= 1       # it asked after the announcements: answered, not only announced


def test_zeroconf_resolves_every_service_with_its_txt(seen):
    res = seen["resolved"]
    assert set(res) == {HTTP, WW, SHELLY, SHELLY_HTTP}
    for info in res.values():
        assert info["ok"] and info["port"] == seen["port"] and info["server"] == HOST
        assert info["addresses"] == ["127.0.0.1"]
    assert res[HTTP]["properties"] == {"path": "/"}
    assert res[WW]["properties"] == {"id": DEV, "model": "MeterPlus", "ver": "0.1.0", "mac": "02:4D:50:00:00:01"}


def test_a_wattwaechter_zeroconf_flow_gets_the_device_id(seen):
    flow = wattwaechter_zeroconf_step(seen["resolved"][WW])
    assert flow["type"] == "form" and flow["unique_id"] == DEV and flow["host"] == "127.0.0.1"
    assert flow["model"] == "MeterPlus" and flow["firmware"] == "0.1.0" and flow["mac"] == "02:4D:50:00:00:01"
    # what CircuitPython's responder gave it: no TXT at all
    assert wattwaechter_zeroconf_step({"properties": {}, "addresses": ["127.0.0.1"], "port": 80}) == \
        {"type": "abort", "reason": "no_device_id"}


def test_the_shelly_record_is_matched_as_a_gen2_shelly_pro_3em(seen):
    shelly = seen["resolved"][SHELLY]["properties"]
    assert shelly["gen"] == "2" and shelly["app"] == "Pro3EM" and shelly["id"] == "shellypro3em-" + DEV
    assert shelly["fw_id"] and shelly["arch"]
    assert ha_shelly_matches("_shelly._tcp.local.", SHELLY) and ha_shelly_matches("_http._tcp.local.", SHELLY_HTTP)
    assert not ha_shelly_matches("_http._tcp.local.", HTTP)
    assert mac_address_from_name(SHELLY) == DEV.upper()
    # aioshelly's own discovery (aioshelly.zeroconf.async_discover_devices) over the browsers' cache
    assert seen["aioshelly"] == [[SHELLY, "127.0.0.1", seen["port"]]]


def test_switching_the_emulation_off_removes_the_shelly_services(seen):
    assert seen["removed"] == [SHELLY_HTTP, SHELLY]
    assert seen["counters"]["goodbyes"] == 1


@pytest.mark.slow
def test_txt_is_published_with_mqtt_and_the_shelly_emulation_on_two_udp_ports():
    """Issue 36 finding 6: with MQTT and the Shelly emulation (two UDP ports, SMA) on and Modbus off, the features'
    worst case (HTTP 3, MQTT, two UDP ports, Home Assistant's WebSocket, an NTP round) left our responder no socket:
    CircuitPython's answered, without TXT, and the WattWächter integration aborted no_device_id. The responder now
    lends its socket to an NTP round (core/sockbudget.py responder_fits), so it fits: the whole firmware on the host,
    python-zeroconf over real multicast, the WattWächter step gets the device id."""
    if not _netns_ok():
        pytest.skip("needs unshare -n (a network namespace) for multicast on loopback")
    out = subprocess.run(["unshare", "-n", sys.executable, os.path.join(ROOT, "tests", "mdns_netns.py"),
                          "host-mqtt-shelly"], capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    assert doc["counters"]["responder"] == "own", doc["counters"]
    flow = wattwaechter_zeroconf_step(doc["resolved"][WW])
    assert flow["type"] == "form" and flow["unique_id"] == DEV
    assert doc["resolved"][SHELLY]["properties"]["app"] == "Pro3EM"
