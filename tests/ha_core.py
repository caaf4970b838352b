"""A real Home Assistant Core (2025.4.4, the venv tools/ha_core_env.sh builds) run headless for the tests: its own
config folder, http on a free 127.0.0.1 port, the recorder on sqlite, an admin user with a long-lived token written
into .storage/auth before the start, MQTT set up through the config flow over the REST API as an owner does."""

import asyncio
import base64
import hashlib
import hmac
import json
import os
import secrets
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request

from tests.hostproc import free_port, wait_until

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV_SCRIPT = os.path.join(ROOT, "tools", "ha_core_env.sh")
PROBE = os.path.join(ROOT, "tests", "ha_core_config", "custom_components")   # copied into each config folder
HA_VERSION = "2025.4.4"


def ha_venv():
    """The Home Assistant venv: built by tools/ha_core_env.sh (.ci/run calls it; cached, so a second call costs
    nothing). A failure to build it is the test's failure, never a skip."""
    run = subprocess.run(["bash", ENV_SCRIPT], capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError("tools/ha_core_env.sh failed (%d):\n%s" % (run.returncode, run.stderr[-4000:]))
    return run.stdout.strip().splitlines()[-1]


def _b64(raw):
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def jwt_hs256(claims, key):
    """The access token Home Assistant checks (auth/jwt_wrapper: HS256 over the refresh token's jwt_key)."""
    head = _b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    body = _b64(json.dumps(claims).encode())
    sig = hmac.new(key.encode(), ("%s.%s" % (head, body)).encode(), hashlib.sha256).digest()
    return "%s.%s.%s" % (head, body, _b64(sig))


class HaCore:
    """hass -c <folder> --skip-pip (every requirement is in the venv already: a start never reaches PyPI)."""

    def __init__(self, folder, venv):
        self.folder = str(folder)
        self.venv = venv
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.proc = None
        self._log = None
        self.log_path = os.path.join(self.folder, "hass.out")
        os.makedirs(os.path.join(self.folder, ".storage"), exist_ok=True)
        shutil.copytree(PROBE, os.path.join(self.folder, "custom_components"), dirs_exist_ok=True)
        with open(os.path.join(self.folder, "configuration.yaml"), "w") as f:
            f.write("\n".join([
                "homeassistant:",
                "  name: Test",
                "  latitude: 52.52",
                "  longitude: 13.40",
                "  elevation: 34",
                "  unit_system: metric",
                "  time_zone: UTC",
                "  country: DE",
                "  currency: EUR",
                "http:",
                "  server_host: 127.0.0.1",
                "  server_port: %d" % self.port,
                "recorder:",
                "  db_url: sqlite:///%s/home-assistant_v2.db" % self.folder,
                "  commit_interval: 0",
                "api:",
                "history:",
                "meterplus_probe:",
                "logger:",
                "  default: warning",
                "  logs:",
                "    homeassistant.components.mqtt: debug",
                "",
            ]))
        self.token = self._write_auth()

    def _write_auth(self):
        """An owner (system-admin group) with one long-lived refresh token; returns an access token for it."""
        user_id, rt_id, jwt_key = secrets.token_hex(16), secrets.token_hex(16), secrets.token_hex(64)
        now = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())
        doc = {"version": 1, "minor_version": 1, "key": "auth", "data": {
            "users": [{"id": user_id, "group_ids": ["system-admin"], "is_owner": True, "is_active": True,
                       "name": "Test", "system_generated": False, "local_only": False}],
            "groups": [{"id": "system-admin", "name": "Administrators"},
                       {"id": "system-users", "name": "Users"},
                       {"id": "system-read-only", "name": "Read Only"}],
            "credentials": [],
            "refresh_tokens": [{"id": rt_id, "user_id": user_id, "client_id": None, "client_name": "meterplus-test",
                                "client_icon": None, "token_type": "long_lived_access_token", "created_at": now,
                                "access_token_expiration": 315360000.0, "token": secrets.token_hex(64),
                                "jwt_key": jwt_key, "last_used_at": None, "last_used_ip": None,
                                "expire_at": None, "credential_id": None, "version": HA_VERSION}],
        }}
        with open(os.path.join(self.folder, ".storage", "auth"), "w") as f:
            json.dump(doc, f)
        t = int(time.time())
        return jwt_hs256({"iss": rt_id, "iat": t - 60, "exp": t + 86400}, jwt_key)

    # ------------------------------------------------------------------ process

    def start(self, timeout=240):
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([os.path.join(self.venv, "bin", "hass"), "-c", self.folder, "--skip-pip"],
                                     stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("hass exited with %s:\n%s" % (self.proc.returncode, self.log()[-6000:]))
            try:
                if self.rest("GET", "/api/config")[1].get("state") == "RUNNING":
                    return self
            except (OSError, ValueError, AttributeError):
                pass
            time.sleep(0.5)
        raise RuntimeError("hass did not start within %s s:\n%s" % (timeout, self.log()[-6000:]))

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    def log(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    # ------------------------------------------------------------------ APIs

    def rest(self, method, path, doc=None, timeout=30):
        """(status, parsed JSON) of one REST call with the owner's token."""
        req = urllib.request.Request(self.url + path, method=method,
                                     data=None if doc is None else json.dumps(doc).encode(),
                                     headers={"Authorization": "Bearer " + self.token,
                                              "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                body = r.read()
                return r.status, json.loads(body) if body else None
        except urllib.error.HTTPError as e:
            body = e.read()
            try:
                return e.code, json.loads(body)
            except ValueError:
                return e.code, body.decode("utf-8", "replace")

    def ws(self, *commands):
        """Results of websocket commands (dicts without id), in order; raises on an unsuccessful one."""
        import aiohttp

        async def talk():
            async with aiohttp.ClientSession() as s, s.ws_connect(self.url + "/api/websocket") as w:
                assert (await w.receive_json())["type"] == "auth_required"
                await w.send_json({"type": "auth", "access_token": self.token})
                hello = await w.receive_json()
                if hello["type"] != "auth_ok":
                    raise RuntimeError("websocket auth: %r" % hello)
                out = []
                for i, cmd in enumerate(commands, 1):
                    await w.send_json(dict(cmd, id=i))
                    while True:
                        msg = await w.receive_json(timeout=60)
                        if msg.get("id") == i and msg["type"] == "result":
                            break
                    if not msg["success"]:
                        raise RuntimeError("websocket %r: %r" % (cmd, msg.get("error")))
                    out.append(msg["result"])
                return out

        return asyncio.run(talk())

    def add_mqtt(self, broker_port):
        """The MQTT integration through its config flow (as the UI does it): broker 127.0.0.1:broker_port."""
        code, flow = self.rest("POST", "/api/config/config_entries/flow", {"handler": "mqtt"})
        assert code == 200, (code, flow)
        for _ in range(3):
            if flow.get("type") == "create_entry":
                break
            assert flow.get("type") == "form", flow
            code, flow = self.rest("POST", "/api/config/config_entries/flow/" + flow["flow_id"],
                                   {"broker": "127.0.0.1", "port": broker_port})
            assert code == 200, (code, flow)
        assert flow.get("type") == "create_entry", flow
        self.wait_for(lambda: any(e["domain"] == "mqtt" and e["state"] == "loaded"
                                  for e in self.rest("GET", "/api/config/config_entries/entry")[1]))
        return flow["result"]["entry_id"]

    def wait_for(self, predicate, timeout=60, interval=0.5):
        """Poll predicate() until it returns something truthy; return it."""
        return wait_until(predicate, timeout, interval, lambda: "Home Assistant's log:\n" + self.log()[-6000:])

    def entities(self, platform="mqtt"):
        return [e for e in self.ws({"type": "config/entity_registry/list"})[0] if e["platform"] == platform]

    def devices(self):
        return self.ws({"type": "config/device_registry/list"})[0]
