"""services/api/auth.py token logic and core/settings.py validation, on CPython and inside the MicroPython VM."""

import json
import os

import pytest

from core.json_store import read_json_file
from services.api.auth import PENDING_MS, READ, RECOVERY_MS, WRITE, TokenError, Tokens, same, sha256_hex
from tests.steppedclock import SteppedClock
from tools.mpvm import MicroVM


def test_sha256_hex_matches_hashlib():
    import hashlib

    assert sha256_hex("abc") == hashlib.sha256(b"abc").hexdigest()


def test_same_is_plain_equality():
    assert same(b"ab", b"ab") and not same(b"ab", b"ac") and not same(b"ab", b"abc") and not same(None, b"a")


def test_factory_state_has_no_tokens(tmp_path):
    t = Tokens(str(tmp_path / "tokens.json"))
    t.load()
    assert not t.configured() and t.level("anything") is None


def test_generate_confirm_rotation(tmp_path):
    clock = SteppedClock()
    path = str(tmp_path / "tokens.json")
    t = Tokens(path)
    t.load()
    r1, w1 = t.generate(clock())
    assert len(r1) == 64 and len(w1) == 64 and r1 != w1
    assert not t.configured() and t.level(w1) is None  # pending is not active
    t.confirm(w1, clock())
    assert t.level(w1) == WRITE and t.level(r1) == READ
    stored = read_json_file(path)                  # as the durable store keeps it (core/json_store.py)
    assert w1 not in json.dumps(stored) and stored["write"] == sha256_hex(w1)  # hashes only on the flash
    for name in os.listdir(str(tmp_path)):                                       # in no file the store wrote
        assert w1.encode() not in (tmp_path / name).read_bytes() and r1.encode() not in (tmp_path / name).read_bytes()
    # second rotation: old stay valid until confirm, then die
    r2, w2 = t.generate(clock())
    assert t.level(w1) == WRITE and t.level(w2) is None
    clock.advance(PENDING_MS - 1)
    t.confirm(w2, clock())
    assert t.level(w1) is None and t.level(r1) is None and t.level(w2) == WRITE and t.level(r2) == READ
    again = Tokens(path)
    again.load()
    assert again.level(w2) == WRITE and again.level(r2) == READ


def test_confirm_errors_keep_old_tokens(tmp_path):
    clock = SteppedClock()
    t = Tokens(str(tmp_path / "tokens.json"))
    _r, w = t.generate(clock())
    t.confirm(w, clock())
    with pytest.raises(TokenError) as ei:
        t.confirm(w, clock())  # nothing pending
    assert ei.value.status == 409
    r2, w2 = t.generate(clock())
    with pytest.raises(TokenError) as ei:
        t.confirm(r2, clock())  # the READ token is not the confirmation
    assert ei.value.status == 409
    with pytest.raises(TokenError) as ei:
        t.confirm("0" * 64, clock())
    assert ei.value.status == 409
    clock.advance(PENDING_MS)
    with pytest.raises(TokenError) as ei:
        t.confirm(w2, clock())  # 60 s passed
    assert ei.value.status == 410
    assert t.level(w) == WRITE and t.level(w2) is None
    with pytest.raises(TokenError) as ei:
        t.confirm(w2, clock())  # the expired pair is gone
    assert ei.value.status == 409


def test_pending_pair_does_not_come_back_after_the_tick_wrap(tmp_path):
    """Ticks wrap every 2**29 ms: a pair left unconfirmed must not become confirmable again ~6 days later."""
    clock = SteppedClock()
    t = Tokens(str(tmp_path / "tokens.json"))
    _r, w = t.generate(clock())
    clock.advance((1 << 29) - 30000)  # no poll in between: the stamp now looks 30 s in the future
    assert not t.pending(clock())
    with pytest.raises(TokenError) as ei:
        t.confirm(w, clock())
    assert ei.value.status == 410 and not t.configured()


def test_poll_drops_the_expired_pair_before_the_wrap_can_revive_it(tmp_path):
    clock = SteppedClock()
    t = Tokens(str(tmp_path / "tokens.json"))
    _r, w = t.generate(clock())
    clock.advance(PENDING_MS - 1)
    t.poll(clock())
    assert t.pending(clock())  # still valid one millisecond before the end
    clock.advance(1)
    t.poll(clock())
    assert t.describe()["pending"] is False
    for _ in range(512):  # a full period and then some, polled as the supervisor does (more coarsely)
        clock.advance(1 << 20)
        t.poll(clock())
    with pytest.raises(TokenError) as ei:
        t.confirm(w, clock())  # the age is (2**29 + 2**20 ...) mod 2**29: "fresh" if the stamp were still kept
    assert ei.value.status == 410 and not t.configured()


def test_second_generate_replaces_pending(tmp_path):
    clock = SteppedClock()
    t = Tokens(str(tmp_path / "tokens.json"))
    _r1, w1 = t.generate(clock())
    _r2, w2 = t.generate(clock())
    with pytest.raises(TokenError):
        t.confirm(w1, clock())
    t.confirm(w2, clock())
    assert t.level(w2) == WRITE


DAMAGED_TOKENS = {"bad_hashes": '{"read": "zz", "write": 5}', "zeroed": "\x00" * 200, "torn": '{"read": "ab',
                  "null": "null", "deep": "[" * 100000, "huge": '{"x": "' + "a" * 100000 + '"}'}


@pytest.mark.parametrize("kind", sorted(DAMAGED_TOKENS))
def test_an_unreadable_token_file_locks_never_opens(tmp_path, kind):
    """Findings 9/10 of issue 26: a token file that is there but unreadable (deep nesting raised RecursionError out
    of load() before) means authentication on with no token valid, never the factory state."""
    p = tmp_path / "tokens.json"
    p.write_text(DAMAGED_TOKENS[kind])
    t = Tokens(str(p))
    t.load()
    assert t.locked and t.required and t.load_error and not t.configured() and t.level("a" * 64) is None


@pytest.mark.parametrize("value", ["true", "false", 1, 0, None, [], {}, ""], ids=repr)
def test_a_required_flag_that_is_not_a_boolean_means_authentication_on(tmp_path, value):
    """Issue 36 point 7: "required": "true" (a string) read as off; with a damaged settings.json (defaults: off) that
    switched authentication off. Any value but true or false is damage, and damage fails closed; the tokens stay
    valid (their hashes are fine) and the damage is said."""
    from core.json_store import write_atomic

    path = str(tmp_path / "tokens.json")
    t = Tokens(path)
    t.load()
    r, w = t.generate(0)
    t.confirm(w, 0)
    doc = read_json_file(path)
    doc["required"] = value
    write_atomic(path, doc)
    t = Tokens(path)
    t.load()
    assert t.required is True and not t.locked and t.level(w) == WRITE and t.level(r) == READ
    assert "required" in t.load_error


@pytest.mark.parametrize("value", [True, False, "absent"])
def test_a_boolean_or_absent_required_flag_is_taken_as_it_is(tmp_path, value):
    from core.json_store import write_atomic

    path = str(tmp_path / "tokens.json")
    t = Tokens(path)
    t.load()
    t.confirm(t.generate(0)[1], 0)
    doc = read_json_file(path)
    if value == "absent":
        del doc["required"]          # as an older firmware wrote it: settings.json decides (services/api/wiring.py)
    else:
        doc["required"] = value
    write_atomic(path, doc)
    t = Tokens(path)
    t.load()
    assert t.required is (value is True) and t.load_error is None


def test_the_recovery_window_lasts_two_minutes_across_the_tick_wrap(tmp_path):
    clock = SteppedClock()                          # starts 5 s before the wrap
    p = tmp_path / "tokens.json"
    p.write_text("null")
    t = Tokens(str(p))
    t.load()
    assert not t.recovering(clock())
    t.open_recovery(clock())
    clock.advance(RECOVERY_MS - 1)                  # across the wrap
    assert t.recovering(clock())
    clock.advance(1)
    assert not t.recovering(clock())
    t.open_recovery(clock())
    clock.advance(1 << 28)                          # long past: the stamp looks like the future
    t.poll(clock())
    clock.advance(1 << 29)                          # a whole wrap later it would look recent again: dropped already
    assert not t.recovering(clock())


def test_a_pair_confirmed_in_the_window_unlocks_and_stays_on(tmp_path):
    clock = SteppedClock()
    p = tmp_path / "tokens.json"
    p.write_text("[" * 50000)
    t = Tokens(str(p))
    t.load()
    t.open_recovery(clock())
    _r, w = t.generate(clock())
    t.confirm(w, clock())
    assert not t.locked and t.required and t.level(w) == WRITE and not t.recovering(clock())
    t2 = Tokens(str(p))
    t2.load()
    assert t2.required and t2.level(w) == WRITE


def test_tokens_come_from_urandom(tmp_path):
    calls = []

    def rnd(n):
        calls.append(n)
        return os.urandom(n)

    t = Tokens(str(tmp_path / "t.json"), urandom=rnd)
    t.generate(0)
    assert calls == [32, 32]


VM_CODE = r"""
import os
from services.api.auth import Tokens, sha256_hex, same, READ, WRITE, TokenError
t = Tokens("/nowhere/tokens.json", urandom=lambda n: bytes(range(n)))
t.load()
print("configured", t.configured())
r, w = t.generate(1000)
print("lens", len(r), len(w))
try:
    t.confirm("x", 1000)
except TokenError as e:
    print("wrong", e.status)
try:
    t.confirm(w, 1000 + 60000)
except TokenError as e:
    print("late", e.status)
print("hash", sha256_hex("abc"))
from core.settings import Settings, SettingsError
s = Settings(None, zone_ok=lambda z: z == "Europe/Berlin")
bad = [{"device_name": "x" * 32}, {"mqtt": {"port": 0}}, {"ctRatio": 1.25}, {"ledEnable": 1},
       {"wifi": {"primary": {"static_ip": True}}}, {"timezone": "Mars/X"}, {"medianFilterSize": 4},
       {"accessPoint": {"password": "short"}}, {"language": {"active": "fr"}}, {"nope": 1},
       {"wifi": {"primary": {"subnet": "255.0.255.0"}}}]
for b in bad:
    try:
        s.update(b)
        print("accepted", b)
    except SettingsError as e:
        print("rejected", sorted(e.fields))
print("changed", s.update({"ctRatio": 2.5, "medianFilterSize": 0, "device_name": "Keller",
                           "wifi": {"primary": {"static_ip": True, "ip": "10.0.0.2", "subnet": "255.255.255.0",
                                                "gateway": "10.0.0.1"}}}))
print("ct", s.get("ctRatio"), "pub", "password" in s.public()["wifi"]["primary"])
"""


def test_token_and_settings_logic_in_micropython_vm():
    with MicroVM(packages=("core", "services")) as vm:
        out, _fuel = vm.run(VM_CODE)
    lines = out.strip().splitlines()
    assert lines[0] == "configured False"
    assert lines[1] == "lens 64 64"
    assert lines[2] == "wrong 409"
    assert lines[3] == "late 410"
    assert lines[4] == "hash " + sha256_hex("abc")
    rejected = [ln for ln in lines if ln.startswith("rejected")]
    assert len(rejected) == 11, out
    assert "rejected ['wifi.primary.gateway', 'wifi.primary.ip', 'wifi.primary.subnet']" in lines
    changed = [ln for ln in lines if ln.startswith("changed")][0]
    for key in ("ctRatio", "medianFilterSize", "device_name", "wifi.primary.static_ip", "wifi.primary.ip"):
        assert key in changed
    assert lines[-1] == "ct 2.5 pub False"
