"""Real MQTT peers for the tests: a mosquitto broker on 127.0.0.1 (plain + TLS with a CA made by the openssl CLI)
and a paho-mqtt subscriber that records everything it receives."""

import os
import shutil
import signal
import socket
import subprocess
import threading
import time

import paho.mqtt.client as paho
import pytest
from tests.hostproc import free_port

MOSQUITTO = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
MOSQUITTO_PASSWD = shutil.which("mosquitto_passwd") or "/usr/bin/mosquitto_passwd"


def device_ssl():
    """host/cp/ssl.py, the CircuitPython ssl stand-in (pytest may have imported CPython's ssl before conftest
    put host/cp on sys.path, so it is loaded by path when needed)."""
    import importlib.util
    import sys

    mod = sys.modules.get("ssl")
    if mod is not None and hasattr(mod, "MBEDTLS_ERR_X509_CERT_VERIFY_FAILED"):
        return mod
    if "_cp_ssl" not in sys.modules:
        path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "host", "cp", "ssl.py")
        spec = importlib.util.spec_from_file_location("_cp_ssl", path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules["_cp_ssl"] = mod
        spec.loader.exec_module(mod)
    return sys.modules["_cp_ssl"]


def wait_port(port, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("port %d did not open" % port)


def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_ca(folder):
    """A test CA and a server certificate for localhost/127.0.0.1 signed by it (EC P-256: quick to make)."""
    os.makedirs(folder, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=Meter Plus Test CA",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
             cwd=folder)
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost", cwd=folder)
    with open(os.path.join(folder, "ext.cnf"), "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "server.crt", "-days", "2", "-extfile", "ext.cnf", cwd=folder)
    return {k: os.path.join(folder, k) for k in ("ca.crt", "server.crt", "server.key")}


class Broker:
    """mosquitto with a temp config: plain listener on port, optional TLS listener, optional password file."""

    def __init__(self, folder, tls=None, users=None):
        self.folder = folder
        os.makedirs(folder, exist_ok=True)
        self.port = free_port()
        self.tls_port = free_port() if tls else None
        self.tls = tls
        self.proc = None
        lines = ["per_listener_settings false", "persistence false", "log_dest file %s/mosquitto.log" % folder,
                 "log_type all"]
        if os.geteuid() == 0:
            lines.append("user root")  # else mosquitto drops to user mosquitto and cannot read the temp files
        if users:
            pw = os.path.join(folder, "passwd")
            open(pw, "w").close()
            for user, password in users.items():
                subprocess.run([MOSQUITTO_PASSWD, "-b", pw, user, password], check=True, capture_output=True)
            lines += ["allow_anonymous false", "password_file %s" % pw]
        else:
            lines.append("allow_anonymous true")
        lines.append("listener %d 127.0.0.1" % self.port)
        if tls:
            lines += ["listener %d 127.0.0.1" % self.tls_port, "cafile %s" % tls["ca.crt"],
                      "certfile %s" % tls["server.crt"], "keyfile %s" % tls["server.key"]]
        self.conf = os.path.join(folder, "mosquitto.conf")
        with open(self.conf, "w") as f:
            f.write("\n".join(lines) + "\n")

    def start(self):
        self.proc = subprocess.Popen([MOSQUITTO, "-c", self.conf], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        wait_port(self.port)
        if self.tls_port:
            wait_port(self.tls_port)
        return self

    def stop(self):
        if self.proc is not None:
            self.resume()
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None

    def restart(self):
        self.stop()
        self.start()

    def freeze(self):
        """Black-hole the broker: the kernel still accepts TCP connections, nobody answers."""
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self):
        if self.proc is not None:
            os.kill(self.proc.pid, signal.SIGCONT)

    def log(self):
        try:
            with open(os.path.join(self.folder, "mosquitto.log")) as f:
                return f.read()
        except OSError:
            return ""


class Subscriber:
    """paho-mqtt client recording (topic, payload bytes, retain flag, monotonic time) of every message."""

    def __init__(self, port, topics=("#",), client_id=None, tls_ca=None, tls_port=None):
        self.messages = []
        self._lock = threading.Lock()
        self.client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=client_id or "test-sub-%d" % os.getpid(),
                                  protocol=paho.MQTTv311)
        self.client.on_message = self._on_message
        self._subscribed = threading.Event()
        self._sub_mid = None
        self.client.on_connect = lambda c, u, f, rc, p=None: self._on_connect(topics)
        self.client.on_subscribe = self._on_subscribe
        if tls_ca:
            self.client.tls_set(ca_certs=tls_ca)
            port = tls_port
        self.client.connect("127.0.0.1", port, keepalive=30)
        self.client.loop_start()
        if not self._subscribed.wait(10):
            raise RuntimeError("subscriber did not connect and subscribe")

    def _on_connect(self, topics):
        # One SUBSCRIBE for all topics; the constructor returns once its SUBACK is in, so the broker routes
        # every later publish to us (a SUBSCRIBE still on its way could lose a race with the device's publish).
        self._sub_mid = self.client.subscribe([(t, 0) for t in topics])[1]

    def _on_subscribe(self, client, userdata, mid, *rest):
        if mid == self._sub_mid:
            self._subscribed.set()

    def _on_message(self, client, userdata, msg):
        with self._lock:
            self.messages.append((msg.topic, bytes(msg.payload), bool(msg.retain), time.monotonic()))

    def snapshot(self):
        with self._lock:
            return list(self.messages)

    def wait_for(self, pred, timeout=15.0, what="a message", idle=None, since=0):
        """The first recorded message from index since on with pred(topic, payload) true, waiting up to timeout;
        idle() runs while waiting (an in-process device's poll), else it sleeps."""
        end = time.monotonic() + timeout
        seen = since
        while time.monotonic() < end:
            msgs = self.snapshot()
            for m in msgs[seen:]:
                if pred(m[0], m[1]):
                    return m
            seen = max(seen, len(msgs))
            if idle is not None:
                idle()
            else:
                time.sleep(0.02)
        raise AssertionError("timed out waiting for %s; got %r" % (what, [(m[0], m[1][:80]) for m in msgs[-20:]]))

    def publish(self, topic, payload, retain=False):
        self.client.publish(topic, payload, qos=0, retain=retain).wait_for_publish(5)

    def close(self):
        self.client.loop_stop()
        self.client.disconnect()


def full_backlog_listener():
    """A port on 127.0.0.1 whose SYNs go unanswered: listen(0), never accept, the one-slot queue filled (Linux
    drops SYNs to a listener with a full accept queue). Returns (port, things to close)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(0)
    port = srv.getsockname()[1]
    held = [srv]
    for _ in range(4):
        c = socket.socket()
        c.setblocking(False)
        c.connect_ex(("127.0.0.1", port))
        held.append(c)
    time.sleep(0.3)
    probe = socket.socket()
    probe.settimeout(1.0)
    try:
        probe.connect(("127.0.0.1", port))
        pytest.skip("this kernel answered a SYN to a full accept queue; no black hole on 127.0.0.1")
    except (TimeoutError, socket.timeout):
        pass
    finally:
        probe.close()
    return port, held


def stage_minimqtt(root):
    """Copy adafruit_minimqtt and adafruit_connection_manager into a MicroVM's folder, with the three names this
    MicroPython build lacks and CircuitPython has or skips: random.randint (minimqtt's made-up client ids, never
    used by the firmware), and typing / circuitpython_typing.socket (imported by the connection manager unless
    sys.implementation is circuitpython)."""
    import adafruit_connection_manager
    import adafruit_minimqtt

    shutil.copytree(os.path.dirname(adafruit_minimqtt.__file__), os.path.join(root, "adafruit_minimqtt"),
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(adafruit_connection_manager.__file__, root)
    with open(os.path.join(root, "random.py"), "w") as f:
        f.write("def randint(a, b):\n    return a\n")
    with open(os.path.join(root, "typing.py"), "w") as f:
        f.write("List = Optional = Tuple = Union = Type = None\n")
    os.mkdir(os.path.join(root, "circuitpython_typing"))
    with open(os.path.join(root, "circuitpython_typing", "socket.py"), "w") as f:
        f.write("CircuitPythonSocketType = InterfaceType = SocketpoolModuleType = SocketType = SSLContextType = None\n")
