"""Issue 36 points 3 and 4 in the whole firmware on the host runtime, every feature on (MQTT, Modbus, the Shelly
emulation with a UDP port and SMA through it: two floating sockets), authentication on, from 1, 2 and 8 source
addresses (loopback aliases): Modbus newcomers beside an address holding two silent connections, and Home
Assistant's WebSocket (its address showed its READ token to the API) and a Modbus energy manager beside two
anonymous WebSocket sessions."""

import base64
import hashlib
import json
import os
import socket
import struct
import threading
import time

import pytest

from tests.hostproc import HostProcess, free_port
from tests.mqtt_peers import Broker

pytestmark = pytest.mark.slow

READ = "r" * 64
WRITE = "w" * 64


@pytest.fixture(scope="module")
def device(tmp_path_factory):
    folder = tmp_path_factory.mktemp("reclaim")
    broker = Broker(str(folder / "broker")).start()
    drive = folder / "drive"
    drive.mkdir()
    (drive / "tokens.json").write_text(json.dumps({"read": hashlib.sha256(READ.encode()).hexdigest(),
                                                   "write": hashlib.sha256(WRITE.encode()).hexdigest(),
                                                   "required": True}))
    settings = {"api_auth_required": True,
                "wifi": {"primary": {"ssid": "HostNetwork", "password": "host-password"}},
                "mqtt": {"enable": True, "host": "127.0.0.1", "port": broker.port}, "modbus": {"enable": True},
                "emulation": {"shelly": True, "shellyUdpPort": free_port(), "shellyUdpPort2": 0, "sma": True}}
    host = HostProcess(drive, settings=settings, args=("--mdns-port", str(free_port()))).start()
    host.wait_for(lambda: _modbus_read(host, "127.0.0.1"), timeout=60)
    yield host
    host.stop()
    broker.stop()


def _connect(port, source):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((source, 0))
    s.settimeout(3)
    s.connect(("127.0.0.1", port))
    return s


def _modbus_read(host, source):
    """One FC 3 read of the SunSpec marker on a fresh connection from source: True when answered."""
    try:
        with _connect(host.modbus_port, source) as s:
            s.sendall(struct.pack(">HHHBBHH", 1, 0, 6, 1, 3, 40000, 2))
            return s.recv(64)[9:13] == b"SunS"
    except OSError:
        return False


def _info(host):
    info = host.get("/api/v1/system/info", headers={"Authorization": "Bearer " + READ})[1]
    return {e["name"]: e["value"] for e in info["modbus"]}, {e["name"]: e["value"] for e in info["emulation"]}


def _masked(payload):
    mask = b"\x01\x02\x03\x04"
    return bytes((0x81, 0x80 | len(payload))) + mask + bytes(b ^ mask[i & 3] for i, b in enumerate(payload))


def _ws_open(host, source, headers=""):
    """A WebSocket session on /rpc from source: the socket after its 101, else None."""
    try:
        s = _connect(host.port, source)
    except OSError:
        return None
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall(("GET /rpc HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n%s\r\n" % (host.port, key, headers)).encode())
    head = b""
    try:
        while b"\r\n\r\n" not in head:
            got = s.recv(4096)
            if not got:
                break
            head += got
    except OSError:
        pass
    if not head.startswith(b"HTTP/1.1 101"):
        s.close()
        return None
    return s


def _ws_answered(s):
    """One Shelly.GetDeviceInfo over session s: True when answered."""
    try:
        s.sendall(_masked(b'{"id":1,"src":"ha","method":"Shelly.GetDeviceInfo"}'))
        data = b""
        while b"shellypro3em" not in data:
            got = s.recv(4096)
            if not got:
                return False
            data += got
        return True
    except OSError:
        return False


class Holders:
    """Threads that keep what they can get: Modbus connections that say nothing, WebSocket sessions that ask once
    every few seconds (the audit's: every 20 s); each reopened at once when the firmware closes it."""

    def __init__(self, host):
        self.host = host
        self.stop = threading.Event()
        self.threads = []
        self.opened = {"modbus": 0, "ws": 0}

    def _keep(self, kind, opener, ask_every):
        while not self.stop.is_set():
            s = opener()
            if s is None:
                time.sleep(0.2)
                continue
            self.opened[kind] += 1
            s.settimeout(0.2)
            last = time.monotonic()
            while not self.stop.is_set():
                if ask_every and time.monotonic() - last > ask_every:
                    last = time.monotonic()
                    try:
                        s.sendall(_masked(b'{"id":7,"method":"EM.GetStatus","params":{"id":0}}'))
                    except OSError:
                        break
                try:
                    if s.recv(4096) == b"":
                        break
                except socket.timeout:
                    continue
                except OSError:
                    break
            s.close()
            time.sleep(0.05)

    def modbus(self, source, n=2):
        for _ in range(n):
            def opener():
                try:
                    return _connect(self.host.modbus_port, source)
                except OSError:
                    return None
            self.threads.append(threading.Thread(target=self._keep, args=("modbus", opener, 0), daemon=True))
        return self

    def ws(self, sources):
        for source in sources:
            self.threads.append(threading.Thread(target=self._keep, args=(
                "ws", lambda source=source: _ws_open(self.host, source), 2.0), daemon=True))
        return self

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join(5)


def _quiet(host):
    """Wait until the holders of the test before are gone."""
    host.wait_for(lambda: _info(host)[0]["clients"] == 0 and _info(host)[1]["shelly_ws.sessions"] == 0,
                  timeout=30)


@pytest.mark.parametrize("addresses", [1, 2, 8, 16, 40])
def test_modbus_newcomers_are_served_beside_an_address_holding_two_silent_connections(device, addresses):
    host = device
    _quiet(host)
    holder = "127.0.0.40"
    with Holders(host).modbus(holder):
        host.wait_for(lambda: _info(host)[0]["clients"] == 2, timeout=10)
        served = []
        for i in range(10):
            time.sleep(2.5)                             # the holders' grace time (2 s) runs out between probes
            source = holder if addresses == 1 else "127.0.0.%d" % (41 + i % addresses)
            served.append(_modbus_read(host, source))
    assert served == [True] * 10, (served, _info(host)[0])


@pytest.mark.parametrize("addresses", [1, 2, 8, 16, 40])
def test_home_assistant_and_modbus_are_served_beside_two_anonymous_sessions(device, addresses):
    host = device
    _quiet(host)
    # two anonymous sessions held, by openers from this many addresses (each tries again 2 s after losing its own)
    strangers = ["127.0.0.%d" % (60 + i % addresses) for i in range(max(2, addresses))]
    ha = "127.0.0.5"
    assert host.get("/api/v1/history/latest", headers={"Authorization": "Bearer " + READ},
                    retry_429_for=10)[0] == 200
    with _connect(host.port, ha) as s:                 # Home Assistant's WattWaechter integration: its READ token
        s.sendall(("GET /api/v1/system/alive HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\n"
                   "Connection: close\r\n\r\n" % READ).encode())
        assert s.recv(64).startswith(b"HTTP/1.1 200")
    with Holders(host).ws(strangers) as holders:
        host.wait_for(lambda: _info(host)[1]["shelly_ws.sessions"] == 2, timeout=10)
        ws_ok, modbus_ok = [], []
        for _ in range(8):
            time.sleep(1)
            s = _ws_open(host, ha)
            ws_ok.append(s is not None and _ws_answered(s))
            if s is not None:
                s.close()
            time.sleep(0.5)
            modbus_ok.append(_modbus_read(host, "127.0.0.6"))
        assert holders.opened["ws"] >= 2
    modbus, emulation = _info(host)
    assert ws_ok == [True] * 8, (ws_ok, emulation)
    assert modbus_ok == [True] * 8, (modbus_ok, modbus, emulation)
    assert emulation["shelly_ws.reclaimed"] >= 1 and emulation["shelly_ws.replaced"] >= 1
