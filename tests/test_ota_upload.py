"""POST /api/v1/ota/upload: a signed release as one archive (tools.ota_manifest --archive), sent in pieces of at most
8 KB at byte offsets, streamed member by member into ota/stage; the same signature, manifest, size and SHA-256
checks and the same switch and rollback as an update over the network; a refused archive leaves nothing staged."""

import io
import json
import os
import tarfile

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import socketpool
from core.app import App
from core.bus import Bus
from core.log import Log
from core.settings import Settings as CoreSettings
from services.api.auth import Tokens
from services.api.service import HttpApi
from services.ota import routes as ota_routes
from services.ota import service as svc_mod
from services.ota.upload import ArchiveError, parse_header
from tests import test_ota_service as base
from tests.inproc import exchange, server_port, split_answer
from tests.ota_server import TEST_KEY, make_release
from tests.test_ota_service import BOOT, WRAP, run, tree
from tools.ota_manifest import make_archive, signature_hex

env = base.env   # a drive with the application and the test key in ota_keys.txt; a signed 0.2.0 in env.pub
PIECE = 8192


@pytest.fixture(autouse=True)
def no_network_check(env):
    """Uploads only: no check of the update server after the start."""
    env.svc.first_check_ms = 10 ** 8


def archive(e, key=TEST_KEY, edit=None, version="0.2.0"):
    """The upload archive of the release in e.pub (signed by key; None: no signature member); edit(members)
    may change the member list [(name, bytes)] before it is written."""
    rel = os.path.join(e.pub, version)
    manifest = open(os.path.join(e.pub, "manifest.json"), "rb").read()
    path = os.path.join(os.path.dirname(e.pub), "release.tar")
    make_archive(path, rel, manifest, signature_hex(manifest, key or TEST_KEY))
    if key is None or edit is not None:
        with tarfile.open(path) as tar:
            members = [(m.name, tar.extractfile(m).read()) for m in tar.getmembers()]
        if key is None:
            members = [m for m in members if m[0] != "manifest.json.sig"]
        if edit is not None:
            members = edit(members)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
            for name, data in members:
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        return buf.getvalue()
    with open(path, "rb") as f:
        return f.read()


def send(e, data, piece=PIECE, send_piece=None):
    """Upload data in pieces as a client does: resend from 'received' on 409, poll the service in between.
    Returns the last (status, answer)."""
    send_piece = send_piece or (lambda off, chunk: e.svc.upload_piece(off, chunk))
    offset = 0
    e.svc.poll(e.now)
    for _ in range(5000):
        status, answer = send_piece(offset, data[offset:offset + piece])
        if status == 400 or answer.get("done"):
            return status, answer
        if status == 200:
            offset = answer["received"]
            if offset >= len(data):
                return status, answer
        else:
            assert status == 409, answer
            offset = answer["received"]
        for _ in range(3):
            e.svc.poll(e.now)
            e.now = (e.now + 20) % WRAP
    raise AssertionError("upload never finished")


def nothing_staged(e):
    run(e, lambda: not e.svc._cleanup)
    assert not os.path.exists("ota/stage") and not os.path.exists("ota/journal")
    assert tree(e.drive) == e.before and e.calls == []


def test_a_good_archive_installs_like_an_update_over_the_network(env):
    e = env
    e.svc.start()
    status, answer = send(e, archive(e))
    assert status == 200 and answer["ok"] and answer["done"], answer
    run(e, lambda: e.calls and e.calls[-1][0] == "restart")
    assert e.calls == [("flush", False), ("restart", True)]
    journal = json.loads(open("ota/journal").read())
    assert journal["phase"] == "switch" and journal["to"] == "0.2.0"
    assert sorted(journal["new"]) == sorted(base.CHANGES)
    assert tree(e.drive) == e.before   # nothing live changed before boot.py's switch
    assert BOOT.update_step(BOOT.DriveFs()) == "switch"
    assert tree(e.drive) == tree(os.path.join(e.pub, "0.2.0"))
    assert e.server.requests == []     # nothing came from the network


@pytest.mark.parametrize("case,error", [
    ("unsigned", "signature"), ("wrong key", "signature"), ("tampered", "signature"),
])
def test_an_archive_without_a_good_signature_is_refused_and_nothing_stays(env, case, error):
    e = env
    e.svc.start()
    if case == "unsigned":
        data = archive(e, key=None)
    elif case == "wrong key":
        data = archive(e, key=Ed25519PrivateKey.generate())
    else:
        data = archive(e, edit=lambda ms: [(n, d.replace(b"New version", b"Neu version") if n == "manifest.json"
                                            else d) for n, d in ms])
    status, answer = send(e, data)
    assert status == 400 and answer["error"] == error and "signature" in answer["message"], answer
    d = e.svc.check_result(e.now)["data"]
    assert "signature" in d["message"] and d["state"] == "idle"
    nothing_staged(e)
    assert e.svc.upload_piece(len(data), b"x")[0] == 400    # later pieces hear the refusal


def test_a_file_larger_than_its_manifest_entry_is_refused_without_partial_staging(env):
    e = env
    e.svc.start()
    data = archive(e, edit=lambda ms: [(n, d + b"# more\n" if n == "core/version.py" else d) for n, d in ms])
    status, answer = send(e, data)
    assert status == 400 and answer["error"] == "oversized" and "core/version.py" in answer["message"]
    nothing_staged(e)


def test_a_file_whose_bytes_differ_is_refused(env):
    e = env
    e.svc.start()
    data = archive(e, edit=lambda ms: [(n, d.replace(b"0.2.0", b"0.2.1") if n == "core/version.py" else d)
                                       for n, d in ms])
    status, answer = send(e, data)
    assert status == 400 and answer["error"] == "corrupted"
    nothing_staged(e)


def test_an_archive_over_the_size_limit_is_refused(env, monkeypatch):
    e = env
    e.svc.start()
    monkeypatch.setattr(svc_mod, "MAX_UPLOAD_BYTES", 100000)
    status, answer = send(e, archive(e))
    assert status == 400 and answer["error"] == "oversized"
    nothing_staged(e)


@pytest.mark.parametrize("case", ["garbage", "files first", "missing file", "extra file", "folder entry"])
def test_malformed_archives_are_refused_without_partial_staging(env, case):
    e = env
    e.svc.start()
    if case == "garbage":
        data = os.urandom(20000)
    elif case == "files first":
        data = archive(e, edit=lambda ms: ms[2:] + ms[:2])
    elif case == "missing file":
        data = archive(e, edit=lambda ms: [m for m in ms if m[0] != "core/version.py"])
    elif case == "extra file":
        data = archive(e, edit=lambda ms: ms + [("core/not_listed.py", b"x = 1\n")])
    else:                                     # the first member turned into a folder entry (type '5')
        data = archive(e)
        head = bytearray(data[:512])
        head[156] = ord("5")
        head[148:156] = b" " * 8
        head[148:156] = b"%06o\0 " % sum(head)
        data = bytes(head) + data[512:]
    status, answer = send(e, data)
    assert status == 400 and not answer["ok"], answer
    nothing_staged(e)


def test_offsets_must_follow_on_and_a_stalled_upload_is_dropped(env):
    e = env
    e.svc.start()
    e.svc.poll(e.now)
    data = archive(e)
    assert e.svc.upload_piece(0, data[:4096])[0] == 200
    status, answer = e.svc.upload_piece(8192, data[8192:12288])
    assert status == 409 and answer["received"] == 4096
    assert e.svc.start_update()["ok"] is False           # no network install while an upload runs
    e.now = (e.now + e.svc.upload_idle_ms) % WRAP
    e.svc.poll(e.now)
    assert e.svc.last_error == "network" and "no piece" in e.svc.message
    nothing_staged(e)


def test_an_upload_is_refused_without_keys_and_below_the_running_version(env):
    e = env
    e.svc.start()
    make_release(e.pub, "0.1.0")
    status, answer = send(e, archive(e, version="0.1.0"))
    assert status == 400 and answer["error"] == "version" and "not newer" in answer["message"]
    nothing_staged(e)
    os.remove("ota_keys.txt")
    status, answer = e.svc.upload_piece(0, b"\0" * 512)
    assert status == 400 and "ota_keys.txt" in answer["message"]


def test_the_keys_file_cannot_come_in_an_archive(env):
    e = env
    e.svc.start()
    before = open("ota_keys.txt").read()
    status, answer = send(e, archive(e, edit=lambda ms: ms[:2] + [("ota_keys.txt", b"00" * 32 + b"\n")] + ms[2:]))
    assert status == 400 and "not in the manifest" in answer["message"]
    assert open("ota_keys.txt").read() == before
    nothing_staged(e)


def test_tar_header_checks():
    assert parse_header(bytes(512)) is None
    with pytest.raises(ArchiveError):
        parse_header(b"x" * 512)


def test_upload_through_the_http_route(env, tmp_path):
    """The real HTTP server: 8 KB bodies (its limit) as application/octet-stream, the WRITE token when auth is on."""
    e = env
    e.svc.start()
    app = App(Bus(), CoreSettings(str(tmp_path / "s.json"), zone_ok=lambda z: z == "UTC"), Log(echo=None))
    app.auth = Tokens(str(tmp_path / "tokens.json"))
    app.mem_free = lambda: 10 ** 6
    app.ota = e.svc
    api = HttpApi(socketpool.SocketPool(None), app, host="127.0.0.1", port=0, route_modules=[ota_routes],
                  rate_limit=100000)
    api.start()
    try:
        def post(offset, chunk):
            raw = exchange(server_port(api), b"POST /api/v1/ota/upload?offset=%d HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                           b"Content-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n"
                           % (offset, len(chunk)) + chunk, lambda: api.poll(0), wait=0.05)
            status, _h, payload = split_answer(raw)
            return status, json.loads(payload)

        bad = exchange(server_port(api), b"POST /api/v1/ota/upload?offset=x HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                       b"Content-Length: 0\r\n\r\n", lambda: api.poll(0), wait=0.05)
        assert split_answer(bad)[0] == 400
        status, answer = send(e, archive(e), send_piece=post)
        assert status == 200 and answer["done"], answer
        run(e, lambda: e.calls and e.calls[-1][0] == "restart")
        # with authentication on, a piece needs the WRITE token
        read, write = app.auth.generate(0)
        app.auth.confirm(write, 0)
        app.settings.update({"api_auth_required": True})
        for headers, code in ((b"", 401), (b"Authorization: Bearer %s\r\n" % read.encode(), 403)):
            raw = exchange(server_port(api), b"POST /api/v1/ota/upload?offset=0 HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                           + headers + b"Content-Type: application/octet-stream\r\nContent-Length: 1\r\n\r\nx",
                           lambda: api.poll(0), wait=0.05)
            assert split_answer(raw)[0] == code
    finally:
        api.stop()


def test_archive_reader_inside_micropython():
    """The tar reader on MicroPython 1.27: members split across pieces at awkward places."""
    from tools.mpvm import MicroVM

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in (("manifest.json", b"{}" * 300), ("core/a.py", b"x = 1\n"), ("web/e", b"")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    data = buf.getvalue()
    with MicroVM(packages=("core", "services")) as vm:
        out, _fuel = vm.run(
            "from services.ota.upload import ArchiveReader\n"
            "got = []\n"
            "class S:\n"
            "    def __init__(self, name, size): self.name = name; self.n = 0\n"
            "    def write(self, b): self.n += len(b)\n"
            "    def finish(self): got.append((self.name, self.n))\n"
            "    def abort(self): pass\n"
            "r = ArchiveReader(S, lambda: got.append('end'))\n"
            "D = %r\n"
            "i = 0\n"
            "for size in (1, 511, 7, 600, 100000):\n"
            "    i += r.feed(D[i:i + size])\n"
            "print(got)\n" % (data,))
    assert out.strip() == "[('manifest.json', 600), ('core/a.py', 6), ('web/e', 0), 'end']"
