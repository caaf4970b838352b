"""core/settings.py: every rule of the spec's settings table, all-or-nothing updates, secrets; core/json_store.py:
atomic storage."""

import json
import os

import pytest

from core import durable_file
from core import settings as S
from core.json_store import read_json_file, write_atomic
from core.settings import Settings, SettingsError
from tests.test_settings_input import merge, nest
from tools.mpvm import MicroVM

ZONES = {"Europe/Berlin", "Europe/London", "UTC"}


def make(tmp_path=None):
    path = str(tmp_path / "settings.json") if tmp_path is not None else None
    return Settings(path, zone_ok=lambda z: z in ZONES)


def rejects(s, patch, key):
    with pytest.raises(SettingsError) as ei:
        s.update(patch)
    assert key in ei.value.fields, ei.value.fields
    return ei.value.fields[key]


# (patch, dotted key that must be rejected)
BAD = [
    ({"device_name": "x" * 32}, "device_name"),
    ({"device_name": 5}, "device_name"),
    ({"device_name": "a\nb"}, "device_name"),
    ({"ledEnable": 1}, "ledEnable"),
    ({"ledEnable": "true"}, "ledEnable"),
    ({"wifi": {"primary": {"password": "x" * 64}}}, "wifi.primary.password"),
    ({"wifi": {"primary": {"password": "ä" * 32}}}, "wifi.primary.password"),  # 64 bytes
    ({"wifi": {"primary": {"password": "short"}}}, "wifi.primary.password"),
    ({"wifi": {"primary": {"ssid": "s" * 33}}}, "wifi.primary.ssid"),
    ({"wifi": {"primary": {"enable": "yes"}}}, "wifi.primary.enable"),
    ({"wifi": {"primary": {"ip": "192.168.1.256"}}}, "wifi.primary.ip"),
    ({"wifi": {"primary": {"ip": "192.168.1"}}}, "wifi.primary.ip"),
    ({"wifi": {"primary": {"ip": "01.2.3.4"}}}, "wifi.primary.ip"),
    ({"wifi": {"primary": {"gateway": "a.b.c.d"}}}, "wifi.primary.gateway"),
    ({"wifi": {"primary": {"subnet": "255.0.255.0"}}}, "wifi.primary.subnet"),
    ({"wifi": {"primary": {"dns": 8}}}, "wifi.primary.dns"),
    ({"wifi": {"secondary": {"static_ip": True, "ip": "10.0.0.2"}}}, "wifi.secondary.subnet"),
    ({"wifi": {"secondary": {"static_ip": True, "ip": "10.0.0.2", "subnet": "255.0.0.0"}}}, "wifi.secondary.gateway"),
    ({"wifi": {"primary": {"static_ip": True}}}, "wifi.primary.ip"),
    ({"wifi": {"primary": {"nope": 1}}}, "wifi.primary.nope"),
    ({"wifi": {"tertiary": {}}}, "wifi.tertiary"),
    ({"wifi": 5}, "wifi"),
    ({"accessPoint": {"password": "1234567"}}, "accessPoint.password"),
    ({"accessPoint": {"password_enable": "on"}}, "accessPoint.password_enable"),
    ({"api_auth_required": 0}, "api_auth_required"),
    ({"timezone": "Mars/Olympus"}, "timezone"),
    ({"timezone": ""}, "timezone"),
    ({"ntp_server": ""}, "ntp_server"),
    ({"ntp_server": "bad host"}, "ntp_server"),
    ({"language": {"active": "German"}}, "language.active"),
    ({"language": {"active": "fr"}}, "language.active"),
    ({"language": {"installed": []}}, "language.installed"),
    ({"mqtt": {"port": 0}}, "mqtt.port"),
    ({"mqtt": {"port": 65536}}, "mqtt.port"),
    ({"mqtt": {"port": "1883"}}, "mqtt.port"),
    ({"mqtt": {"port": True}}, "mqtt.port"),
    ({"mqtt": {"port": 1883.0}}, "mqtt.port"),
    ({"mqtt": {"enable": True}}, "mqtt.host"),
    ({"mqtt": {"topic_prefix": "a/#"}}, "mqtt.topic_prefix"),
    ({"mqtt": {"sendInterval": 0}}, "mqtt.sendInterval"),
    ({"modbus": {"port": 0}}, "modbus.port"),
    ({"modbus": {"enable": 1}}, "modbus.enable"),
    ({"medianFilterSize": 4}, "medianFilterSize"),
    ({"medianFilterSize": "Off"}, "medianFilterSize"),
    ({"medianFilterSize": True}, "medianFilterSize"),
    ({"ctRatio": 0.9}, "ctRatio"),
    ({"ctRatio": 10000.1}, "ctRatio"),
    ({"ctRatio": 1.25}, "ctRatio"),
    ({"ctRatio": "2"}, "ctRatio"),
    ({"ctRatio": True}, "ctRatio"),
    ({"ctRatio": float("nan")}, "ctRatio"),
    ({"autoOta": None}, "autoOta"),
    ({"cloudIotEnabled": "false"}, "cloudIotEnabled"),
    ({"unknownKey": 1}, "unknownKey"),
    ({"history": {"flushMinutes": 0}}, "history.flushMinutes"),
]


@pytest.mark.parametrize("patch,key", BAD, ids=[k for _p, k in BAD])
def test_bad_values_rejected_and_nothing_changes(patch, key):
    s = make()
    before = json.dumps(s.doc, sort_keys=True)
    rejects(s, patch, key)
    assert json.dumps(s.doc, sort_keys=True) == before


GOOD = [
    ({"device_name": "x" * 31}, "device_name", "x" * 31),
    ({"device_name": "Zähler Küche"}, "device_name", "Zähler Küche"),
    ({"ledEnable": False}, "ledEnable", False),
    ({"wifi": {"primary": {"password": "x" * 63}}}, "wifi.primary.password", "x" * 63),
    ({"wifi": {"primary": {"static_ip": True, "ip": "192.168.1.10", "subnet": "255.255.255.0",
                           "gateway": "192.168.1.1"}}}, "wifi.primary.dns", ""),
    ({"accessPoint": {"password": "12345678"}}, "accessPoint.password", "12345678"),
    ({"timezone": "Europe/London"}, "timezone", "Europe/London"),
    ({"language": {"active": "en"}}, "language.active", "en"),
    ({"mqtt": {"port": 1}}, "mqtt.port", 1),
    ({"mqtt": {"port": 65535}}, "mqtt.port", 65535),
    ({"mqtt": {"enable": True, "host": "broker.local"}}, "mqtt.host", "broker.local"),
    ({"medianFilterSize": 0}, "medianFilterSize", 0),
    ({"medianFilterSize": 9}, "medianFilterSize", 9),
    ({"ctRatio": 1}, "ctRatio", 1),
    ({"ctRatio": 10000}, "ctRatio", 10000),
    ({"ctRatio": 2.5}, "ctRatio", 2.5),
    ({"ctRatio": 150.0}, "ctRatio", 150),
    ({"ctRatio": 0.3 * 10}, "ctRatio", 3),   # 3.0000000000000004 is a step of 0.1
    ({"modbus": {"enable": True, "port": 1502}}, "modbus.port", 1502),
    ({"mqtt.host": "10.0.0.5"}, "mqtt.host", "10.0.0.5"),   # dotted path at the top level
]


@pytest.mark.parametrize("patch,key,value", GOOD, ids=[k for _p, k, _v in GOOD])
def test_good_values_applied(patch, key, value):
    s = make()
    s.update(patch)
    assert s.get(key) == value


def test_all_or_nothing_with_one_bad_key():
    s = make()
    with pytest.raises(SettingsError) as ei:
        s.update({"device_name": "new", "ledEnable": False, "mqtt": {"port": 0}})
    assert list(ei.value.fields) == ["mqtt.port"]
    assert s.get("device_name") == "Meter Plus" and s.get("ledEnable") is True


def test_every_bad_key_reported():
    s = make()
    with pytest.raises(SettingsError) as ei:
        s.update({"device_name": "x" * 40, "timezone": "Nowhere", "bogus": 1, "ctRatio": 0})
    assert set(ei.value.fields) == {"device_name", "timezone", "bogus", "ctRatio"}


def test_secrets_never_in_public_document():
    s = make()
    s.update({"wifi": {"primary": {"ssid": "Home", "password": "hunter2hunter2"}}, "mqtt": {"password": "pw"},
              "accessPoint": {"password": "apsecret"}})
    pub = s.public()
    text = json.dumps(pub)
    for secret in ("hunter2hunter2", "apsecret", '"pw"'):
        assert secret not in text
    assert pub["wifi"]["primary"]["password_set"] is True
    assert pub["wifi"]["secondary"]["password_set"] is False
    assert pub["mqtt"]["password_set"] is True and pub["accessPoint"]["password_set"] is True
    assert "password" not in pub["wifi"]["primary"]
    assert pub["language"] == {"active": "de", "installed": [{"code": "de", "name": "Deutsch"},
                                                             {"code": "en", "name": "English"}]}


def test_empty_password_keeps_null_clears():
    s = make()
    s.update({"wifi": {"primary": {"password": "hunter2hunter2"}}})
    assert s.update({"wifi": {"primary": {"ssid": "Other", "password": ""}}}) == ["wifi.primary.ssid"]
    assert s.get("wifi.primary.password") == "hunter2hunter2"    # a renamed network: the page asks first
    assert s.update({"wifi": {"primary": {"password": None}}}) == ["wifi.primary.password"]
    assert s.get("wifi.primary.password") == ""


@pytest.mark.parametrize("patch,key", [
    ({"wifi": {"primary.ssid": "x"}}, "wifi.primary.ssid"),
    ({"mqtt": {"tls.x": True}}, "mqtt.tls.x"),
    ({"accessPoint": {"password.x": "y"}}, "accessPoint.password.x"),
], ids=["wifi", "unknown", "ap"])
def test_dotted_keys_inside_objects_are_refused_and_named(patch, key):
    """Issue 26 finding 7: {"wifi": {"primary.ssid": "x"}} mixes the two spellings; refused, nothing changes."""
    s = make()
    before = json.dumps(s.doc, sort_keys=True)
    reason = rejects(s, patch, key)
    assert "dotted key" in reason and json.dumps(s.doc, sort_keys=True) == before


def test_keys_of_names_every_spelling():
    assert make().keys_of({"wifi.primary.ssid": "a", "accessPoint": {"enable": True}, "mqtt": {"host": "b"}}) == \
        (["accessPoint.enable", "mqtt.host", "wifi.primary.ssid"], {})


@pytest.mark.parametrize("secret,dest,new", [
    ("mqtt.password", "mqtt.host", "broker.evil.example"),
])
def test_a_new_destination_drops_the_stored_secret_unless_given_again(secret, dest, new):
    s = make()
    group, leaf = secret.rsplit(".", 1)
    s.update(merge(nest(dest, "old.example" if "host" in dest else "Home"), nest(secret, "ownersecret1")))
    changed = s.update(nest(dest, new))
    assert changed == sorted([dest, secret]) and s.get(secret) == "" and s.get(dest) == new
    s.update(merge(nest(dest, "old.example" if "host" in dest else "Home"), nest(secret, "ownersecret1")))
    s.update(merge(nest(dest, new), nest(secret, "")))        # "" means "keep": not giving it again
    assert s.get(secret) == ""
    s.update(merge(nest(dest, "old.example" if "host" in dest else "Home"), nest(secret, "ownersecret1")))
    assert s.update(merge(nest(dest, new), nest(secret, "ownersecret1"))) == [dest]   # given again: kept
    assert s.get(secret) == "ownersecret1"
    other = nest(group + ".enable", not s.get(group + ".enable")) if "wifi" in group else {"mqtt": {"port": 1884}}
    assert s.update(other)
    assert s.get(secret) == "ownersecret1"                   # other keys of the group leave it alone


def test_public_document_posts_back_unchanged():
    s = make()
    s.update({"mqtt": {"password": "pw"}})
    assert s.update(s.public()) == []


def test_read_only_flag_cannot_be_changed():
    s = make()
    assert rejects(s, {"mqtt": {"password_set": True}}, "mqtt.password_set") == "read-only"


def test_changed_keys_only_real_changes():
    s = make()
    assert s.update({"ledEnable": True, "device_name": "Meter Plus"}) == []
    assert s.update({"ledEnable": False, "device_name": "Meter Plus"}) == ["ledEnable"]


def test_restart_keys():
    assert S.restart_needed("wifi.primary.ssid") and S.restart_needed("accessPoint.enable")
    assert not S.restart_needed("ledEnable") and not S.restart_needed("mqtt.host")


def test_persisted_and_reloaded(tmp_path):
    s = make(tmp_path)
    s.update({"device_name": "Keller", "ctRatio": 2.5, "wifi": {"primary": {"password": "hunter2hunter2"}}})
    again = make(tmp_path)
    assert again.exists()
    assert again.get("device_name") == "Keller" and again.get("ctRatio") == 2.5
    assert again.get("wifi.primary.password") == "hunter2hunter2"
    assert sorted(os.listdir(tmp_path)) == ["settings.json.slots"]


def test_invalid_stored_values_fall_back_to_defaults(tmp_path):
    with open(tmp_path / "settings.json", "w") as f:
        json.dump({"device_name": 7, "ledEnable": False, "mqtt": {"port": 99999}, "junk": 1}, f)
    s = make(tmp_path)
    assert s.get("device_name") == "Meter Plus" and s.get("ledEnable") is False and s.get("mqtt.port") == 1883
    assert s.load_errors == 2


def test_broken_file_means_defaults(tmp_path):
    (tmp_path / "settings.json").write_text('{"device_name": "Kel')
    s = make(tmp_path)
    assert s.get("device_name") == "Meter Plus"


class PowerCut(Exception):
    pass


# How the drive is before the save, and the steps (writes and removes) the save makes: a save into the slot file (one
# write), the first save on a drive of the copy scheme (the slot file made: two writes; path is left, frozen), a
# document larger than its slots (path.slots.new written, the slot file made again, path.slots.new removed).
BEFORE = {"slots": 1, "plain": 2, "outgrown": 4}


@pytest.mark.parametrize("before", sorted(BEFORE))
@pytest.mark.parametrize("cut_at", range(5))
def test_power_cut_at_any_step_leaves_old_or_new(tmp_path, monkeypatch, cut_at, before):
    """Interrupt write_atomic before its n-th file-system operation; the reader gets the old or the new document.
    (On the host's file system; tests/test_json_store_power_cut.py cuts at every block write inside FatFs.)"""
    path = str(tmp_path / "doc.json")
    new = {"v": "new", "pad": "x" * (5000 if before == "outgrown" else 10)}
    if before == "plain":
        with open(path, "w") as f:
            f.write('{"v": "old"}')
    else:
        write_atomic(path, {"v": "old"})
    ops = {"n": 0}
    real = {"open": open, "remove": os.remove}

    def step():
        if ops["n"] == cut_at:
            raise PowerCut()
        ops["n"] += 1

    class TornFile:
        """An open() whose write stops half way when the cut falls inside it."""

        def __init__(self, f):
            self.f = f

        def write(self, text):
            if ops["n"] == cut_at:
                self.f.write(text[: len(text) // 2])
                self.f.close()
                raise PowerCut()
            ops["n"] += 1
            return self.f.write(text)

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *a):
            self.f.close()

    def fake_open(p, mode="r", *a, **k):
        f = real["open"](p, mode, *a, **k)
        return TornFile(f) if "w" in mode or "+" in mode else f

    def fake_rename(a, b):
        raise AssertionError("rename %s -> %s" % (a, b))

    def fake_remove(p):
        step()
        real["remove"](p)

    monkeypatch.setattr(durable_file, "open", fake_open, raising=False)
    monkeypatch.setattr(os, "rename", fake_rename)
    monkeypatch.setattr(os, "remove", fake_remove)
    try:
        write_atomic(path, new)
        finished = True
    except PowerCut:
        finished = False
    monkeypatch.undo()
    got = read_json_file(path)
    assert got in ({"v": "old"}, new)
    if finished:
        assert got == new
    assert finished == (cut_at >= BEFORE[before])
    # and the next write after the reboot works from whatever was left
    write_atomic(path, {"v": "next"})
    assert read_json_file(path) == {"v": "next"}


@pytest.mark.parametrize("garbage", [b"", b"\xff\xfe{}", b"\x00" * 64, b'{"v": '])
def test_an_empty_binary_or_torn_file_reads_as_absent_and_the_next_name_is_tried(tmp_path, garbage):
    path = str(tmp_path / "s.json")
    for name in (path + ".new", path):
        with open(name, "wb") as f:
            f.write(garbage)
    assert read_json_file(path) is None
    with open(path + ".bak", "w") as f:
        f.write('{"v": "old"}')
    assert read_json_file(path) == {"v": "old"}


def test_the_same_fallback_inside_micropython(tmp_path):
    """MicroPython reads invalid UTF-8 without an error (json.loads refuses it): the same names are skipped there."""
    files = {"s.json.new": b"\xff\xfe{}", "s.json": b"", "s.json.bak": b'{"v": "old"}'}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    with MicroVM(packages=("core",), extra_files=[(str(tmp_path / n), n) for n in files]) as vm:
        out, _fuel = vm.run("from core.json_store import read_json_file\nprint(read_json_file('/input/s.json'))\n")
    assert out.strip() == "{'v': 'old'}"


def test_write_atomic_never_renames(tmp_path, monkeypatch):
    """A FAT rename can leave two names on one cluster chain after a cut (tests/test_json_store_power_cut.py)."""
    def no_rename(a, b):
        raise AssertionError("rename %s -> %s" % (a, b))

    monkeypatch.setattr(os, "rename", no_rename)
    path = str(tmp_path / "s.json")
    for i in range(3):
        write_atomic(path, {"i": i})
        assert read_json_file(path) == {"i": i}
    assert sorted(os.listdir(tmp_path)) == ["s.json.slots"]


@pytest.mark.parametrize("left", [
    {".tmp": {"v": "new"}, ".bak": {"v": "old"}},   # an older firmware's cut between its two renames
    {".bak": {"v": "old"}},
    {"": "torn{", ".tmp": {"v": "new"}},
])
def test_documents_an_older_firmware_left_half_renamed_are_read(tmp_path, left):
    path = str(tmp_path / "s.json")
    for suffix, doc in left.items():
        with open(path + suffix, "w") as f:
            f.write(doc if isinstance(doc, str) else json.dumps(doc))
    assert read_json_file(path) == (left.get(".tmp") or left[".bak"])
    write_atomic(path, {"v": "next"})
    assert read_json_file(path) == {"v": "next"}
    durable_file.remove_all(path)
    assert os.listdir(tmp_path) == [] and read_json_file(path) is None


def test_a_document_nested_too_deep_or_too_large_is_damaged_inside_micropython(tmp_path):
    """Issue 26 finding 9 in the VM: a name holding a document too large to read (or nested deeper than the parser
    takes) is skipped like a torn one, and the next name is read; nothing raises out of read_json_file."""
    files = {"s.json.new": b'{"x": "' + b"a" * 20000 + b'"}', "s.json": b"[" * 5000, "s.json.bak": b'{"v": "old"}'}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    with MicroVM(packages=("core",), extra_files=[(str(tmp_path / n), n) for n in files]) as vm:
        out, _fuel = vm.run("from core.json_store import read_json_file\nprint(read_json_file('/input/s.json'))\n")
    assert out.strip() == "{'v': 'old'}", out


_VM_FILES = '''
import io, os as _os, json
from core import durable_file as d
from core.json_store import read_json_file, write_atomic
files = {}
class F:
    def __init__(self, name, mode="r"):
        if "w" in mode:
            files[name] = b""
        elif name not in files:
            raise OSError(2)
        self.name, self.bin, self.io = name, "b" in mode, io.BytesIO(files[name])
    def read(self, n=-1):
        data = self.io.read() if n < 0 else self.io.read(n)
        return data if self.bin else data.decode()
    def readinto(self, buf):
        return self.io.readinto(buf)
    def seek(self, pos, whence=0):
        return self.io.seek(pos, whence)
    def write(self, data):
        return self.io.write(data if self.bin else data.encode())
    def flush(self):
        files[self.name] = self.io.getvalue()
    def close(self):
        self.flush()
    def __enter__(self):
        return self
    def __exit__(self, *a):
        self.close()
class Os:
    def stat(self, name):
        if name not in files:
            raise OSError(2)
    def urandom(self, n):
        return _os.urandom(n)
def patch():
    d.open = F
    d.os = Os()
    d.remove_quiet = lambda name: files.pop(name, None)
'''


def test_the_slot_file_written_and_read_inside_micropython(tmp_path):
    """The store's own code in the VM (struct.pack_into, binascii.crc32 over a memoryview, readinto, seek from the
    end): migration from a plain file, saves in place, a document outgrowing its slots, one too large; and the
    slot file it makes is the one CPython reads (and the other way round)."""
    path = str(tmp_path / "s.json")
    write_atomic(path, {"v": "from CPython", "pad": "p" * 3000})
    with MicroVM(packages=("core",), extra_files=[(path + ".slots", "c.json.slots")]) as vm:
        out, _fuel = vm.run(_VM_FILES + '''
print("cpython", read_json_file("/input/c.json")["v"])
patch()
files["s.json"] = b'{"v": "plain"}'
print("plain", read_json_file("s.json")["v"], d.stored("s.json"))
for i in range(3):
    write_atomic("s.json", {"v": i})
    print("saved", read_json_file("s.json")["v"], sorted(files), len(files["s.json.slots"]))
print("frozen", files["s.json"])
files["s.json"] = b'{"v": "edited"}'
print("edited", read_json_file("s.json")["v"])
write_atomic("s.json", {"v": "after"})
print("again", read_json_file("s.json")["v"], files["s.json"])
write_atomic("s.json", {"v": "big", "pad": "y" * 6000})
print("grown", read_json_file("s.json")["v"], sorted(files), len(files["s.json.slots"]))
try:
    write_atomic("s.json", {"v": "z" * 17000})
except OSError as exc:
    print("refused", isinstance(exc, d.TooLarge), read_json_file("s.json")["v"])
import binascii
print("hex", binascii.hexlify(files["s.json.slots"]).decode())
''')
    lines = out.splitlines()
    assert lines[:5] == ["cpython from CPython", "plain plain True",
                         "saved 0 ['s.json', 's.json.slots'] 9216", "saved 1 ['s.json', 's.json.slots'] 9216",
                         "saved 2 ['s.json', 's.json.slots'] 9216"], out[:2000]     # s.json frozen for a rollback
    assert lines[5:8] == ["frozen b'{\"v\": \"plain\"}'", "edited edited", "again after b'{\"v\": \"edited\"}'"]
    del lines[5:8]
    assert lines[5].startswith("grown big ['s.json', 's.json.slots'] ") and int(lines[5].split()[-1]) > 9216
    assert lines[6] == "refused True big"
    (tmp_path / "vm.json.slots").write_bytes(bytes.fromhex(lines[7].split()[1]))
    assert read_json_file(str(tmp_path / "vm.json"))["v"] == "big"


def _slot_file_of_the_firmware_before_the_frozen_copy(path, text, plain):
    """A slot file as the firmware before the frozen copies wrote it (MPR1 records: no fingerprints; it removed the
    plain names after its saves), with a plain `path` written after it (the owner, or older firmware)."""
    import binascii
    import struct

    slot, fid = 4096, 7
    head = bytearray(durable_file.HEAD)
    struct.pack_into("<4sIII", head, 0, b"MPS1", fid, slot, 0)
    struct.pack_into("<I", head, 12, binascii.crc32(bytes(head[:12])))
    data = text.encode()
    rec = bytearray(slot)
    crc = binascii.crc32(data, binascii.crc32(struct.pack("<III", fid, 3, len(data))))
    struct.pack_into("<4sIIII", rec, 0, b"MPR1", fid, 3, len(data), crc)
    rec[20:20 + len(data)] = data
    with open(path + ".slots", "wb") as f:
        f.write(bytes(head) + bytes(rec) + bytes(slot))
    if plain is not None:
        with open(path, "w") as f:
            f.write(plain)


def test_a_slot_file_of_the_firmware_before_is_read_and_its_plain_file_is_taken_as_newer(tmp_path):
    path = str(tmp_path / "s.json")
    _slot_file_of_the_firmware_before_the_frozen_copy(path, '{"v": "slots"}', None)
    assert read_json_file(path) == {"v": "slots"}
    _slot_file_of_the_firmware_before_the_frozen_copy(path, '{"v": "slots"}', '{"v": "plain"}')
    assert read_json_file(path) == {"v": "plain"}        # no fingerprint recorded: that firmware removed it
    write_atomic(path, {"v": "next"})                    # the other slot: an MPR2 record beside the MPR1 one
    assert read_json_file(path) == {"v": "next"} and open(path).read() == '{"v": "plain"}'
    write_atomic(path, {"v": "again"})                   # over the MPR1 record
    assert read_json_file(path) == {"v": "again"}


def test_a_cut_while_the_first_slot_file_is_made_on_a_host_reads_the_plain_file(tmp_path):
    """A host's file system may keep part of a file being made (FatFs leaves it empty): its header whole in a file
    shorter than it says, or part of the header. Such a file stands for nothing: the plain file is read; a slot file
    of any other shape without a complete record is damaged and the plain file (maybe a frozen one) is not."""
    path = str(tmp_path / "s.json")
    write_atomic(path, {"v": "made"})
    whole = open(path + ".slots", "rb").read()
    os.remove(path + ".slots")
    with open(path, "w") as f:
        f.write('{"v": "plain"}')
    for cut in (0, 5, 16, 1024, 3000, len(whole) - 1):
        with open(path + ".slots", "wb") as f:
            f.write(whole[:cut])
        assert read_json_file(path) == {"v": "plain"}, cut
    with open(path + ".slots", "wb") as f:
        f.write(b"\0" * len(whole))
    assert read_json_file(path) is None and durable_file.stored(path)


def test_settings_across_an_update_a_rollback_and_back(tmp_path):
    """The older firmware (its own durable_file, kept in tests/) left settings.json; the first save here keeps it,
    frozen; a rollback reads it as it was before the update; the older firmware's save wins back here and is frozen
    anew; a factory reset leaves nothing for either firmware."""
    from tests import durable_file_before_slots as older

    path = str(tmp_path / "settings.json")
    older.write_text(path, json.dumps({"device_name": "Before", "ledEnable": False}))
    s = make(tmp_path)
    assert s.get("device_name") == "Before"
    s.update({"device_name": "Updated"})
    s.update({"ledEnable": True})
    assert make(tmp_path).get("device_name") == "Updated" and make(tmp_path).get("ledEnable") is True
    assert older.read_text(path, json.loads) == {"device_name": "Before", "ledEnable": False}    # the rollback
    doc = older.read_text(path, json.loads)
    doc["device_name"] = "Rolled back"
    older.write_text(path, json.dumps(doc))
    s = make(tmp_path)
    assert s.get("device_name") == "Rolled back" and s.get("ledEnable") is False
    s.update({"ledEnable": True})
    assert make(tmp_path).get("ledEnable") is True
    assert older.read_text(path, json.loads) == {"device_name": "Rolled back", "ledEnable": False}
    durable_file.remove_all(path)
    assert os.listdir(tmp_path) == [] and older.read_text(path, json.loads) is None and not make(tmp_path).exists()


def test_the_checks_are_loaded_for_the_job_and_let_go_after_it(tmp_path):
    """core/settings_check.py (the schema and the rules, the larger half of the settings code) is imported for a load,
    a save or a restore and leaves sys.modules after it; the settings routes' work (services/api/settings_job.py)
    leaves with it after each request (issue 35 point 4)."""
    import sys
    from types import SimpleNamespace

    from adafruit_httpserver import Headers

    from core.bus import Bus
    from core.log import Log
    from services.api import routes_settings

    jobs = ("core.settings_check", "services.api.settings_job")
    jobs_sorted = sorted(jobs)
    saved = {n: sys.modules.pop(n) for n in jobs if n in sys.modules}
    import services.api

    held = services.api.__dict__.pop("settings_job", None)   # as unload() leaves it (a test before imported it)
    try:
        s = make(tmp_path)
        s.update({"device_name": "kitchen"})
        assert not any(n in sys.modules for n in jobs)
        assert Settings(s.path).get("device_name") == "kitchen" and "core.settings_check" not in sys.modules
        with pytest.raises(SettingsError):
            s.update({"mqtt": {"port": 0}})
        assert "core.settings_check" not in sys.modules
        app = SimpleNamespace(settings=s, bus=Bus(), log=Log(), led=None, auth=None, cloud_pairing=None)
        post = routes_settings.routes(app)[1]
        request = SimpleNamespace(body=b'{"ledEnable": false}',
                                  headers=Headers({"Content-Type": "application/json"}))
        work = post.handler(request)
        loaded = []
        for answer in work:            # the server's _work: one step a poll until the answer comes
            loaded.append(sorted(n for n in jobs if n in sys.modules))
            if answer is not None:
                break
        work.close()                   # what the server does once the answer is there
        # one import per step (each is a whole-heap collection on the device), then the job's step
        assert loaded == [["core.settings_check"], jobs_sorted, jobs_sorted] and answer._status.code == 200
        assert s.get("ledEnable") is False and not any(n in sys.modules for n in jobs)
    finally:
        sys.modules.update(saved)
        if held is not None:
            services.api.settings_job = held
