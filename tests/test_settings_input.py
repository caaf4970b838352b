"""core/settings.py against hostile strings and unusable IPv4 addressing, on CPython and in the MicroPython VM."""

import json

import pytest

from core.durable_file import read_text
from core.settings import Settings, SettingsError
from tools.mpvm import MicroVM

ZONES = {"Europe/Berlin", "UTC"}
LONE = ["\ud800", "x\udc00", "ab\udbff", "\udc00\ud800", "\ud800\ud800\udc00"[0:2]]
STRING_KEYS = ["device_name", "wifi.primary.ssid", "wifi.secondary.password", "accessPoint.ssid",
               "accessPoint.password", "mqtt.user", "mqtt.password", "mqtt.client_id", "mqtt.topic_prefix",
               "mqtt.discovery_prefix", "mqtt.host", "ntp_server", "timezone", "language.active",
               "wifi.primary.ip", "wifi.primary.subnet", "wifi.primary.gateway", "wifi.primary.dns"]


def make(tmp_path=None):
    return Settings(str(tmp_path / "settings.json") if tmp_path is not None else None, zone_ok=lambda z: z in ZONES)


def nest(dotted, value):
    out = value
    for part in reversed(dotted.split(".")):
        out = {part: out}
    return out


def merge(a, b):
    out = dict(a)
    for k, v in b.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def fields_of(s, patch):
    with pytest.raises(SettingsError) as ei:
        s.update(patch)
    return ei.value.fields


# --- Unicode ---

@pytest.mark.parametrize("key", STRING_KEYS)
@pytest.mark.parametrize("text", LONE, ids=["high", "low", "high-at-end", "low-high", "high-high"])
def test_lone_surrogate_refused_by_name_and_nothing_stored(tmp_path, key, text):
    s = make(tmp_path)
    before = json.dumps(s.doc)
    value = ("a" * 8 + text) if key.endswith("password") else text  # long enough for WPA2
    fields = fields_of(s, merge(nest(key, value), {"ledEnable": False}))  # with a valid key beside it
    assert list(fields) == [key] and "surrogate" in fields[key], fields
    assert json.dumps(s.doc) == before and s.writes == 0 and not (tmp_path / "settings.json").exists()


def test_surrogate_from_a_real_json_body_is_a_400_reason_not_an_exception():
    # What read_json hands over on CPython for the valid JSON text "\ud800": a str no UTF-8 encoder accepts.
    s = make()
    for key in ("wifi.primary.ssid", "wifi.primary.password", "mqtt.password", "accessPoint.ssid"):
        patch = json.loads(json.dumps(nest(key, "12345678\ud800")))
        assert "surrogate" in fields_of(s, patch)[key]


def test_surrogate_pair_is_joined_into_one_character(tmp_path):
    # MicroPython's json keeps "\ud83d\ude00" as two surrogates (CESU-8 inside the str): join them.
    s = make(tmp_path)
    s.update({"device_name": "Z\ud83d\ude00", "wifi": {"primary": {"ssid": "\ud83d\ude00" * 8}},
              "mqtt": {"user": "u\ud83d\ude00"}})
    assert s.get("device_name") == "Z\U0001F600" and len(s.get("device_name")) == 2
    assert s.get("wifi.primary.ssid") == "\U0001F600" * 8 and len(s.get("wifi.primary.ssid").encode()) == 32
    assert "surrogate" not in json.dumps(s.doc) and "\\ud83d" in read_text(str(tmp_path / "settings.json"), str)
    assert "wifi.primary.ssid" in fields_of(s, {"wifi": {"primary": {"ssid": "\ud83d\ude00" * 9}}})  # 36 bytes


@pytest.mark.parametrize("key,value", [
    ("device_name", "a\x00b"), ("device_name", "a\x85b"), ("device_name", "a\x7f"), ("mqtt.user", "u\x00"),
    ("mqtt.client_id", "c\tx"), ("mqtt.topic_prefix", "t\x9b"), ("wifi.primary.ssid", "net\x00"),
    ("accessPoint.ssid", "\x00"), ("wifi.primary.password", "12345678\x00"), ("accessPoint.password", "1234567\n8"),
])
def test_control_characters_refused_where_they_cannot_work(key, value):
    s = make()
    assert key in fields_of(s, nest(key, value))


@pytest.mark.parametrize("key,value", [
    ("wifi.primary.ssid", "caf\xe9 \t\x1b net"),  # an SSID is any 32 octets except the NUL the driver ends it at
    ("mqtt.password", "bin\x00\x01ary\ud83d\ude00"),  # MQTT passwords are binary data
    ("device_name", "K\xfcche \u2014 Z\xe4hler"),
])
def test_legal_odd_strings_stored(key, value):
    s = make()
    assert s.update(nest(key, value)) == [key]


def test_stored_surrogate_from_an_older_firmware_falls_back_to_the_default(tmp_path):
    stored = {"device_name": "Keller", "mqtt": {"enable": True, "host": "broker", "user": "\ud800",
                                                "password": "x\udfff"},
              "wifi": {"primary": {"ssid": "Home\udc00", "password": "hunter2hunter2"}}, "timezone": "UTC\ud800"}
    with open(tmp_path / "settings.json", "w") as f:
        json.dump(stored, f)  # ensure_ascii writes the valid JSON escapes "\ud800"
    s = make(tmp_path)
    assert s.get("mqtt.user") == "" and s.get("mqtt.password") == "" and s.get("wifi.primary.ssid") == ""
    assert s.get("timezone") == "Europe/Berlin"
    assert s.get("device_name") == "Keller" and s.get("mqtt.host") == "broker"  # the rest is kept
    assert s.get("wifi.primary.password") == "hunter2hunter2" and s.load_errors == 4
    s.update({"ledEnable": False})  # the next write stores the repaired document
    assert "\\ud8" not in read_text(str(tmp_path / "settings.json"), str)


# --- IPv4 ---

def static(**kw):
    profile = {"static_ip": True, "ip": "192.168.1.10", "subnet": "255.255.255.0", "gateway": "192.168.1.1"}
    profile.update(kw)
    return {"wifi": {"primary": profile}}


@pytest.mark.parametrize("text", ["\u0661\u0669\u0662.168.1.1", "192.168.\uff11.1", "192.168.1.\u00b2",
                                  "192.168.1.\u0967", " 192.168.1.1", "192.168.1.1 ", "192.168.1.+1", "1.2.3.4.5"])
@pytest.mark.parametrize("leaf", ["ip", "gateway", "dns", "subnet"])
def test_non_ascii_digits_are_not_an_address(leaf, text):
    assert "wifi.primary." + leaf in fields_of(make(), {"wifi": {"primary": {leaf: text}}})


@pytest.mark.parametrize("addr,why", [
    ("0.0.0.0", "this network"), ("0.1.2.3", "this network"), ("127.0.0.1", "loopback"), ("127.1.1.1", "loopback"),
    ("224.0.0.1", "multicast"), ("239.255.255.250", "multicast"), ("240.0.0.1", "reserved"),
    ("254.1.1.1", "reserved"), ("255.255.255.255", "broadcast"),
])
@pytest.mark.parametrize("leaf", ["ip", "gateway", "dns"])
def test_addresses_no_host_can_have(leaf, addr, why):
    reason = fields_of(make(), {"wifi": {"secondary": {leaf: addr}}})["wifi.secondary." + leaf]
    assert addr in reason and why in reason


@pytest.mark.parametrize("mask,why", [
    ("255.0.255.0", "contiguous"), ("0.0.0.0", "contiguous"), ("254.255.255.0", "contiguous"),
    ("255.255.255.254", "/31"), ("255.255.255.255", "/32"),
])
def test_masks_that_cannot_work(mask, why):
    assert why in fields_of(make(), {"wifi": {"primary": {"subnet": mask}}})["wifi.primary.subnet"]


@pytest.mark.parametrize("mask", ["255.255.255.252", "255.255.254.0", "255.0.0.0", "128.0.0.0"])
def test_usable_masks(mask):
    assert make().update({"wifi": {"primary": {"subnet": mask}}}) == ["wifi.primary.subnet"]


@pytest.mark.parametrize("kw,key,reason", [
    ({"gateway": "10.0.0.1"}, "gateway", "gateway 10.0.0.1 is outside the subnet 192.168.1.0/24"),
    ({"ip": "192.168.1.0"}, "ip", "ip 192.168.1.0 is the network address of the subnet 192.168.1.0/24"),
    ({"ip": "192.168.1.255"}, "ip", "ip 192.168.1.255 is the broadcast address of the subnet 192.168.1.0/24"),
    ({"gateway": "192.168.1.255"}, "gateway", "gateway 192.168.1.255 is the broadcast address of the subnet "
                                              "192.168.1.0/24"),
    ({"gateway": "192.168.1.10"}, "gateway", "gateway 192.168.1.10 is the device's own address (ip)"),
    ({"dns": "192.168.1.10"}, "dns", "dns 192.168.1.10 is the device's own address (ip)"),
    ({"dns": "192.168.1.255"}, "dns", "dns 192.168.1.255 is the broadcast address of the subnet 192.168.1.0/24"),
    ({"ip": "10.1.2.3", "subnet": "255.255.0.0", "gateway": "10.2.0.1"}, "gateway",
     "gateway 10.2.0.1 is outside the subnet 10.1.0.0/16"),
])
def test_addressing_that_does_not_hold_together(kw, key, reason):
    fields = fields_of(make(), static(**kw))
    assert fields == {"wifi.primary." + key: reason}


@pytest.mark.parametrize("kw", [{}, {"dns": "8.8.8.8"}, {"dns": "192.168.1.1"}, {"dns": "192.168.1.53"},
                                {"ip": "10.9.8.7", "subnet": "255.0.0.0", "gateway": "10.0.0.1"},
                                {"ip": "192.168.1.9", "subnet": "255.255.255.252", "gateway": "192.168.1.10"}])
def test_usable_static_addressing(kw):
    s = make()
    assert "wifi.primary.ip" in s.update(static(**kw))


def test_patch_of_one_key_is_checked_against_the_stored_others(tmp_path):
    s = make(tmp_path)
    s.update(static())
    stored = json.dumps(s.doc)
    fields = fields_of(s, {"wifi": {"primary": {"subnet": "255.255.255.252"}}})
    assert fields == {"wifi.primary.gateway": "gateway 192.168.1.1 is outside the subnet 192.168.1.8/30"}
    assert fields_of(s, {"wifi": {"primary": {"ip": "192.168.1.1"}}}) == {
        "wifi.primary.gateway": "gateway 192.168.1.1 is the device's own address (ip)"}
    assert json.dumps(s.doc) == stored and s.writes == 1
    assert s.update({"wifi": {"primary": {"gateway": "192.168.1.9", "subnet": "255.255.255.252"}}})


def test_cross_checks_only_between_individually_valid_fields():
    # An invalid ip is reported once, not again as "gateway outside the subnet" of an address that does not exist.
    assert fields_of(make(), static(ip="192.168.1.\u0661", gateway="10.0.0.1")) == {
        "wifi.primary.ip": "must be an IPv4 address like 192.168.1.10 (ASCII digits)"}
    assert set(fields_of(make(), static(subnet="255.0.255.0", ip="127.0.0.1"))) == {
        "wifi.primary.subnet", "wifi.primary.ip"}


def test_addressing_is_checked_together_only_when_static_ip_is_on():
    s = make()
    s.update({"wifi": {"primary": {"static_ip": False, "ip": "192.168.1.10", "subnet": "255.255.255.0",
                                   "gateway": "10.0.0.1"}}})
    assert fields_of(s, {"wifi": {"primary": {"static_ip": True}}}) == {
        "wifi.primary.gateway": "gateway 10.0.0.1 is outside the subnet 192.168.1.0/24"}


def test_stored_unusable_static_addressing_falls_back_to_dhcp(tmp_path):
    good = static()["wifi"]["primary"]
    bad = dict(good, gateway="10.0.0.1")
    with open(tmp_path / "settings.json", "w") as f:
        json.dump({"wifi": {"primary": bad, "secondary": dict(good, ip="127.0.0.1")}}, f)
    s = make(tmp_path)
    assert s.get("wifi.primary.static_ip") is False and s.get("wifi.primary.gateway") == "10.0.0.1"
    assert s.get("wifi.secondary.static_ip") is False and s.get("wifi.secondary.ip") == ""
    assert s.load_errors == 3  # the loopback ip, and each profile's static_ip switched off
    with open(tmp_path / "settings.json", "w") as f:
        json.dump({"wifi": {"primary": good}}, f)
    assert make(tmp_path).get("wifi.primary.static_ip") is True


@pytest.mark.parametrize("host,ok", [
    ("127.0.0.1", True), ("192.168.1.5", True), ("broker.local", True), ("1e100.net", True),
    ("999.1.1.1", False), ("1.2.3", False), ("0.0.0.0", False), ("255.255.255.255", False), ("224.0.0.251", False),
    ("\u0661\u0669\u0662.168.1.1", False), ("192.168.1.01", False),
])
def test_mqtt_host_and_ntp_server_addresses(host, ok):
    for key in ("mqtt.host", "ntp_server"):
        s = make()
        if ok:
            assert s.update(nest(key, host)) == [key]
        else:
            assert key in fields_of(s, nest(key, host))


# --- the same rules inside MicroPython (its json module and str differ from CPython's) ---

VM_CODE = r"""
import json
from core.settings import Settings, SettingsError
s = Settings(None, zone_ok=lambda z: True)
def post(body):
    try:
        return "ok %s" % ",".join(sorted(s.update(json.loads(body))))
    except SettingsError as e:
        return "bad %s" % ",".join(sorted(e.fields))
print(post(b'{"device_name": "\\ud800"}'))
print(post(b'{"mqtt": {"user": "u\\udc00"}, "ledEnable": false}'))
print(post(b'{"wifi": {"primary": {"ssid": "\\ud800", "password": "12345678\\udbff"}}}'))
print(post(b'{"accessPoint": {"ssid": "\xed\xa0\x80"}}'))
print(post(b'{"device_name": "Z\\ud83d\\ude00"}'))
print("name", s.get("device_name").encode() == b"Z\xf0\x9f\x98\x80", len(s.get("device_name")))
print(post(b'{"wifi": {"primary": {"ip": "\xd9\xa1\xd9\xa9\xd9\xa2.168.1.1"}}}'))
print(post(b'{"wifi": {"primary": {"subnet": "255.0.255.0", "dns": "255.255.255.255", "gateway": "127.0.0.1"}}}'))
print(post(b'{"wifi": {"primary": {"static_ip": true, "ip": "192.168.1.10", "subnet": "255.255.255.0", '
           b'"gateway": "192.168.1.1"}}}'))
try:
    s.update({"wifi": {"primary": {"subnet": "255.255.255.252"}}})
except SettingsError as e:
    print("merged", e.fields["wifi.primary.gateway"])
print(post(b'{"mqtt": {"host": "999.1.1.1"}}'))
print(post(b'{"wifi": {"secondary": {"ssid": "\\u0000"}}}'))
print(post(b'{"a\\ud800": 1}'))
"""


def test_the_rules_inside_micropython():
    with MicroVM(packages=("core",)) as vm:
        out, _fuel = vm.run(VM_CODE)
    assert out.strip().splitlines() == [
        "bad device_name",
        "bad mqtt.user",
        "bad wifi.primary.password,wifi.primary.ssid",
        "bad accessPoint.ssid",  # UTF-8 encoded surrogate bytes: MicroPython's json lets them through
        "ok device_name",
        "name True 2",
        "bad wifi.primary.ip",
        "bad wifi.primary.dns,wifi.primary.gateway,wifi.primary.subnet",
        "ok wifi.primary.gateway,wifi.primary.ip,wifi.primary.static_ip,wifi.primary.subnet",
        "merged gateway 192.168.1.1 is outside the subnet 192.168.1.8/30",
        "bad mqtt.host",
        "bad wifi.secondary.ssid",
        "bad a\\ud800",  # the key named as text, not as the invalid UTF-8 MicroPython's json.dumps would write
    ]


def test_file_written_by_an_older_micropython_firmware_loads_repaired(tmp_path):
    # MicroPython's json.dumps writes each surrogate half as 3 raw bytes (CESU-8): what an older firmware stored
    # after a "\ud83d\ude00" or a lone "\ud800" arrived over the API. CPython cannot even decode that file.
    path = tmp_path / "settings.json"
    path.write_bytes(b'{"device_name": "Z\xed\xa0\xbd\xed\xb8\x80", "mqtt": {"user": "\xed\xa0\x80", '
                     b'"host": "broker"}, "wifi": {"primary": {"ssid": "Home"}}}')
    with MicroVM(packages=("core",), extra_files=((str(path), "settings.json"),)) as vm:
        out, _fuel = vm.run("""
from core.settings import Settings
s = Settings("/input/settings.json", zone_ok=lambda z: True)
print(s.get("device_name").encode() == b"Z\\xf0\\x9f\\x98\\x80", repr(s.get("mqtt.user")), s.get("mqtt.host"),
      s.get("wifi.primary.ssid"), s.load_errors)
""")
    assert out.strip() == "True '' broker Home 1"


def test_key_name_with_a_surrogate_is_named_as_text():
    # The key comes back in fields; MicroPython's json.dumps would write the surrogate as invalid UTF-8.
    fields = fields_of(make(), {"mqtt": {"us\ud800er": "x"}, "x\udc00": 1})
    assert fields == {"mqtt.us\\ud800er": "unknown key (not valid Unicode)",
                      "x\\udc00": "unknown key (not valid Unicode)"}
    json.dumps(fields).encode("utf-8")
