"""Shared helpers of the API tests (no tests here): a host runtime with a tunable rate limit, raw socket clients."""

import socket
import time

import pytest

from tests.hostproc import HostProcess, write_settings_toml


def start_host(tmp_path_factory, name, rate_limit=100000, settings=None, args=(), toml_extra=""):
    """A running `python -m host` on a fresh drive; settings.toml raises the rate limit unless told otherwise."""
    state = tmp_path_factory.mktemp(name)
    write_settings_toml(state, "METERPLUS_API_RATE_LIMIT = %d\n" % rate_limit + toml_extra)
    return HostProcess(state, args=args, settings=settings).start()


def host_fixture(name, reading=False, **kwargs):
    """A module-scoped fixture: start_host(name, **kwargs) for the module's tests, stopped after them; with
    reading=True the simulated meter's first telegram is in before the first test (a live meter expected)."""

    @pytest.fixture(scope="module")
    def host(tmp_path_factory):
        h = start_host(tmp_path_factory, name, **kwargs)
        if reading:
            h.wait_reading()
        yield h
        h.stop()

    return host


def raw(port, data, timeout=5.0, shut=False):
    """Send raw bytes, read until the server closes; the whole answer as bytes."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        if data:
            s.sendall(data)
        if shut:
            s.shutdown(socket.SHUT_WR)
        out = b""
        while True:
            try:
                got = s.recv(65536)
            except ConnectionResetError:
                break
            if not got:
                break
            out += got
        return out
    finally:
        s.close()


def status_of(answer):
    """Status code of a raw HTTP answer (0 when there is none)."""
    if not answer.startswith(b"HTTP/1.1 "):
        return 0
    return int(answer[9:12])


def body_of(answer):
    """Body bytes of a raw answer, chunked transfer decoded."""
    head, _, body = answer.partition(b"\r\n\r\n")
    if b"transfer-encoding: chunked" not in head.lower():
        return body
    out = b""
    while body:
        line, _, rest = body.partition(b"\r\n")
        n = int(line, 16)
        if n == 0:
            break
        out += rest[:n]
        body = rest[n + 2:]
    return out


def header_of(answer, name):
    head = answer.partition(b"\r\n\r\n")[0].decode("latin-1")
    for line in head.split("\r\n")[1:]:
        k, _, v = line.partition(":")
        if k.strip().lower() == name.lower():
            return v.strip()
    return None


def timed_get(port, path="/api/v1/system/alive", timeout=5.0):
    """(seconds, status) of one GET over a fresh connection."""
    t0 = time.monotonic()
    answer = raw(port, ("GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" % path).encode(), timeout=timeout)
    return time.monotonic() - t0, status_of(answer)
