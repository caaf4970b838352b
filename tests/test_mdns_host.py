"""python -m host --mdns-port N runs the firmware's own mDNS responder on 127.0.0.1:N: a plain DNS client (dnspython)
reads every record there with unicast queries, and no answer is more than twice the size of its query."""

import socket

import dns.flags
import dns.message
import dns.rdatatype
import pytest

from tests.hostproc import HostProcess, free_port

pytestmark = pytest.mark.slow

DEV = "024d50000001"
HOST = "meterplus-%s.local." % DEV
INST = "meterplus-000001"
SHELLY = "shellypro3em-%s" % DEV


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    port = free_port()
    h = HostProcess(tmp_path_factory.mktemp("drive"), args=["--mdns-port", str(port)], settings={
        "wifi": {"primary": {"ssid": "HostNetwork", "password": "host-password"}},
        "emulation": {"shelly": True, "shellyUdpPort": 0, "shellyUdpPort2": 0}}).start()
    h.mdns_port = port
    try:
        yield h
    finally:
        h.stop()


def ask(host, name, rtype, pad=0):
    """One query as raw datagrams (sizes measured): the parsed answer, query and answer sizes."""
    q = dns.message.make_query(name, rtype, use_edns=0 if pad else None, pad=pad)
    wire = q.to_wire()
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(1.0)
    try:
        for _ in range(15):     # the responder sees the station's address within 2 s of joining
            s.sendto(wire, ("127.0.0.1", host.mdns_port))
            try:
                data = s.recv(2048)
            except socket.timeout:
                continue
            m = dns.message.from_wire(data)
            if m.answer or m.flags & dns.flags.TC:
                return m, len(wire), len(data)
    finally:
        s.close()
    raise AssertionError("no answer for %s %s" % (name, rtype))


def test_every_record_is_read_by_unicast_within_twice_the_query_size(host):
    worst = 0.0
    m, q, a = ask(host, "_wattwaechter._tcp.local.", "PTR")
    worst = max(worst, a / q)
    inst = m.answer[0][0].target.to_text()
    assert inst == INST + "._wattwaechter._tcp.local."
    m, q, a = ask(host, inst, "SRV")
    worst = max(worst, a / q)
    srv = m.answer[0][0]
    assert srv.target.to_text() == HOST and srv.port == host.port and m.answer[0].ttl == 10
    m, q, a = ask(host, inst, "TXT", pad=128)      # the TXT answer is over twice a plain query: padded
    worst = max(worst, a / q)
    assert [s.decode() for s in m.answer[0][0].strings] == ["id=" + DEV, "model=MeterPlus", "ver=0.1.0",
                                                            "mac=02:4D:50:00:00:01"]
    m, q, a = ask(host, HOST, "A")
    worst = max(worst, a / q)
    assert m.answer[0][0].address == "127.0.0.1"
    m, q, a = ask(host, "_http._tcp.local.", "PTR", pad=128)       # two instances: a padded query has room
    worst = max(worst, a / q)
    assert sorted(rr.target.to_text() for rr in m.answer[0]) == [INST + "._http._tcp.local.",
                                                                 SHELLY + "._http._tcp.local."]
    m, q, a = ask(host, SHELLY + "._shelly._tcp.local.", "TXT", pad=256)
    worst = max(worst, a / q)
    txt = {s.decode() for s in m.answer[0][0].strings}
    assert {"gen=2", "app=Pro3EM", "id=" + SHELLY} <= txt
    m, q, a = ask(host, "_http._tcp.local.", "PTR")                # unpadded: cut, and says so
    worst = max(worst, a / q)
    assert m.flags & dns.flags.TC and (not m.answer or len(m.answer[0]) == 1)
    assert worst <= 2.0


def test_system_info_names_the_responder(host):
    status, info, _ = host.get("/api/v1/system/info")
    assert status == 200
    mdns = {e["name"]: e["value"] for e in info["mdns"]}
    assert mdns["responder"] == "own" and mdns["hostname"] == HOST.rstrip(".")
    assert mdns["answers_legacy"] >= 1
