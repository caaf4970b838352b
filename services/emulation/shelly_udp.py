"""The Shelly Pro 3EM's UDP JSON-RPC as batteries poll it (Marstek, Hoymiles, Zendure): one socket per port."""

from adafruit_ticks import ticks_diff

from core.module import Module
from core.sockets import EAGAIN, close_quietly, errno_of
from services.emulation import shelly_rpc
from services.emulation.meter_view import view


class ShellyUdp(Module):
    """pool: socketpool.SocketPool; bus (latest "reading"); settings (emulation.*); ident: shelly_rpc.Identity;
    uptime: callable -> seconds. Listens only while emulation.shelly is on, on emulation.shellyUdpPort and
    shellyUdpPort2 (0 = that one off): each is one of the device's 8 sockets."""

    name = "shelly_udp"
    max_per_poll = 4          # datagrams answered per socket and poll: a flood cannot starve the loop
    retry_ms = 5000           # after a failed bind or out of sockets
    max_datagram = 512        # a battery's request is ~60 bytes; longer ones are not JSON-RPC for us
    budget = None             # core.sockbudget.SocketBudget (the loader sets it): asked before a socket is opened
    serve_every_ms = 20       # sockets read at most this often: an empty read raises (EAGAIN), and a battery that
    #                           asks every 1-4 s does not notice 20 ms

    def __init__(self, pool, bus, settings, ident, energy_floor=None, uptime=None, host="0.0.0.0"):
        Module.__init__(self)
        self._pool = pool
        self._bus = bus
        self._settings = settings
        self._ident = ident
        self._floor = energy_floor
        self._uptime = uptime
        self.host = host
        self._in = bytearray(self.max_datagram)
        self._socks = {}          # port -> socket
        self._failed_at = None
        self.last_answer_ms = None
        self._served_at = None
        # The ports are read again only when the settings change: an idle poll allocates nothing of its own.
        self._changes = bus.subscribe("settings", 4)
        self._ports = self.wanted_ports()

    def wanted_ports(self):
        """The ports to listen on now (none while the emulation is off)."""
        s = self._settings
        if not s.get("emulation.shelly", False):
            return ()
        ports = []
        for key in ("emulation.shellyUdpPort", "emulation.shellyUdpPort2"):
            port = s.get(key, 0)
            if isinstance(port, int) and port > 0 and port not in ports:
                ports.append(port)
        return tuple(ports)

    def poll(self, now_ms):
        changed = False
        while self._changes.pop() is not None:
            changed = True
        if changed:
            self._ports = self.wanted_ports()
            for port in list(self._socks):
                if port not in self._ports:
                    self._socks[port] = close_quietly(self._socks[port])
                    del self._socks[port]
        if len(self._socks) < len(self._ports) and (self._failed_at is None or
                                                   not 0 <= ticks_diff(now_ms, self._failed_at) < self.retry_ms):
            for port in self._ports:
                if port not in self._socks:
                    self._open(port, now_ms)
        if self._served_at is not None and 0 <= ticks_diff(now_ms, self._served_at) < self.serve_every_ms:
            return
        self._served_at = now_ms
        for port in self._ports:
            sock = self._socks.get(port)
            if sock is not None:
                self._serve(sock, now_ms)

    def _serve(self, sock, now_ms):
        for _ in range(self.max_per_poll):
            try:
                n, addr = sock.recvfrom_into(self._in)
            except OSError as exc:
                if errno_of(exc) != EAGAIN:
                    self.count("recv_errors")
                return
            current = view(self._bus.latest("reading"), now_ms, self._floor)
            if current is None or current.power is None:
                self.count("stale_silent")    # no answer at all: the battery keeps its own safe state
                continue
            answer = shelly_rpc.answer_datagram(bytes(self._in[:n]), current, self._ident,
                                                self._uptime() if self._uptime is not None else 0)
            if answer is None:
                self.count("ignored")
                continue
            try:
                sock.sendto(answer, addr)
                self.count("answers")
                self.last_answer_ms = now_ms
            except OSError:
                self.count("send_errors")

    def sockets_held(self):
        """Sockets open now: one per listening port (core/sockbudget.py)."""
        return len(self._socks)

    def _open(self, port, now_ms):
        if self.budget is not None and not self.budget.may_take():
            self.count("budget_refused")   # HTTP keeps its three: tried again after retry_ms
            self._failed_at = now_ms
            return
        try:
            sock = self._pool.socket(self._pool.AF_INET, self._pool.SOCK_DGRAM)
        except (OSError, RuntimeError):  # out of sockets is a RuntimeError on CircuitPython
            self.count("no_socket")
            self._failed_at = now_ms
            return
        try:
            sock.setblocking(False)
            sock.bind((self.host, port))
        except OSError:
            sock.close()
            self.count("bind_errors")
            self._failed_at = now_ms
            return
        self._socks[port] = sock
        self._failed_at = None

    def stop(self):
        for port in list(self._socks):
            close_quietly(self._socks[port])
        self._socks = {}

    def release(self):
        """Stop receiving settings changes: the listener is let go (services/emulation/loader.py)."""
        self._bus.unsubscribe("settings", self._changes)

    def describe(self):
        d = Module.describe(self)
        d["ports"] = sorted(self._socks)
        return d
