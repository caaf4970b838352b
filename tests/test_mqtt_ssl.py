"""host/cp/ssl.py: CircuitPython's ssl API over the socketpool stand-in, with the device's rules (cadata replaces
the bundle, EAGAIN when non-blocking, mbedTLS error codes, one place in the 8-socket budget), against mosquitto."""

import errno
import time

import pytest
import socketpool
import wifi

from tests.mqtt_peers import device_ssl, make_ca


def test_cadata_connect_nonblocking_recv_and_socket_budget(broker, certs):
    ssl = device_ssl()
    pool = socketpool.SocketPool(wifi.radio)
    before = socketpool.open_count()
    ctx = ssl.create_default_context()
    ctx.load_verify_locations(cadata=open(certs["ca.crt"]).read())
    sock = ctx.wrap_socket(pool.socket(pool.AF_INET, pool.SOCK_STREAM), server_hostname="localhost")
    assert socketpool.open_count() == before + 1  # the TLS socket is still one socket
    sock.settimeout(15)  # TCP and the TLS handshake: generous for a loaded machine
    sock.connect(("127.0.0.1", broker.tls_port))
    sock.settimeout(0)
    buf = bytearray(4)
    with pytest.raises(OSError) as e:
        sock.recv_into(buf)
    assert e.value.errno == errno.EAGAIN
    sock.send(b"\x10\x14\x00\x04MQTT\x04\x02\x00\x1e\x00\x08ssl-test")  # CONNECT, clean session, keep-alive 30 s
    end = time.monotonic() + 15
    while time.monotonic() < end:
        try:
            n = sock.recv_into(buf)
            break
        except OSError as exc:
            assert exc.errno == errno.EAGAIN
            time.sleep(0.01)
    assert n == 4 and bytes(buf) == b"\x20\x02\x00\x00"
    sock.close()
    assert socketpool.open_count() == before


def test_verification_failures_are_mbedtls_codes(broker, certs, tmp_path):
    ssl = device_ssl()
    pool = socketpool.SocketPool(wifi.radio)
    other = make_ca(str(tmp_path / "other"))
    for cadata, host in ((open(other["ca.crt"]).read(), "localhost"),   # wrong CA
                         (open(certs["ca.crt"]).read(), "meter.example"),  # name not in the certificate
                         (None, "localhost")):                          # built-in bundle only
        ctx = ssl.create_default_context()
        if cadata:
            ctx.load_verify_locations(cadata=cadata)
        sock = ctx.wrap_socket(pool.socket(pool.AF_INET, pool.SOCK_STREAM), server_hostname=host)
        sock.settimeout(15)  # a handshake timing out on a loaded machine would be a different errno
        with pytest.raises(OSError) as e:
            sock.connect(("127.0.0.1", broker.tls_port))
        assert e.value.errno == ssl.MBEDTLS_ERR_X509_CERT_VERIFY_FAILED == -0x2700
        sock.close()
    assert socketpool.open_count() == 0


def test_cpython_users_keep_the_real_ssl(certs):
    import ssl as imported

    ssl = device_ssl()
    assert ssl.SSLContext is imported.SSLContext  # requests, paho, aiohttp see CPython's classes
    ctx = ssl.create_default_context()
    assert isinstance(ctx, imported.SSLContext)
    # CPython callers may use cafile; a firmware that did would fail on the device, so the stand-in refuses it.
    ctx.load_verify_locations(cafile=certs["ca.crt"])
    raw = socketpool.SocketPool(wifi.radio).socket(2, 1)
    with pytest.raises(NotImplementedError):
        ctx.wrap_socket(raw, server_hostname="localhost")
    raw.close()
    assert socketpool.open_count() == 0


def test_the_tls_context_is_built_once_not_per_connection(broker, certs, monkeypatch):
    """Issue 26 finding 11: the firmware asks for a context at every connection (MQTT, OTA, cloud) and the stand-in
    loaded CPython's whole default bundle for each (twice: ~40 ms here, ~1 s at load 11). Now trust anchors load
    once per process; the connections still verify (a wrong host name is still refused)."""
    ssl = device_ssl()
    loads = []
    real = ssl._real.SSLContext
    default_certs, verify = real.load_default_certs, real.load_verify_locations
    monkeypatch.setattr(real, "load_default_certs",
                        lambda self, *a: (loads.append("bundle"), default_certs(self, *a))[1])
    monkeypatch.setattr(real, "load_verify_locations",
                        lambda self, *a, **k: (loads.append("cadata"), verify(self, *a, **k))[1])
    monkeypatch.setattr(ssl, "_device_contexts", {}, raising=False)
    pool = socketpool.SocketPool(wifi.radio)
    ca = open(certs["ca.crt"]).read()
    for _ in range(5):
        ctx = ssl.create_default_context()                   # as services/mqtt/service.py does per connection
        ctx.load_verify_locations(cadata=ca)
        sock = ctx.wrap_socket(pool.socket(pool.AF_INET, pool.SOCK_STREAM), server_hostname="localhost")
        sock.settimeout(15)
        sock.connect(("127.0.0.1", broker.tls_port))
        sock.close()
    for _ in range(3):                                        # the built-in bundle (OTA, cloud): once as well
        ctx = ssl.create_default_context()
        sock = ctx.wrap_socket(pool.socket(pool.AF_INET, pool.SOCK_STREAM), server_hostname="localhost")
        sock.settimeout(15)
        with pytest.raises(OSError):
            sock.connect(("127.0.0.1", broker.tls_port))    # our test CA is not in the bundle: still verified
        sock.close()
    assert loads.count("cadata") == 1 and loads.count("bundle") == 1, loads
    ctx = ssl.create_default_context()                        # a wrong name is refused with the cached context too
    ctx.load_verify_locations(cadata=ca)
    sock = ctx.wrap_socket(pool.socket(pool.AF_INET, pool.SOCK_STREAM), server_hostname="meter.example")
    sock.settimeout(15)
    with pytest.raises(OSError) as e:
        sock.connect(("127.0.0.1", broker.tls_port))
    assert e.value.errno == ssl.MBEDTLS_ERR_X509_CERT_VERIFY_FAILED
    sock.close()
    assert socketpool.open_count() == 0
