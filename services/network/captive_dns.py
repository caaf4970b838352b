"""Captive-portal DNS: while the access point is up and the station is not joined, every name is 192.168.4.1."""

import errno

from adafruit_ticks import ticks_diff

from core.module import Module
from core.sockets import close_quietly
from services.network.dns_wire import answer_into


class CaptiveDns(Module):
    """pool (socketpool.SocketPool), wifi (drivers.radio.WifiManager), host/port to bind (53 on the device), ip.

    The socket exists only while the AP serves a first setup, so it costs one of the system's 8 sockets only then.
    """

    name = "captive_dns"
    poll_every_ms = 100     # a phone's DNS query waits in the socket
    max_per_poll = 4          # datagrams answered per poll: bounded work, and a flood cannot starve the loop
    retry_ms = 5000           # after a failed bind or out of sockets

    def __init__(self, pool, wifi, host="0.0.0.0", port=53, ip="192.168.4.1", setup_url=None):
        Module.__init__(self)
        self._pool = pool
        self._wifi = wifi
        self.host = host
        self.port = port
        self._ip = bytes(int(x) for x in ip.split("."))
        # Where the web server sends phones that ask for any other name (the host runtime passes its own address).
        self.setup_url = setup_url or "http://%s/" % ip
        self._in = bytearray(512)    # classic DNS over UDP: 512 bytes at most
        self._out = bytearray(512)
        self._sock = None
        self._failed_at = None

    def wanted(self):
        """True while phones on the AP need every name to lead to the setup page."""
        return self._wifi.ap_active() and not self._wifi.connected()

    def poll(self, now_ms):
        if not self.wanted():
            self._close()
            return
        if self._sock is None:
            if self._failed_at is not None and 0 <= ticks_diff(now_ms, self._failed_at) < self.retry_ms:
                return
            if not self._open(now_ms):
                return
        for _ in range(self.max_per_poll):
            try:
                n, addr = self._sock.recvfrom_into(self._in)
            except OSError as exc:
                if exc.errno != errno.EAGAIN:
                    self.count("recv_errors")
                    self._close()
                return
            size = answer_into(self._in, n, self._out, self._ip)
            if not size:
                self.count("dropped")
                continue
            try:
                self._sock.sendto(memoryview(self._out)[:size], addr)
                self.count("answers")
            except OSError:
                self.count("send_errors")

    budget = None      # core.sockbudget.SocketBudget (the wiring sets it): asked before the socket is opened

    def sockets_held(self):
        """1 while the socket is open (core/sockbudget.py)."""
        return 0 if self._sock is None else 1

    def _open(self, now_ms):
        if self.budget is not None and not self.budget.may_take():
            self.count("budget_refused")
            self._failed_at = now_ms
            return False
        try:
            sock = self._pool.socket(self._pool.AF_INET, self._pool.SOCK_DGRAM)
        except (OSError, RuntimeError):  # out of sockets is a RuntimeError on CircuitPython
            self.count("no_socket")
            self._failed_at = now_ms
            return False
        try:
            sock.setblocking(False)
            sock.bind((self.host, self.port))
        except OSError:
            sock.close()
            self.count("bind_errors")
            self._failed_at = now_ms
            return False
        self._sock = sock
        self._failed_at = None
        return True

    def _close(self):
        self._sock = close_quietly(self._sock)

    def stop(self):
        self._close()

    def describe(self):
        d = Module.describe(self)
        d["listening"] = self._sock is not None
        return d
