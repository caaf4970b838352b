"""The OTA service in-process against a real local HTTP server (127.0.0.1) on the socketpool stand-in: check, stage,
journal, restart, health; every bad download leaves the running files untouched, says why and retries; nightly."""

import hashlib
import json
import os
import runpy
import shutil
import time
import types

import pytest
from aio_wattwaechter.models import _parse_ota_check

import socketpool
from drivers.status_led import StatusLed
from services.ota import service as svc_mod
from tests.ota_server import ROOT, UpdateServer, keys_text, make_release, write_manifest
from tools.ota_manifest import app_files

# its polls run simulated time 20x faster than the update server thread answers in real time: a busy second
# worker starved that thread past the 1 s (simulated) receive deadline
pytestmark = pytest.mark.alone

BOOT = types.SimpleNamespace(**runpy.run_path(os.path.join(ROOT, "boot.py"), run_name="boot_ns"))
WRAP = 1 << 29
CHANGES = {"services/ota/added_in_020.py": '"""New in 0.2.0."""\n', "core/a_new_module.py": "X = 1\n"}


class Settings:
    def __init__(self, **kw):
        self.d = {"autoOta": True}
        self.d.update(kw)

    def get(self, key, default=None):
        return self.d.get(key, default)


class Pixels(list):
    def __init__(self):
        list.__init__(self, [(0, 0, 0)])

    def show(self):
        pass


def tree(folder):
    """{path: sha256} of the application files in folder."""
    out = {}
    for rel in app_files(folder):
        with open(os.path.join(folder, rel), "rb") as f:
            out[rel] = hashlib.sha256(f.read()).hexdigest()
    return out


def http_get_class():
    """The HttpGet class the service will use: an earlier test may have let the parts go and imported them anew, so
    a class imported at the top of a test file can be a stale copy whose tuning the service never sees."""
    svc_mod.load_parts()
    return svc_mod.hg.HttpGet


@pytest.fixture
def env(tmp_path, monkeypatch):
    drive = tmp_path / "drive"
    drive.mkdir()
    shutil.copy(os.path.join(ROOT, "code.py"), drive / "code.py")
    for d in ("core", "drivers", "meter", "services", "web"):  # every application folder an update may change
        shutil.copytree(os.path.join(ROOT, d), drive / d, ignore=shutil.ignore_patterns("__pycache__"))
    (drive / "settings.json").write_text('{"device_name": "kept"}')
    (drive / "history.bin").write_bytes(b"HIST" * 100)
    (drive / "ota_keys.txt").write_text(keys_text())   # beside boot.py: the test release key is trusted
    pub = tmp_path / "pub"
    pub.mkdir()
    manifest = make_release(str(pub), "0.2.0", changes=CHANGES)
    server = UpdateServer(str(pub))
    monkeypatch.chdir(drive)
    monkeypatch.setattr(http_get_class(), "stall_ms", 1500)   # undone after the test
    calls = []
    led = StatusLed(Pixels())
    s = svc_mod.OtaService(socketpool.SocketPool(None), Settings(**{"ota.url": server.url}), "0.1.0", BOOT, led=led,
                           flush=lambda reason: calls.append(("flush", os.path.exists("ota/journal"))),
                           restart=lambda reason: calls.append(("restart", os.path.exists("ota/journal"))),
                           log=None)
    s.first_check_ms = 0
    s.keep_parts = True   # the tuned class above must stay the one the service uses
    e = types.SimpleNamespace(svc=s, server=server, pub=str(pub), drive=str(drive), manifest=manifest, calls=calls,
                              led=led, now=WRAP - 3000, before=tree(str(drive)))
    yield e
    server.close()


def run(e, until, limit_s=20, step_ms=20):
    """Poll the service (ticks across the wrap) until until() is true."""
    deadline = time.monotonic() + limit_s
    while not until():
        assert time.monotonic() < deadline, "timed out: %r" % e.svc.check_result(e.now)["data"]
        e.svc.poll(e.now)
        e.now = (e.now + step_ms) % WRAP
        time.sleep(0.001)


def checked(e):
    e.svc.start()
    run(e, lambda: e.svc.phase == "idle" and e.svc._checked_at is not None and e.svc._req is None
        and e.svc.server_version)


def test_check_and_install_stage_only_changed_files_then_boot_switches(env):
    e = env
    checked(e)
    parsed = _parse_ota_check(e.svc.check_result(e.now))
    assert parsed.ok and parsed.data.update_available and parsed.data.version == "0.2.0"
    assert parsed.data.tag == "v0.2.0" and parsed.data.release_note_en == "New version"
    assert parsed.data.release_date == "2026-11-30"
    answer = e.svc.start_update()
    assert answer["ok"] is True and answer["update_available"] is True
    assert answer["code"] == "installing" and answer["version"] == "0.2.0"      # stable, for clients to translate
    assert e.svc.start_update()["code"] == "already_running"
    assert e.led.current() == "OTA_ACTIVE"
    run(e, lambda: e.calls and e.calls[-1][0] == "restart")
    assert e.calls == [("flush", False), ("restart", True)]   # flushed before the journal, restart after it
    journal = json.loads(open("ota/journal").read())
    assert journal["phase"] == "switch" and journal["to"] == "0.2.0"
    assert sorted(journal["files"]) == sorted(["core/version.py"] + list(CHANGES))
    assert sorted(journal["new"]) == sorted(CHANGES)
    assert tree(e.drive) == e.before            # nothing live changed before the restart
    # boot.py's share, then the new version proves itself
    assert BOOT.update_step(BOOT.DriveFs()) == "switch"
    assert tree(e.drive) == tree(os.path.join(e.pub, "0.2.0"))
    assert open("settings.json").read() == '{"device_name": "kept"}' and open("history.bin", "rb").read()[:4] == b"HIST"
    new = svc_mod.OtaService(socketpool.SocketPool(None), Settings(**{"ota.url": e.server.url}), "0.2.0", BOOT,
                             led=e.led, log=None)
    new.healthy_after_ms = 1000
    new.start()
    assert new.phase == "trial"
    e.svc = new
    run(e, lambda: new.phase == "idle" and not new._cleanup)
    assert not os.path.exists("ota/journal") and not os.path.exists("ota/prev")
    assert e.led.current() != "OTA_ACTIVE"
    assert "Updated from 0.1.0 to 0.2.0" in new.message
    # The next check (a minute later, or the nightly one) finds nothing newer and still says what happened.
    new.request_check()
    run(e, lambda: new.phase == "idle" and new._checked_at is not None and new._req is None and new.server_version)
    assert new.message == "Updated from 0.1.0 to 0.2.0. Up to date (0.2.0; the server offers 0.2.0)"


@pytest.mark.parametrize("fault,reason", [
    ("corrupt", "corrupted"), ("truncate", "truncated"), ("oversize", "oversized"), ("stall", "network"),
    ("404", "http"),
])
def test_a_bad_download_leaves_the_running_version_untouched_and_retries(env, fault, reason):
    e = env
    checked(e)
    e.server.faults["0.2.0/core/version.py"] = fault
    e.svc.start_update()
    run(e, lambda: e.svc.phase == "idle" and e.svc.last_error)
    d = e.svc.check_result(e.now)["data"]
    assert d["error"] == reason and "core/version.py" in d["message"] and "retrying" in d["message"]
    assert tree(e.drive) == e.before
    assert not os.path.exists("ota/journal") and not os.path.exists("ota/stage/core/version.py")
    assert e.calls == [] and e.led.current() != "OTA_ACTIVE"
    # retried later: after retry_ms it asks the server again and, with the fault gone, installs
    e.server.faults.clear()
    n = len(e.server.requests)
    e.now = (e.now + e.svc.retry_ms) % WRAP
    run(e, lambda: e.calls and e.calls[-1][0] == "restart")
    assert len(e.server.requests) > n and e.server.requests[n] == "manifest.json"


def test_a_manifest_with_a_wrong_hash_is_caught_while_streaming(env):
    e = env
    m = dict(e.manifest)
    m["files"] = [dict(f, sha256="0" * 64) if f["path"] == "core/version.py" else f for f in m["files"]]
    write_manifest(e.pub, m)
    checked(e)
    e.svc.start_update()
    run(e, lambda: e.svc.phase == "idle" and e.svc.last_error)
    assert e.svc.last_error == "corrupted" and "SHA-256" in e.svc.message
    assert tree(e.drive) == e.before and not os.path.exists("ota/journal")


def test_a_full_drive_stops_before_downloading(env, monkeypatch):
    e = env
    real = os.statvfs

    def tiny(path):
        st = real(path)
        return os.statvfs_result((st.f_bsize, st.f_frsize, st.f_blocks, 2, 2, st.f_files, st.f_ffree, st.f_favail,
                                  st.f_flag, st.f_namemax))

    monkeypatch.setattr(os, "statvfs", tiny)
    checked(e)
    e.svc.start_update()
    run(e, lambda: e.svc.phase == "idle" and e.svc.last_error)
    assert e.svc.last_error == "drive_full" and "space" in e.svc.message
    assert [r for r in e.server.requests if not r.startswith("manifest.json")] == []
    assert tree(e.drive) == e.before


@pytest.mark.parametrize("manifest_text,needle", [
    ("{not json", "not JSON"),
    (json.dumps({"version": "0.2.0", "files": [{"path": "boot.py", "size": 1, "sha256": "0" * 64}]}), "anchor"),
])
def test_a_bad_manifest_is_reported(env, manifest_text, needle):
    e = env
    write_manifest(e.pub, manifest_text)   # signed: the signature is checked before the manifest is read
    e.svc.start()
    run(e, lambda: e.svc.last_error)
    d = e.svc.check_result(e.now)["data"]
    assert d["update_available"] is False and d["error"] == "manifest" and needle in d["message"]
    assert e.svc.start_update()["ok"] is False


def test_same_version_is_up_to_date_and_start_says_no(env):
    e = env
    make_release(e.pub, "0.1.0")
    checked(e)
    d = _parse_ota_check(e.svc.check_result(e.now)).data
    assert d.update_available is False and d.version == "0.1.0"
    answer = e.svc.start_update()
    assert answer["ok"] is False and answer["update_available"] is False
    assert answer["code"] == "no_update" and answer["version"] == ""


def test_without_the_app_on_the_drive_nothing_is_installed(env):
    e = env
    os.remove("code.py")
    checked(e)
    answer = e.svc.start_update()
    assert answer["ok"] is False and "not on the drive" in answer["message"] and answer["code"] == "no_app"


class NightClock:
    """A synced clock whose UTC time the test sets; local time is UTC+1 (Berlin winter)."""

    synced = True

    def __init__(self, utc):
        self.utc = utc

    def time(self):
        return self.utc

    def local(self, utc):
        return utc + 3600


@pytest.mark.parametrize("auto", [True, False])
def test_nightly_check_at_the_random_minute_installs_only_with_auto_ota(env, auto):
    e = env
    day0 = 1_795_000_000 // 86400 * 86400        # a UTC midnight
    clock = NightClock(day0 + 12 * 3600)         # noon: outside the window
    e.svc._clock = clock
    e.svc._settings.d["autoOta"] = auto
    e.svc._rand = lambda n: 37                   # 01:37 local
    e.svc.first_check_ms = 10 ** 8               # no start-up check: only the night
    e.svc.start()
    for _ in range(20):
        e.svc.poll(e.now)
    assert e.server.requests == []
    clock.utc = day0 + 86400 + 96 * 60 - 3600 + 30   # 01:36:30 local: one minute early
    e.svc.poll(e.now)
    assert e.svc.phase == "idle" and e.server.requests == []
    clock.utc += 60                                   # 01:37:30 local
    if auto:
        run(e, lambda: e.calls and e.calls[-1][0] == "restart")
    else:
        run(e, lambda: e.svc.available is not None and e.svc.phase == "idle")
        for _ in range(50):
            e.svc.poll(e.now)
        assert e.calls == [] and tree(e.drive) == e.before
        assert e.svc.check_result(e.now)["data"]["update_available"] is True
    # once per night
    n = len(e.server.requests)
    e.svc.phase = "idle"
    clock.utc += 600
    e.svc.poll(e.now)
    assert len(e.server.requests) == n


def test_a_rolled_back_version_is_never_offered_again_until_a_newer_one_appears(env):
    """Audit: after a rollback ota/check still offered the version and a plain ota/start installed it again."""
    e = env
    os.makedirs("ota", exist_ok=True)
    with open("ota/result", "w") as f:
        f.write(json.dumps({"event": "rolled_back", "version": "0.2.0", "back_to": "0.1.0", "boots": 3}))
    with open("ota/bad", "w") as f:
        f.write('["0.2.0"]')
    e.svc.start()
    assert "rolled back" in e.svc.message and not os.path.exists("ota/result")
    e.svc.request_check(install=True, auto=True)
    run(e, lambda: e.svc.server_version == "0.2.0" and e.svc.phase == "idle")
    for _ in range(50):
        e.svc.poll(e.now)
    d = e.svc.check_result(e.now)["data"]
    assert d["update_available"] is False and d["rolled_back"] == ["0.2.0"] and "not offered again" in d["message"]
    answer = e.svc.start_update()
    assert answer["ok"] is False and answer["update_available"] is False
    run(e, lambda: e.svc.phase == "idle" and e.svc._check_at is None and e.svc._req is None)  # the check it asked for
    assert e.calls == [] and e.svc.available is None
    # a newer version is offered as usual
    make_release(e.pub, "0.3.0")
    e.svc.request_check()
    run(e, lambda: e.svc.available is not None and e.svc.phase == "idle")
    assert e.svc.check_result(e.now)["data"]["version"] == "0.3.0"


def test_the_default_placeholder_url_asks_no_dns_server(env, monkeypatch):
    e = env
    asked = []
    monkeypatch.setattr(socketpool.SocketPool, "getaddrinfo", lambda self, *a, **k: asked.append(a) or [])
    from core.settings import DEFAULTS

    e.svc._settings.d["ota.url"] = DEFAULTS["ota"]["url"]
    e.svc.start()
    run(e, lambda: e.svc.message)
    assert asked == [] and e.svc.last_error == "" and "placeholder" in e.svc.message and e.svc.state == "OK"
    # and the HTTP client itself refuses the reserved name without asking DNS
    req = http_get_class()(socketpool.SocketPool(None), DEFAULTS["ota"]["url"], None, bytearray(16))
    req._sink = type("S", (), {"abort": lambda self: None})()
    while req.poll(0):
        pass
    assert asked == [] and req.error.reason == "network" and "placeholder" in req.error.message


@pytest.mark.parametrize("age_ms,stale", [(0, False), (599_999, False), (600_000, True), ((1 << 28) + 5, True),
                                          ((1 << 29) - 10, True)])
def test_a_check_older_than_ticks_can_tell_counts_as_stale(env, age_ms, stale):
    """ticks wrap every 2**29 ms; a last check 3.1+ days ago must not look like one in the future."""
    e = env
    e.svc._checked_at = (e.now - age_ms) % WRAP
    e.svc._check_at = None
    e.svc.check_result(e.now)
    assert (e.svc._check_at is not None) is stale


def test_https_manifest_and_files_with_the_ssl_context(env, tmp_path):
    """An https:// update source: the TLS handshake is the bounded connect step, the rest streams as over http."""
    from tests.mqtt_peers import device_ssl, make_ca

    e = env
    certs = make_ca(str(tmp_path / "ca"))
    pem = open(certs["ca.crt"]).read()
    tls = UpdateServer(e.pub, tls_certs=certs)

    def factory():
        ctx = device_ssl().create_default_context()
        ctx.load_verify_locations(cadata=pem)
        return ctx

    try:
        e.svc._settings.d["ota.url"] = tls.url
        e.svc._ssl_factory = factory
        checked(e)
        assert e.svc.available["version"] == "0.2.0"
        e.svc.start_update()
        run(e, lambda: e.calls and e.calls[-1][0] == "restart")
        assert "0.2.0/core/version.py" in tls.requests
        # without the CA the handshake fails: reported, nothing changes
        e.svc._ssl_factory = lambda: device_ssl().create_default_context()
        e.svc.phase = "idle"
        e.svc.request_check()
        run(e, lambda: e.svc.phase == "idle" and e.svc.last_error)
        assert e.svc.last_error == "network" and "connect" in e.svc.message
    finally:
        tls.close()


class _Sink:
    def __init__(self):
        self.aborted = False

    def write(self, chunk):
        raise AssertionError("no body from a black hole")

    def finish(self):
        raise AssertionError("no body from a black hole")

    def abort(self):
        self.aborted = True


def test_a_black_holed_update_server_never_blocks_a_poll():
    """A server whose SYNs are dropped: the connect is stepped per poll and times out after 10 s, across the tick
    wrap, instead of one blocking connect (the old settimeout(2) + connect held the loop for 2 s)."""
    from adafruit_ticks import ticks_add, ticks_diff

    from services.ota.http_get import CONNECTING, FAILED
    from tests.mqtt_peers import full_backlog_listener

    port, held = full_backlog_listener()
    try:
        before = socketpool.open_count()
        sink = _Sink()
        url = "http://127.0.0.1:%d/manifest.json" % port
        req = http_get_class()(socketpool.SocketPool(None), url, sink, bytearray(64))
        now = ticks_add(0, -3000)                       # 3 s before the wrap
        start = now
        assert req.poll(now) and req.state == CONNECTING
        assert socketpool.open_count() == before + 1    # not waiting on it
        while req.poll(now):
            assert req.state == CONNECTING
            now = ticks_add(now, 250)
        assert ticks_diff(now, start) >= 10000 and now < start
        assert req.state == FAILED and req.error.reason == "network" and "timed out after 10 s" in req.error.message
        assert sink.aborted and socketpool.open_count() == before
    finally:
        for sock in held:
            sock.close()


def test_a_long_check_is_fresh_from_its_end_so_the_offer_can_be_installed(env):
    # A check longer than stale_ms (slow server, the signature's polls on a loaded device): the GET ota/check that
    # shows its offer must not start another check, or the ota/start right after it is refused "Busy: checking".
    checked(env)
    env.svc.stale_ms = 200          # far less than the check took (its ~90 signature polls at 20 ms each)
    assert env.svc.check_result(env.now)["data"]["update_available"] is True
    env.svc.poll(env.now)
    assert env.svc.phase == "idle"
    answer = env.svc.start_update()
    assert answer["ok"] is True, answer


def test_checks_run_at_most_once_per_5_minutes_whoever_asks_across_the_wrap(env, monkeypatch):
    """Issue 26 finding 11: every POST /ota/start without an offer (and every GET once stale, every ota.url change)
    started a check, each a full signature check. Now one per 5 minutes; the API answers the cached result with its
    age and when the next check may run. The test's ticks start 3 s before the wrap."""
    e = env
    make_release(e.pub, "0.1.0")                                # nothing newer: start asks for a check each time
    checked(e)
    starts = []
    start = e.svc._start_check
    monkeypatch.setattr(e.svc, "_start_check", lambda now: (starts.append(now), start(now))[1])
    for _ in range(40):                                         # 4 min 40 s of askers, 7 s apart
        assert e.svc.start_update()["code"] == "no_update"
        e.svc.check_result(e.now)
        for _ in range(7):
            e.now = (e.now + 1000) % WRAP
            e.svc.poll(e.now)
    assert starts == [] and e.svc.describe()["checks_deferred"] >= 1
    d = e.svc.check_result(e.now)["data"]
    assert 275 <= d["checked_age_s"] <= 300 and 0 < d["next_check_in_s"] <= 25, d
    for _ in range(30):                                         # past the 5 minutes: exactly one more check
        e.now = (e.now + 1000) % WRAP
        e.svc.poll(e.now)
    assert len(starts) == 1
    run(e, lambda: e.svc.phase == "idle" and e.svc._req is None)
    for _ in range(60):                                         # asked on: the next one waits again
        e.svc.start_update()
        e.now = (e.now + 1000) % WRAP
        e.svc.poll(e.now)
    assert len(starts) == 1 and e.svc.check_result(e.now)["data"]["next_check_in_s"] > 0


@pytest.mark.parametrize("expires_in_s,synced,offered", [(-1, True, False), (0, True, False), (3600, True, True),
                                                         (-86400, False, True)])
def test_an_expired_manifest_is_refused_with_a_clear_state(env, expires_in_s, synced, offered):
    """Issue 26 finding 11: an optional signed expiry; an expired manifest (a server replaying an old one) is refused
    while the clock is synced; without a synced clock it cannot be told and passes."""
    e = env
    now_utc = 1_800_000_000
    e.manifest["expires"] = now_utc + expires_in_s
    write_manifest(e.pub, e.manifest)                          # signed with the expiry inside
    clock = NightClock(now_utc)
    clock.synced = synced
    e.svc._clock = clock
    e.svc.start()
    run(e, lambda: e.svc.phase == "idle" and e.svc._checked_at is not None and e.svc._req is None
        and (e.svc.server_version or e.svc.last_error))
    d = e.svc.check_result(e.now)["data"]
    assert d["update_available"] is offered, d
    if not offered:
        assert d["error"] == "expired" and "expired at 2027-01-15 0" in d["message"]
        assert e.svc.start_update()["ok"] is False


def test_the_signature_covers_the_expiry(env):
    e = env
    e.manifest["expires"] = 1_800_000_000 - 1
    write_manifest(e.pub, e.manifest)
    with open(os.path.join(e.pub, "manifest.json")) as f:
        text = f.read()
    with open(os.path.join(e.pub, "manifest.json"), "w") as f:
        f.write(text.replace(str(1_800_000_000 - 1), str(1_900_000_000 - 1)))   # moved on the way: not re-signed
    e.svc._clock = NightClock(1_800_000_000)
    e.svc.start()
    run(e, lambda: e.svc.phase == "idle" and e.svc._req is None and e.svc.last_error)
    d = e.svc.check_result(e.now)["data"]
    assert d["error"] == "signature" and d["update_available"] is False


@pytest.mark.parametrize("url,configured", [("", False), ("https://updates.example.invalid/meterplus/", False),
                                            ("http://updates.example.invalid:8080/x/", False),
                                            ("https://updates.example.org/meterplus/", True)])
def test_check_result_says_whether_a_server_is_configured(env, url, configured):
    """Issue 28 point 3: the page says "no update server configured" instead of "no update available"."""
    env.svc._settings.d["ota.url"] = url
    assert env.svc.check_result(env.now)["data"]["server_configured"] is configured
