"""Stand-in for CircuitPython's ssl: create_default_context(), SSLContext.load_verify_locations(cadata=...) and
wrap_socket(sock, server_hostname=...) over the socketpool stand-in, with the device's socket semantics.

The name shadows CPython's ssl for everything on this sys.path (requests, paho, aiohttp in the tests), so the
module re-exports the real ssl unchanged and only the context returned by create_default_context() learns to
wrap socketpool stand-in sockets. For those it behaves like the device: cadata (one PEM certificate) replaces
the built-in bundle instead of adding to it, cafile/capath do not exist, errors are OSError with mbedTLS codes.
"""

import errno as _errno
import importlib.machinery as _machinery
import importlib.util as _util
import os as _os
import sys as _sys

_HERE = _os.path.dirname(_os.path.abspath(__file__))


def _load_real_ssl():
    prev = _sys.modules.get("ssl")
    if prev is not None and getattr(prev, "__file__", None) != __file__:
        return prev  # CPython's ssl was imported before this folder came onto sys.path (tests load us by path)
    path = [p for p in _sys.path if _os.path.abspath(p or ".") != _HERE]
    spec = _machinery.PathFinder.find_spec("ssl", path)
    mod = _util.module_from_spec(spec)
    # The real ssl registers its enums through sys.modules["ssl"]: let it see itself while it runs.
    _sys.modules["ssl"] = mod
    try:
        spec.loader.exec_module(mod)
    finally:
        if prev is not None:
            _sys.modules["ssl"] = prev
        else:
            del _sys.modules["ssl"]
    return mod


_real = _load_real_ssl()
for _name in dir(_real):
    if not _name.startswith("__"):
        globals()[_name] = getattr(_real, _name)

import socketpool as _socketpool  # noqa: E402  (after the re-export: socketpool imports nothing of ours)

# mbedTLS error codes CircuitPython reports as OSError(code, text).
MBEDTLS_ERR_X509_CERT_VERIFY_FAILED = -0x2700
MBEDTLS_ERR_SSL_HANDSHAKE_FAILURE = -0x7780
MBEDTLS_ERR_X509_INVALID_FORMAT = -0x2180


class _DeviceSSLSocket:
    """A TLS connection over a socketpool stand-in socket: recv_into/send, EAGAIN when non-blocking, 116 on
    timeout; it keeps its one place in the 8-socket budget until close()."""

    def __init__(self, ctx, raw, server_hostname):
        self._raw = raw
        self._timeout = None
        if raw._connected():
            # Wrapped after a non-blocking connect: as mbedTLS on the device, the handshake runs step by step
            # inside the following send/recv_into calls (EAGAIN until it is done).
            self._timeout = raw._timeout
            self._tls = ctx.wrap_socket(raw._sock, server_hostname=server_hostname, do_handshake_on_connect=False)
            return
        self._tls = ctx.wrap_socket(raw._sock, server_hostname=server_hostname, do_handshake_on_connect=True)

    def _call(self, fn, *args):
        self._raw._reads += 1          # for the host runtime's wait: the firmware uses this socket
        self._raw._writes += 1
        try:
            out = fn(*args)
            _socketpool._note_activity(inbound=True)   # records in or out: either may start work
            self._raw._want_write = False
            return out
        except (_real.SSLWantReadError, _real.SSLWantWriteError, BlockingIOError) as exc:
            self._raw._want_write = isinstance(exc, _real.SSLWantWriteError)
            raise OSError(_errno.EAGAIN, "EAGAIN") from None
        except _real.SSLCertVerificationError as exc:
            raise OSError(MBEDTLS_ERR_X509_CERT_VERIFY_FAILED,
                          "X509 - Certificate verification failed (%s)" % exc.verify_message) from None
        except _real.SSLError as exc:
            raise OSError(MBEDTLS_ERR_SSL_HANDSHAKE_FAILURE, "SSL - %s" % exc.reason) from None
        except TimeoutError:
            if self._timeout == 0:
                raise OSError(_errno.EAGAIN, "EAGAIN") from None
            raise OSError(_socketpool.ETIMEDOUT_DEVICE, "ETIMEDOUT") from None
        except (ConnectionResetError, BrokenPipeError):
            raise OSError(_errno.ECONNRESET, "ECONNRESET") from None

    def connect(self, address):
        """TCP connect and handshake, bounded by the timeout set before."""
        self._call(self._tls.connect, address)

    def recv_into(self, buffer, bufsize=0):
        n = bufsize or len(buffer)
        got = self._call(self._tls.recv_into, buffer, n)
        if got == 0 and n and self._timeout == 0:
            raise OSError(_socketpool.ENOTCONN_DEVICE, "ENOTCONN")
        return got

    def send(self, data):
        return self._call(self._tls.send, data)

    def settimeout(self, value):
        self._timeout = value
        self._tls.settimeout(value)

    def setblocking(self, flag):
        self.settimeout(None if flag else 0)

    def close(self):
        try:
            self._tls.close()
        finally:
            self._raw.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __hash__(self):
        return id(self)


# The contexts that wrap the firmware's sockets, built once per trust anchor (None: the built-in bundle; else the
# cadata PEM): loading CPython's default bundle costs ~20 ms here, and the firmware asks for a context at every
# connection (MQTT, OTA, cloud), so building one per connection made the polls slow on a loaded machine (issue 26).
_device_contexts = {}


def _device_context(cadata):
    ctx = _device_contexts.get(cadata)
    if ctx is None:
        ctx = _real.create_default_context(cadata=cadata) if cadata else _real.create_default_context()
        _device_contexts[cadata] = ctx
    return ctx


class _Context(_real.SSLContext):
    """The real SSLContext for CPython callers; for socketpool stand-in sockets, the device's rules.

    What CPython callers need (the default bundle, their verify locations) is loaded on their first handshake
    (wrap_socket, wrap_bio), so a context the firmware only uses for socketpool sockets costs nothing to make."""

    _cp_cadata = None
    _cp_unsupported = None
    _cp_pending = None     # (purpose or None, [verify locations]) not yet loaded into this real context

    def _cp_load(self):
        pending, self._cp_pending = self._cp_pending, None
        if pending is None:
            return
        purpose, locations = pending
        if purpose is not None:
            _real.SSLContext.load_default_certs(self, purpose)
        for cafile, capath, cadata in locations:
            _real.SSLContext.load_verify_locations(self, cafile, capath, cadata)

    def load_default_certs(self, purpose=_real.Purpose.SERVER_AUTH):
        self._cp_load()
        return _real.SSLContext.load_default_certs(self, purpose)

    def load_verify_locations(self, cafile=None, capath=None, cadata=None):
        if cadata is not None:
            if not isinstance(cadata, str):
                raise TypeError("cadata must be a str (PEM)")
            self._cp_cadata = cadata
        if cafile is not None or capath is not None:
            self._cp_unsupported = "cafile/capath do not exist on CircuitPython"
        if self._cp_pending is not None:
            if cadata is not None:
                _device_context(cadata)    # a bad PEM fails here, as it would at once (and is built once)
            self._cp_pending[1].append((cafile, capath, cadata))
            return None
        return _real.SSLContext.load_verify_locations(self, cafile, capath, cadata)

    def wrap_bio(self, *args, **kwargs):
        self._cp_load()
        return _real.SSLContext.wrap_bio(self, *args, **kwargs)

    def get_ca_certs(self, *args, **kwargs):
        self._cp_load()
        return _real.SSLContext.get_ca_certs(self, *args, **kwargs)

    def cert_store_stats(self):
        self._cp_load()
        return _real.SSLContext.cert_store_stats(self)

    def wrap_socket(self, sock, *args, **kwargs):
        if not isinstance(sock, _socketpool.Socket):
            self._cp_load()
            return _real.SSLContext.wrap_socket(self, sock, *args, **kwargs)
        if self._cp_unsupported:
            raise NotImplementedError(self._cp_unsupported)
        server_hostname = kwargs.get("server_hostname")
        # The device verifies against cadata alone when given, else against its built-in bundle.
        inner = _device_context(self._cp_cadata)
        try:
            return _DeviceSSLSocket(inner, sock, server_hostname)
        except _real.SSLError as exc:
            raise OSError(MBEDTLS_ERR_X509_INVALID_FORMAT, "SSL - %s" % exc.reason) from None


def create_default_context(purpose=_real.Purpose.SERVER_AUTH, *, cafile=None, capath=None, cadata=None):
    """ssl.create_default_context(): verifies certificates and host names, trusts the built-in bundle."""
    ctx = _Context(_real.PROTOCOL_TLS_CLIENT if purpose == _real.Purpose.SERVER_AUTH else _real.PROTOCOL_TLS_SERVER)
    if purpose == _real.Purpose.SERVER_AUTH:
        ctx.check_hostname = True
        ctx.verify_mode = _real.CERT_REQUIRED
    if cafile or capath or cadata:
        ctx.load_verify_locations(cafile, capath, cadata)
    elif ctx.verify_mode != _real.CERT_NONE:
        ctx._cp_pending = (purpose, [])    # loaded on a CPython caller's first handshake (_Context._cp_load)
    return ctx
