"""Stand-in for mdns: one Server per network interface holding the hostname, instance name and advertised services.

Kept from CircuitPython 10 on Espressif: Server(radio) returns the interface's one server; advertise_service() called
again for a service type and protocol only updates the port; TXT records are not published (Espressif has no TXT
support, so they are dropped here too). Instead of multicast on the LAN, serve(port) answers standard DNS queries
for the records on 127.0.0.1 (unicast), so a real resolver (dnspython, dig -p) can look the device up.
"""

import socket
import struct
import threading

import _hostenv

_servers = {}
_responder = None


class RemoteService:
    """A service found by Server.find()."""

    def __init__(self):
        self.hostname = ""
        self.instance_name = ""
        self.service_type = ""
        self.protocol = ""
        self.port = 0


class Server:
    """mdns.Server(network_interface): the interface's responder."""

    def __new__(cls, network_interface):
        key = id(network_interface)
        if key in _servers and not _servers[key]._deinited:
            return _servers[key]
        obj = object.__new__(cls)
        obj._interface = network_interface
        obj._hostname = "cpy-" + "".join("%02x" % b for b in bytes(network_interface.mac_address)[-3:])
        obj._instance = None
        obj._services = {}
        obj._deinited = False
        _servers[key] = obj
        return obj

    def __init__(self, network_interface):
        pass

    def _check(self):
        if self._deinited:
            raise ValueError("Object has been deinitialized and can no longer be used. Create a new object.")

    def deinit(self):
        self._deinited = True

    @property
    def hostname(self):
        self._check()
        return self._hostname

    @hostname.setter
    def hostname(self, value):
        self._check()
        if not isinstance(value, str) or not value:
            raise ValueError("hostname must be a non-empty str")
        self._hostname = value

    @property
    def instance_name(self):
        self._check()
        return self._instance if self._instance is not None else self._hostname

    @instance_name.setter
    def instance_name(self, value):
        self._check()
        self._instance = str(value)

    def find(self, service_type, protocol, *, timeout=1):
        self._check()
        return ()  # the host has no other devices on a LAN

    def advertise_service(self, *, service_type, protocol, port, txt_records=None):
        self._check()
        if not (0 < port < 65536):
            raise ValueError("port out of range")
        self._services[(service_type, protocol)] = port  # txt_records: not published on Espressif


def records():
    """Host hook: what the live servers publish, as [(hostname, instance, service_type, protocol, port)]."""
    out = []
    for s in _servers.values():
        if s._deinited:
            continue
        for (stype, proto), port in sorted(s._services.items()):
            out.append((s._hostname, s.instance_name, stype, proto, port))
    return out


# --- a unicast DNS responder for the published records (host only) ---

def _name(text):
    out = b""
    for label in text.rstrip(".").split("."):
        raw = label.encode()
        out += bytes([len(raw)]) + raw
    return out + b"\x00"


def _read_name(data, pos):
    labels = []
    while True:
        n = data[pos]
        if n == 0:
            return ".".join(labels), pos + 1
        if n & 0xC0:
            raise ValueError("compressed question")
        labels.append(data[pos + 1:pos + 1 + n].decode("utf-8", "replace"))
        pos += 1 + n


def _rr(name, rtype, rdata, ttl=120):
    # Class IN without the cache-flush bit: a unicast (legacy) answer, RFC 6762 section 6.7.
    return _name(name) + struct.pack("!HHIH", rtype, 1, ttl, len(rdata)) + rdata


def _address(server):
    ip = getattr(server._interface, "ipv4_address", None)
    return str(ip) if ip is not None else None


def answer(query):
    """The response to one DNS query, or None when nothing here matches."""
    qid, _flags, qd = struct.unpack_from("!HHH", query, 0)
    if qd < 1:
        return None
    qname, pos = _read_name(query, 12)
    qtype, _qclass = struct.unpack_from("!HH", query, pos)
    question = query[12:pos + 4]
    q = qname.lower().rstrip(".")
    answers = []
    for s in list(_servers.values()):
        if s._deinited:
            continue
        host = s._hostname + ".local"
        ip = _address(s)
        if q == host.lower() and qtype in (1, 255) and ip:
            answers.append(_rr(host, 1, bytes(int(x) for x in ip.split("."))))
        for (stype, proto), port in s._services.items():
            svc = "%s.%s.local" % (stype, proto)
            inst = "%s.%s" % (s.instance_name, svc)
            if q == "_services._dns-sd._udp.local" and qtype in (12, 255):
                answers.append(_rr("_services._dns-sd._udp.local", 12, _name(svc)))
            if q == svc.lower() and qtype in (12, 255):
                answers.append(_rr(svc, 12, _name(inst)))
            if q == inst.lower() and qtype in (33, 255):
                answers.append(_rr(inst, 33, struct.pack("!HHH", 0, 0, port) + _name(host)))
            if q == inst.lower() and qtype in (16, 255):
                answers.append(_rr(inst, 16, b"\x00"))  # Espressif publishes no TXT: an empty record
    if not answers:
        return None
    return struct.pack("!HHHHHH", qid, 0x8400, 1, len(answers), 0, 0) + question + b"".join(answers)


def serve(port, host="127.0.0.1"):
    """Host hook: answer DNS queries for the published records on host:port (a daemon thread); returns the port."""
    global _responder
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((host, port))
    _responder = sock

    def loop():
        while True:
            try:
                data, addr = sock.recvfrom(1500)
            except OSError:
                return
            try:
                out = answer(data)
            except (ValueError, IndexError, struct.error):
                out = None
            if out is not None:
                sock.sendto(out, addr)

    threading.Thread(target=loop, name="mdns-standin", daemon=True).start()
    _hostenv.mdns_port = sock.getsockname()[1]
    return _hostenv.mdns_port
