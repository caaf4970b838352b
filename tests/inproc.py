"""The firmware's HTTP server in the test process: raw exchanges with a server the test polls itself between
reads, and an HttpApi polled by a thread of its own for real clients (requests, aio-wattwaechter)."""

import socket
import threading
from contextlib import contextmanager

import socketpool
from adafruit_ticks import ticks_ms

from services.api.service import HttpApi
from tests.hostproc import free_port


def read_until_closed(sock, poll, polls=100, wait=0.02):
    """What the server sends on sock until it closes it (or polls run out), calling poll() before each read;
    closes sock."""
    sock.settimeout(wait)
    out = b""
    try:
        for _ in range(polls):
            poll()
            try:
                got = sock.recv(65536)
            except socket.timeout:
                continue
            except ConnectionResetError:
                break
            if not got:
                break
            out += got
    finally:
        sock.close()
    return out


def exchange(port, data, poll, polls=100, wait=0.02):
    """Send raw bytes to 127.0.0.1:port and return the whole answer (see read_until_closed)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=2)
    sock.sendall(data)
    return read_until_closed(sock, poll, polls, wait)


def split_answer(raw):
    """(status, headers with lower-case names, body bytes) of one HTTP/1.1 answer; status 0 if none came."""
    head, _, body = raw.partition(b"\r\n\r\n")
    if not raw.startswith(b"HTTP/1.1 "):
        return 0, {}, body
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(lines[0][9:12]), headers, body


def server_port(api):
    """The port an HttpApi started on port 0 listens on."""
    return api._server._sock._sock.getsockname()[1]


@contextmanager
def api_in_thread(app, route_modules):
    """An HttpApi for app on a free 127.0.0.1 port, polled by a background thread as the supervisor would; yields
    the port. The rate limit is raised so that a test's many requests measure the routes, not the budget."""
    port = free_port()
    api = HttpApi(socketpool.SocketPool(None), app, host="127.0.0.1", port=port, route_modules=route_modules,
                  rate_limit=100000)
    api.start()
    stop = threading.Event()

    def loop():
        while not stop.is_set():
            api.poll(ticks_ms())

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield port
    finally:
        stop.set()
        thread.join(5)
        api.stop()
