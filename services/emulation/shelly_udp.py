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
        self._since_up = None   # uptime (s) when the current run of requests began: the page's "asking since"
        self._last_up = None    # uptime (s) of the newest answer (uptime counts seconds without a tick wrap)
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
                self._note_answer()
            except OSError:
                self.count("send_errors")

    def _open(self, port, now_ms):
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

    quiet_s = 60  # a pause this long ends a run of requests: the next answer starts a new one

    def _note_answer(self):
        if self._uptime is None:
            return
        up = self._uptime()
        if self._last_up is None or up - self._last_up > self.quiet_s:
            self._since_up = up
        self._last_up = up

    def describe(self):
        d = Module.describe(self)
        d["ports"] = ",".join(str(p) for p in sorted(self._socks))   # a string: /system/info sections skip lists
        # For the page's words ("asking since 12:03 · 1,234 answers"): seconds since the run of requests began and
        # since the newest answer, None before the first answer.
        up = self._uptime() if self._uptime is not None else None
        d["since_s"] = up - self._since_up if up is not None and self._since_up is not None else None
        d["last_s"] = up - self._last_up if up is not None and self._last_up is not None else None
        return d
