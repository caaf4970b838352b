"""Signed releases in the OTA service (against a real local HTTP server): only a manifest signed by a key in
ota_keys.txt is offered; unsigned, wrongly signed, untrusted or tampered ones are refused and ota/check says
"signature"; no keys file refuses everything; min_version stops downgrades; and the smaller points of the audit
(issue 18): rolled-back versions, a changed ota.url, deep manifests, a trickling server, the version that runs."""

import json
import os

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import socketpool
from services.ota import service as svc_mod
from tests.ota_server import TEST_KEY, UpdateServer, keys_text, make_release, write_manifest
from tests import test_ota_service as base
from tests.test_ota_service import BOOT, Settings, checked, run, tree

env = base.env   # the same fixture: a drive with the application, a signed 0.2.0 on a local server


class Log:
    def __init__(self):
        self.lines = []

    def _add(self, level, msg, *args):
        self.lines.append((level, msg % args if args else msg))

    def info(self, msg, *args):
        self._add("info", msg, *args)

    def warning(self, msg, *args):
        self._add("warning", msg, *args)

    def error(self, msg, *args):
        self._add("error", msg, *args)

    def text(self):
        return "\n".join(m for _l, m in self.lines)


def refused(e):
    """Check once; the answer must refuse with a reason naming the signature, and nothing may be downloaded."""
    e.svc.start()
    run(e, lambda: e.svc.phase == "idle" and e.svc.last_error)
    d = e.svc.check_result(e.now)["data"]
    assert d["update_available"] is False and d["error"] == "signature" and "signature" in d["message"], d
    answer = e.svc.start_update()
    assert answer["ok"] is False
    assert [r for r in e.server.requests if not r.startswith("manifest.json")] == []
    assert tree(e.drive) == e.before and not os.path.exists("ota/journal")
    return d


def test_a_signed_release_is_offered(env):
    checked(env)
    assert env.svc.available["version"] == "0.2.0" and env.svc.last_error == ""
    assert env.server.requests[:2] == ["manifest.json", "manifest.json.sig"]


def test_an_unsigned_manifest_is_refused(env):
    write_manifest(env.pub, env.manifest, key=None)
    d = refused(env)
    assert "no signature" in d["message"]


def test_a_wrong_signature_is_refused(env):
    path = os.path.join(env.pub, "manifest.json.sig")
    sig = bytearray(bytes.fromhex(open(path).read().strip()))
    sig[5] ^= 0x10
    with open(path, "w") as f:
        f.write(sig.hex())
    refused(env)


def test_a_malformed_signature_file_is_refused(env):
    with open(os.path.join(env.pub, "manifest.json.sig"), "w") as f:
        f.write("<html>not found</html>")
    refused(env)


def test_a_signature_by_an_untrusted_key_is_refused(env):
    write_manifest(env.pub, env.manifest, key=Ed25519PrivateKey.generate())
    d = refused(env)
    assert "no trusted key" in d["message"]


def test_a_manifest_changed_after_signing_is_refused(env):
    m = dict(env.manifest, notes={"de": "x", "en": "changed after signing"})
    sig = open(os.path.join(env.pub, "manifest.json.sig")).read()
    write_manifest(env.pub, m, key=None)
    with open(os.path.join(env.pub, "manifest.json.sig"), "w") as f:
        f.write(sig)
    refused(env)


def test_a_second_trusted_key_is_accepted(env):
    other = Ed25519PrivateKey.generate()
    with open("ota_keys.txt", "w") as f:
        f.write(keys_text(TEST_KEY, other))
    write_manifest(env.pub, env.manifest, key=other)
    checked(env)
    assert env.svc.available["version"] == "0.2.0"


def test_without_a_keys_file_every_update_is_refused_before_asking_the_server(env):
    os.remove("ota_keys.txt")
    env.svc.start()
    run(env, lambda: env.svc.last_error)
    d = env.svc.check_result(env.now)["data"]
    assert d["error"] == "signature" and "ota_keys.txt" in d["message"] and "refused" in d["message"]
    assert d["update_available"] is False and env.server.requests == []
    with open("ota_keys.txt", "w") as f:
        f.write("# emptied\n")
    env.svc.request_check()
    run(env, lambda: env.svc.phase == "idle" and env.svc._check_at is None)
    assert "holds no key" in env.svc.message and env.server.requests == []


def test_a_manifest_naming_the_keys_file_is_refused_and_the_file_stays(env):
    m = json.loads(json.dumps(env.manifest))
    m["files"].append({"path": "ota_keys.txt", "size": 65, "sha256": "0" * 64})
    write_manifest(env.pub, m)
    before = open("ota_keys.txt").read()
    env.svc.start()
    run(env, lambda: env.svc.last_error)
    assert env.svc.last_error == "manifest" and "ota_keys.txt" in env.svc.message and "USB" in env.svc.message
    assert open("ota_keys.txt").read() == before


def test_a_whole_update_never_touches_the_keys_file(env):
    before = open("ota_keys.txt").read()
    checked(env)
    env.svc.start_update()
    run(env, lambda: env.calls and env.calls[-1][0] == "restart")
    assert BOOT.update_step(BOOT.DriveFs()) == "switch"
    assert "ota_keys.txt" not in json.loads(open("ota/journal").read())["files"]
    assert open("ota_keys.txt").read() == before


# ------------------------------------------------------------------ min_version

def test_a_version_below_the_installed_min_version_is_not_offered(env):
    os.makedirs("ota", exist_ok=True)
    with open("ota/floor", "w") as f:
        f.write('"0.3.0"')
    env.svc.start()
    run(env, lambda: env.svc.server_version == "0.2.0" and env.svc.phase == "idle")
    d = env.svc.check_result(env.now)["data"]
    assert d["update_available"] is False and "below 0.3.0" in d["message"]
    assert env.svc.start_update()["ok"] is False
    make_release(env.pub, "0.3.0")
    env.svc.request_check()
    run(env, lambda: env.svc.available is not None and env.svc.phase == "idle")


def new_service(env, version, log=None):
    s = svc_mod.OtaService(socketpool.SocketPool(None), Settings(**{"ota.url": env.server.url}), version, BOOT,
                           led=env.led, log=log)
    s.healthy_after_ms = 1000
    return s


def test_the_min_version_of_an_installed_release_is_kept_and_never_lowered(env):
    make_release(env.pub, "0.2.0", min_version="0.2.0")
    checked(env)
    env.svc.start_update()
    run(env, lambda: env.calls and env.calls[-1][0] == "restart")
    assert json.loads(open("ota/journal").read())["min"] == "0.2.0"
    BOOT.update_step(BOOT.DriveFs())
    new = env.svc = new_service(env, "0.2.0")
    new.start()
    run(env, lambda: new.phase == "idle" and new.trial is None)
    assert json.loads(open("ota/floor").read()) == "0.2.0" and new.floor == "0.2.0"
    new._raise_floor("0.1.0")
    assert json.loads(open("ota/floor").read()) == "0.2.0"
    # a device flashed back to 0.1.0 over USB is not offered a signed 0.1.5 (a replayed old release)
    make_release(env.pub, "0.1.5")
    old = env.svc = new_service(env, "0.1.0")
    old.first_check_ms = 0
    old.start()
    run(env, lambda: old.server_version == "0.1.5" and old.phase == "idle")
    assert old.available is None and "below 0.2.0" in old.message


# ------------------------------------------------------------------ the smaller points of the audit

def test_changing_ota_url_drops_the_old_offer_and_checks_the_new_server_at_once(env):
    checked(env)
    assert env.svc.available["version"] == "0.2.0"
    other_pub = os.path.join(os.path.dirname(env.pub), "pub2")
    os.makedirs(other_pub)
    make_release(other_pub, "0.1.0")   # the new server has nothing newer
    other = UpdateServer(other_pub)
    try:
        env.svc._settings.d["ota.url"] = other.url
        d = env.svc.check_result(env.now)["data"]
        assert d["update_available"] is False and "ota.url changed" in d["message"]
        assert env.svc.start_update()["ok"] is False
        run(env, lambda: env.svc.phase == "idle" and env.svc.server_version == "0.1.0")
        assert other.requests[:1] == ["manifest.json"] and env.svc.available is None
    finally:
        other.close()


def test_a_trickling_server_cannot_hold_a_check(env, monkeypatch):
    env.server.faults["manifest.json"] = "trickle"
    monkeypatch.setattr(base.http_get_class(), "total_ms", 5000)   # the class the service uses, not a stale import
    env.svc.start()
    run(env, lambda: env.svc.last_error, limit_s=60)
    d = env.svc.check_result(env.now)["data"]
    assert d["error"] == "network" and "took more than 5 s" in d["message"] and d["state"] == "idle"


def test_a_signed_manifest_nested_5000_deep_is_reported_not_a_fault(env):
    write_manifest(env.pub, '{"version": "0.2.0", "x": ' + "[" * 5000 + "]" * 5000 + "}")
    env.svc.start()
    run(env, lambda: env.svc.last_error)
    assert env.svc.last_error == "manifest" and "nested" in env.svc.message


def test_health_names_the_version_that_runs(env):
    """A release announced as 1.0.0 whose files say 0.1.0: the log said "1.0.0 proved healthy" while 0.1.0 ran."""
    os.makedirs("ota", exist_ok=True)
    BOOT.write_journal(BOOT.DriveFs(), {"phase": "trial", "boots": 1, "from": "0.0.9", "to": "1.0.0", "files": [],
                                        "new": []})
    log = Log()
    s = env.svc = new_service(env, "0.1.0", log=log)
    s.start()
    run(env, lambda: s.phase == "idle" and s.trial is None)
    assert "0.1.0 proved healthy" in log.text() and "1.0.0 proved healthy" not in log.text()
    assert s.message.startswith("Updated from 0.0.9 to 0.1.0") and "announced as 1.0.0" in s.message


# ------------------------------------------------------------------ the parts are let go while idle (issue 19)

def test_the_check_code_is_let_go_while_idle_and_an_install_loads_it_again(env):
    import sys

    env.svc.keep_parts = False
    checked(env)
    assert env.svc.available["version"] == "0.2.0"
    run(env, lambda: "services.ota.signature" not in sys.modules)       # idle: the next poll lets it go
    assert env.svc.counters.get("parts_released") and svc_mod.mf is None
    assert not any(n in sys.modules for n in svc_mod.PARTS)
    answer = env.svc.start_update()                                      # the offer survives without the code
    assert answer["ok"] is True, answer
    run(env, lambda: env.calls and env.calls[-1][0] == "restart")        # staged, verified, journal written
    assert json.loads(open("ota/journal").read())["to"] == "0.2.0"


def test_an_upload_after_the_parts_were_let_go_loads_them_again(env):
    import sys

    env.svc.keep_parts = False
    checked(env)
    run(env, lambda: "services.ota.upload" not in sys.modules)
    status, answer = env.svc.upload_piece(0, b"not a tar archive at all" + bytes(1000))
    assert status == 400 and answer["ok"] is False                      # refused by the freshly loaded code
    run(env, lambda: "services.ota.upload" not in sys.modules)          # and let go again


def test_the_work_methods_are_every_method_of_the_work_and_leave_with_the_parts():
    """services/ota/work.py's METHODS (what load_parts puts on OtaService) names each of OtaWork's methods, and none
    of them is on the class once the parts are released (their code leaves the heap; issue 35 point 4)."""
    import sys

    svc_mod.load_parts()
    from services.ota import work

    own = sorted(k for k, v in vars(work.OtaWork).items() if callable(v) and not k.startswith("__"))
    assert sorted(work.METHODS) == own
    assert all(getattr(svc_mod.OtaService, k) is getattr(work.OtaWork, k) for k in own)
    assert svc_mod.release_parts()
    assert not any(hasattr(svc_mod.OtaService, k) for k in own) and "services.ota.work" not in sys.modules


def test_a_due_check_brings_its_parts_in_one_per_poll(tmp_path, monkeypatch):
    """Each import costs the S3 a collection of the whole heap (bench/bench_ondemand.py): a check that is due imports
    one part per poll and starts once all are in; the parts leave again when the service is idle."""
    import sys

    monkeypatch.chdir(tmp_path)
    (tmp_path / "ota_keys.txt").write_text(keys_text())
    svc_mod.release_parts()
    s = svc_mod.OtaService(socketpool.SocketPool(None), Settings(**{"ota.url": "http://127.0.0.1:9/m.json"}),
                           "0.1.0", BOOT)
    s.start()
    assert svc_mod.mf is None and not any(n in sys.modules for n in svc_mod.PARTS)
    s.request_check()
    seen = []
    for now in range(0, 20 * 250, 250):
        s.poll(now)
        seen.append(sum(1 for n in svc_mod.PARTS if n in sys.modules))
        if s.phase != "idle":
            break
    n = len(svc_mod.LOAD_ORDER)
    assert seen == list(range(1, n + 1)) + [n] and s.phase == "checking", (seen, s.message)
    s.stop()
    svc_mod.release_parts()
    assert not any(n in sys.modules for n in svc_mod.PARTS)
