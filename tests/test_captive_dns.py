"""Captive-portal DNS on a stand-in socketpool socket, asked by a real DNS client library (dnspython)."""

import os
import socket
import time

import dns.flags
import dns.message
import dns.opcode
import dns.query
import dns.rcode
import dns.rdatatype
import pytest
import socketpool

from services.network.captive_dns import CaptiveDns
from services.network.dns_wire import answer_into
from tests.hostproc import free_port
from tools.mpvm import MicroVM


class Wifi:
    """The two facts the captive DNS reads from the WiFi manager."""

    def __init__(self, ap=True, joined=False):
        self.ap = ap
        self.joined = joined

    def ap_active(self):
        return self.ap

    def connected(self):
        return self.joined


@pytest.fixture
def dns_server():
    wifi = Wifi()
    port = free_port()
    srv = CaptiveDns(socketpool.SocketPool(None), wifi, host="127.0.0.1", port=port)
    srv.start()
    srv.poll(0)
    client = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    yield srv, wifi, port, client
    client.close()
    srv.stop()


def ask(srv, port, client, msg, polls=20):
    """Send a dnspython message, poll the server, return dnspython's parsed answer (or None)."""
    dns.query.send_udp(client, msg, ("127.0.0.1", port))
    client.settimeout(0.05)
    for _ in range(polls):
        srv.poll(0)
        try:
            wire, _addr = client.recvfrom(1500)
        except socket.timeout:
            continue
        return dns.message.from_wire(wire)
    return None


@pytest.mark.parametrize("name", ["connectivitycheck.gstatic.com.", "captive.apple.com.", "www.msftconnecttest.com.",
                                  "meter.plus.", "x."])
def test_every_a_query_is_answered_with_the_ap_address(dns_server, name):
    srv, _wifi, port, client = dns_server
    q = dns.message.make_query(name, "A")
    r = ask(srv, port, client, q)
    assert r is not None and q.is_response(r)   # dnspython's own check: id and question match
    assert r.rcode() == dns.rcode.NOERROR and r.flags & dns.flags.AA and r.flags & dns.flags.RD
    rrset = r.find_rrset(r.answer, dns.name.from_text(name), dns.rdataclass.IN, dns.rdatatype.A)
    assert [rd.address for rd in rrset] == ["192.168.4.1"] and rrset.ttl == 60


def test_aaaa_gets_an_empty_answer_and_other_opcodes_notimp(dns_server):
    srv, _wifi, port, client = dns_server
    r = ask(srv, port, client, dns.message.make_query("example.com.", "AAAA"))
    assert r.rcode() == dns.rcode.NOERROR and r.answer == []
    q = dns.message.make_query("example.com.", "A")
    q.set_opcode(dns.opcode.NOTIFY)
    r = ask(srv, port, client, q)
    assert r.rcode() == dns.rcode.NOTIMP and r.answer == []


def test_edns_query_is_answered(dns_server):
    srv, _wifi, port, client = dns_server
    q = dns.message.make_query("example.org.", "A", use_edns=0)
    r = ask(srv, port, client, q)
    assert r.answer[0][0].address == "192.168.4.1"


@pytest.mark.parametrize("wire", [
    b"\x12\x34\x01\x00\x00\x01",                                       # shorter than a header
    b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x07example",    # name runs past the end
    b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\xc0\x0c\x00\x01\x00\x01",   # pointer in the question
    b"\x12\x34\x81\x80\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x01",       # a response, not a query
    b"\x12\x34\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x01",       # no question
])
def test_malformed_packets_are_dropped_and_counted(dns_server, wire):
    srv, _wifi, port, client = dns_server
    client.sendto(wire, ("127.0.0.1", port))
    client.settimeout(0.05)
    for _ in range(5):
        srv.poll(0)
    with pytest.raises(socket.timeout):
        client.recvfrom(1500)
    assert srv.counters["dropped"] == 1
    # Still serving afterwards.
    assert ask(srv, port, client, dns.message.make_query("a.b.", "A")) is not None


def test_a_flood_is_answered_a_few_per_poll(dns_server):
    srv, _wifi, port, client = dns_server
    for i in range(10):
        dns.query.send_udp(client, dns.message.make_query("n%d.example." % i, "A"), ("127.0.0.1", port))
    time.sleep(0.05)
    srv.poll(0)
    assert srv.counters["answers"] == srv.max_per_poll
    for _ in range(5):
        srv.poll(0)
    assert srv.counters["answers"] == 10


def test_socket_only_while_the_ap_serves_a_first_setup(dns_server):
    srv, wifi, _port, _client = dns_server
    base = socketpool.open_count()
    assert srv.describe()["listening"]
    wifi.joined = True           # the station joined: names resolve normally again
    srv.poll(0)
    assert socketpool.open_count() == base - 1 and not srv.describe()["listening"]
    wifi.joined = False
    wifi.ap = False
    srv.poll(0)
    assert socketpool.open_count() == base - 1
    wifi.ap = True
    srv.poll(0)
    assert socketpool.open_count() == base and srv.describe()["listening"]


def test_out_of_sockets_waits_and_retries_without_raising():
    pool = socketpool.SocketPool(None)
    wifi = Wifi()
    srv = CaptiveDns(pool, wifi, host="127.0.0.1", port=free_port())
    held = []
    try:
        while socketpool.open_count() < socketpool.MAX_SOCKETS:
            held.append(pool.socket(pool.AF_INET, pool.SOCK_DGRAM))
        srv.poll(1000)
        assert srv.counters["no_socket"] == 1 and not srv.describe()["listening"]
        held.pop().close()
        srv.poll(2000)
        assert srv.counters["no_socket"] == 1          # waits retry_ms before the next try
        srv.poll(1000 + srv.retry_ms)
        assert srv.describe()["listening"]
    finally:
        srv.stop()
        for s in held:
            s.close()


def test_wire_module_gives_the_same_bytes_in_micropython():
    q = dns.message.make_query("captive.apple.com.", "A").to_wire()
    out = bytearray(512)
    n = answer_into(bytearray(q), len(q), out, b"\xc0\xa8\x04\x01")
    wire_py = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "services", "network",
                           "dns_wire.py")
    with MicroVM(extra_files=[(wire_py, "dns_wire.py")]) as vm:
        text, _fuel = vm.run("from dns_wire import answer_into\n"
                             "q = bytearray(%r)\nout = bytearray(512)\n"
                             "n = answer_into(q, len(q), out, bytes((192, 168, 4, 1)))\n"
                             "print(bytes(out[:n]).hex())\n" % bytes(q))
    assert text.strip() == bytes(out[:n]).hex()
