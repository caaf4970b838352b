"""Issue 36 finding 1: the recovery window a short press of the button opens hands the device only to someone at the
device. The press makes a one-time code of six digits 1..9 that only the device shows (the serial console, the LED
blinking it); generate without a token must carry it, a wrong one counts and the third closes the window. A LAN
stranger polling generate from the moment of the press never gets a pair; the owner with the code does; the code is
in no answer, no log line and no describe(); the window and the code hold across the tick wrap."""

import json
import re

import neopixel
import pytest

from drivers.status_led import CODE_RGB, StatusLed, code_cycle_ms, code_lit
from services.api import routes_auth
from services.api.auth import RECOVERY_DIGITS, RECOVERY_MS, RECOVERY_TRIES, WRITE, Tokens
from tests.steppedclock import SteppedClock
from tests.test_api_guards import Api

GENERATE = "/api/v1/auth/tokens/generate"
CONFIRM = "/api/v1/auth/tokens/confirm"
JSON = {"Content-Type": "application/json"}


# --- the tokens object ---


def _tokens(tmp_path, urandom=None):
    t = Tokens(str(tmp_path / "tokens.json"), **({"urandom": urandom} if urandom else {}))
    t.load()
    t.confirm(t.generate(0)[1], 0)
    return t


def test_the_code_is_six_digits_one_to_nine_from_the_rng_uniformly(tmp_path):
    # 252..255 would make 1..4 likelier (256 = 28 * 9 + 4): they are drawn again
    feed = iter([bytes([255, 252, 0, 8, 9, 17]), bytes([253, 254, 251, 100, 7, 2])])
    t = _tokens(tmp_path)
    t._urandom = lambda n: next(feed)
    code = t.open_recovery(0)
    assert code == "1" + "9" + "1" + "9" + "9" + "2"    # 0, 8, 9, 17 -> 1 9 1 9; then 251 -> 9 (251 % 9 = 8), 100 -> 2
    t = _tokens(tmp_path)
    codes = [t.open_recovery(0) for _ in range(300)]
    assert all(len(c) == RECOVERY_DIGITS and re.fullmatch("[1-9]+", c) for c in codes)
    assert len(set(codes)) > 290                          # a new code every press
    assert set("".join(codes)) == set("123456789")


def test_the_right_code_opens_a_wrong_one_counts_and_the_third_closes(tmp_path):
    t = _tokens(tmp_path)
    assert not t.check_recovery("123456", 0)             # no window: nothing to check, nothing counted
    code = t.open_recovery(0)
    wrong = "".join("1" if c != "1" else "2" for c in code)
    assert not t.check_recovery(wrong, 10) and t.recovery_tries_left() == RECOVERY_TRIES - 1
    assert t.check_recovery(code[:3] + " " + code[3:], 20)     # as the console prints it
    assert not t.check_recovery(123456, 30)              # not text: wrong, counted
    assert t.check_recovery(code, 40) and t.recovering(40)     # the right code does not use the window up
    assert not t.check_recovery(code + "1", 50)
    assert not t.recovering(50) and t.recovery_tries_left() == 0     # the third wrong code closed it
    assert not t.check_recovery(code, 60)                # and the code is gone with it
    code2 = t.open_recovery(70)                          # a new press: a new code, three tries again
    assert t.recovery_tries_left() == RECOVERY_TRIES
    assert t.check_recovery(code2, 80)


def test_the_code_is_kept_only_as_a_digest_and_described_nowhere(tmp_path):
    t = _tokens(tmp_path)
    code = t.open_recovery(0)
    assert code not in repr(vars(t)) and code not in json.dumps(t.describe())
    assert t.describe()["recovery_open"] is True


def test_the_window_and_its_code_last_two_minutes_across_the_tick_wrap(tmp_path):
    clock = SteppedClock()                               # 5 s before the wrap
    t = _tokens(tmp_path)
    code = t.open_recovery(clock())
    clock.advance(RECOVERY_MS - 1)                       # across the wrap
    assert t.check_recovery(code, clock())
    clock.advance(1)
    assert not t.check_recovery(code, clock()) and not t.recovering(clock())
    code = t.open_recovery(clock())
    clock.advance(1 << 28)                               # long past: the stamp looks like the future
    t.poll(clock())
    clock.advance(1 << 29)                               # a whole wrap later it would look recent again
    assert not t.check_recovery(code, clock())


# --- the LED ---


def test_the_led_blinks_each_digit_as_that_many_flashes_after_a_cyan_mark():
    code = "312"
    lit = [code_lit(code, t) for t in range(0, code_cycle_ms(code), 50)]
    runs = []                                            # lengths (in 50 ms steps) of the lit stretches
    for i, on in enumerate(lit):
        if on and (i == 0 or not lit[i - 1]):
            runs.append(0)
        if on:
            runs[-1] += 1
    assert runs[0] == 40                                 # the 2 s mark
    assert len(runs) == 1 + 3 + 1 + 2 and set(runs[1:]) == {6}   # then 3, 1 and 2 flashes of 300 ms


def test_the_led_shows_the_code_above_every_state_but_a_reset_and_then_returns():
    px = neopixel.NeoPixel(None, 1, auto_write=False)
    led = StatusLed(px)
    led.set("ERROR")
    clock = SteppedClock()
    led.show_code("999999", clock(), RECOVERY_MS)
    assert led.color_at(clock()) == CODE_RGB             # the mark, across the wrap below
    led.enabled = False                                  # ledEnable off: the code is still shown
    assert led.color_at(clock()) == CODE_RGB
    led.enabled = True
    info = json.dumps(led.info()) + json.dumps(led.describe())
    assert "999999" not in info and led.info()["status"] == "ERROR" and led.describe()["showing_code"] is True
    led.set("RESET_PENDING")
    assert led.color_at(clock()) == (255, 0, 0)
    led.set("RESET_PENDING", False)
    clock.advance(RECOVERY_MS)                           # over: the states again (wrap-safe)
    assert led.color_at(clock()) != CODE_RGB and not led.showing_code(clock())
    led.show_code("999999", clock(), RECOVERY_MS)
    led.show_code(None, clock(), RECOVERY_MS)
    assert not led.showing_code(clock())


# --- the API, in-process with a stepped clock (tests/test_api_guards.py's harness) ---


class _AuthRoutes:
    def __init__(self, clock):
        self.clock = clock

    def routes(self, app):
        return routes_auth.routes(app, ticks=self.clock)


class Owner(Api):
    """The API with a confirmed pair, authentication on, a status LED, a big request budget (the race is about the
    code, not the rate limit) and every answer kept."""

    def __init__(self, tmp_path, capsys):
        Api.__init__(self, tmp_path, rate_limit=100000)
        self.capsys = capsys
        # the token routes on the test's clock too (the harness's take the real ticks_ms): a pending pair's age is
        # then measured on one clock by the routes and by the API's poll
        self.api._route_modules = [self.fake, _AuthRoutes(self.clock)]
        self.api._routes_of = 0
        self.api._routes = []
        self.api._take_routes()
        self.app.led = StatusLed(neopixel.NeoPixel(None, 1, auto_write=False))
        self.answers = []
        self.read, self.write = self.app.auth.generate(self.clock())
        self.app.auth.confirm(self.write, self.clock())
        self.app.settings.update({"api_auth_required": True})

    def raw(self, data):
        answer = Api.raw(self, data)
        self.answers.append(json.dumps([answer[0], answer[1], answer[2]]))
        return answer

    def press(self):
        """A short press; the API takes it with its next once-a-second poll. The code as the console shows it."""
        self.capsys.readouterr()
        self.app.bus.publish("event", ("button", "short"))
        self.clock.advance(1000)
        self.poll()
        out = self.capsys.readouterr().out
        m = re.search(r"recovery code (\d{3}) (\d{3})", out)
        return m.group(1) + m.group(2) if m else None

    def generate(self, code=None, body=None, token=None):
        headers = dict(JSON)
        if token:
            headers["Authorization"] = "Bearer " + token
        if body is None:
            body = b"" if code is None else json.dumps({"recoveryCode": code}).encode()
        return self.send("POST", GENERATE, headers=headers, body=body)

    def confirm(self, write):
        return self.send("POST", CONFIRM, headers=JSON, body=json.dumps({"new_write_token": write}).encode())

    def settings_status(self, token):
        return self.status("GET", "/api/v1/settings", headers={"Authorization": "Bearer " + token})


@pytest.fixture
def owner(tmp_path, capsys):
    a = Owner(tmp_path, capsys)
    yield a
    a.stop()


STRANGER_BODIES = (b"", b"{}", b'{"recoveryCode": null}', b'{"code": "123456"}')


@pytest.mark.parametrize("owner_at", [300, None], ids=["owner-comes-after-30s", "press-for-another-reason"])
def test_a_lan_stranger_polling_from_the_press_never_gets_a_pair_and_the_owner_with_the_code_does(owner, owner_at):
    owner.capsys.readouterr()
    owner.app.bus.publish("event", ("button", "short"))   # the press; the stranger asks from this very moment
    statuses = set()
    code = got = None
    for i in range(RECOVERY_MS // 100 + 20):              # once per 100 ms, past the end of the window
        status, _h, body = owner.generate(body=STRANGER_BODIES[i % len(STRANGER_BODIES)])
        statuses.add(status)
        assert status != 200, body
        if i == 15:                                       # the API took the press (its once-a-second poll)
            code = re.search(r"recovery code (\d{3}) (\d{3})", owner.capsys.readouterr().out)
            code = code.group(1) + code.group(2)
            assert owner.app.led.showing_code(owner.clock())
        if i == owner_at:                                 # 30 s in: the owner has read the code off the device
            status, _h, body = owner.generate(code)
            assert status == 200
            got = body["pending"]
            assert owner.settings_status(owner.write) == 200          # the old pair holds until the confirm
        if owner_at and i == owner_at + 10:
            assert owner.confirm(got["token_write"])[0] == 200
        owner.clock.advance(100)
        owner.poll()
    assert statuses == {401}                              # the stranger's every answer: no code, no pair
    assert not owner.app.led.showing_code(owner.clock())  # the window closed (confirm or time), and the LED with it
    if owner_at is None:                                  # nobody came: the owner's pair is untouched
        assert owner.settings_status(owner.write) == 200
        assert owner.api.counters["recovery_code_missing"] >= RECOVERY_MS // 100 - 10
        return
    assert owner.settings_status(got["token_write"]) == 200 and owner.settings_status(got["token_read"]) == 200
    assert owner.settings_status(owner.write) == 401      # the old pair went with the confirm
    assert owner.api.counters["recovery_code_missing"] >= owner_at


def test_a_stranger_who_races_before_the_owner_gets_only_401(owner):
    """The audit's sequence: the stranger asks first (2 s after the press), the owner comes later with the code."""
    code = owner.press()
    owner.clock.advance(1000)
    for body in STRANGER_BODIES:
        assert owner.generate(body=body)[0] == 401
        assert owner.confirm("0" * 64)[0] == 409           # confirm is open in the window, but nothing is pending
    status, _h, body = owner.generate(code)
    assert status == 200
    assert owner.confirm("0" * 64)[0] == 409               # a stranger guessing the pending WRITE token
    assert owner.confirm(body["pending"]["token_write"])[0] == 200


def test_three_wrong_codes_close_the_window_and_a_new_press_makes_a_new_code(owner):
    code = owner.press()
    wrong = [w for w in ("111111", "222222", "333333", "444444") if w != code][:3]
    answers = [owner.generate(w) for w in wrong[:2]]
    assert [a[0] for a in answers] == [403, 403]
    assert [a[2]["code"] for a in answers] == ["recovery_code_wrong"] * 2
    status, _h, body = owner.generate(wrong[2])
    assert status == 403 and body["code"] == "recovery_closed"
    assert "wrong recovery codes, the window is closed" in " ".join(e[2] for e in owner.app.log.entries())
    assert owner.generate(code)[0] == 401                 # the right code too late: the window is closed
    owner.clock.advance(1000)
    owner.poll()
    assert not owner.app.led.showing_code(owner.clock())  # the LED stops blinking the dead code
    code2 = owner.press()
    if code2 != code:                                     # the old code means nothing now (unless drawn again)
        assert owner.generate(code)[0] == 403
    status, _h, body = owner.generate(code2)
    assert status == 200
    assert owner.confirm(body["pending"]["token_write"])[0] == 200


def test_a_press_with_the_tokens_fine_still_needs_the_code(owner):
    """The owner pressed to flush the history or to open BLE setup: the window opens, but only with the code."""
    code = owner.press()
    assert owner.generate()[0] == 401
    assert owner.generate(body=b"{}")[0] == 401
    assert owner.status("POST", "/api/v1/system/reboot") == 401      # the window covers generate and confirm only
    assert owner.settings_status(owner.write) == 200
    # the owner with a token needs no code, in the window or not
    status, _h, body = owner.generate(token=owner.write)
    assert status == 200
    # a READ token is not enough for generate, but the code is (presence at the device)
    assert owner.generate(token=owner.read)[0] == 401
    assert owner.generate(code, token=owner.read)[0] == 200
    assert owner.settings_status(owner.write) == 200


def test_with_authentication_off_a_press_shows_no_code(owner):
    owner.app.settings.update({"api_auth_required": False})
    assert owner.press() is None
    assert not owner.app.auth.recovering(owner.clock()) and not owner.app.led.showing_code(owner.clock())


def test_the_code_is_in_no_answer_log_line_or_describe(owner):
    code = owner.press()
    owner.clock.advance(1000)
    wrong = "111111" if code != "111111" else "222222"
    owner.generate()
    owner.generate(wrong)
    owner.generate(body=b'{"recoveryCode": "' + code.encode() + b'x"}')   # wrong too, closes nothing yet
    status, _h, body = owner.generate(code)
    assert status == 200
    owner.generate(code, token=owner.write)
    owner.generate(wrong)                                 # the third wrong: closed
    kept = "\n".join(owner.answers)
    kept += json.dumps([list(e) for e in owner.app.log.entries()])
    kept += json.dumps(owner.app.auth.describe()) + json.dumps(owner.app.led.info())
    kept += json.dumps(owner.app.led.describe()) + json.dumps(owner.api.describe())
    spaced = code[:3] + " " + code[3:]
    assert code not in kept and spaced not in kept


def test_recovery_across_the_tick_wrap_through_the_api(owner):
    owner.clock.now = (1 << 29) - 60000                   # the press 60 s before the wrap
    owner.poll()
    code = owner.press()
    owner.clock.advance(RECOVERY_MS - 2000)               # across the wrap, still in the window
    owner.poll()
    assert owner.app.led.showing_code(owner.clock())
    status, _h, body = owner.generate(code)
    assert status == 200
    owner.clock.advance(2000)                             # over
    owner.poll()
    assert owner.generate(code)[0] == 401
    assert not owner.app.led.showing_code(owner.clock())
    owner.clock.advance(1 << 29)                          # a whole wrap later: nothing comes back
    owner.poll()
    assert owner.generate(code)[0] == 401


def test_a_token_confirmed_in_the_window_is_the_owners(owner):
    code = owner.press()
    _s, _h, body = owner.generate(code)
    assert owner.confirm(body["pending"]["token_write"])[0] == 200
    assert owner.app.auth.level(body["pending"]["token_write"]) == WRITE
    assert owner.generate(code)[0] == 401                 # one pair per press: the confirm closed the window


@pytest.mark.parametrize("body", [b"[1]", b'"123456"', b"7", b"{"])
def test_a_body_that_is_no_json_object_is_a_400_and_costs_no_try(owner, body):
    """Bad input in the window: a list, a string, a number or broken JSON is a clear 400, never a 500, and counts
    no wrong try (the owner's right code still works afterwards)."""
    code = owner.press()
    for _ in range(4):
        assert owner.generate(body=body)[0] == 400
    status, _h, answer = owner.generate(code)
    assert status == 200 and answer["pending"]["token_write"]
