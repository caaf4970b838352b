"""mDNS: the advertiser on the mdns stand-in, looked up by a real DNS client (dnspython) on 127.0.0.1."""

import dns.message
import dns.query
import dns.rdatatype
import mdns
import pytest
import wifi

from services.network.mdns_service import MdnsAdvertiser

HOST = "meterplus-024d50000001"


@pytest.fixture(scope="module")
def port():
    return mdns.serve(0)


@pytest.fixture
def radio(monkeypatch):
    r = wifi.Radio()
    r.connect("HostNetwork", "host-password")
    return r


def ask(port, name, rtype):
    q = dns.message.make_query(name, rtype)
    return dns.query.udp(q, "127.0.0.1", port=port, timeout=2)


def test_hostname_and_both_services_are_published(radio):
    adv = MdnsAdvertiser(lambda: mdns.Server(radio), "024d50000001", 80)
    adv.start()
    try:
        got = [r for r in mdns.records() if r[0] == HOST]
        assert got == [(HOST, HOST, "_http", "_tcp", 80), (HOST, HOST, "_wattwaechter", "_tcp", 80)]
        assert adv.fqdn() == HOST + ".local" and adv.describe()["hostname"] == HOST + ".local"
    finally:
        adv.stop()
    assert not [r for r in mdns.records() if r[0] == HOST]  # stop() withdraws them


def test_a_resolver_finds_the_device_by_service_type_and_name(radio, port):
    adv = MdnsAdvertiser(lambda: mdns.Server(radio), "024d50000001", 8080)
    adv.start()
    try:
        ptr = ask(port, "_wattwaechter._tcp.local.", "PTR")
        instance = ptr.answer[0][0].target.to_text()
        assert instance == HOST + "._wattwaechter._tcp.local."
        srv = ask(port, instance, "SRV").answer[0][0]
        assert srv.port == 8080 and srv.target.to_text() == HOST + ".local."
        a = ask(port, HOST + ".local.", "A").answer[0]
        assert a.rdtype == dns.rdatatype.A and a[0].address == "127.0.0.1"
        http = ask(port, "_http._tcp.local.", "PTR")
        assert http.answer[0][0].target.to_text() == HOST + "._http._tcp.local."
    finally:
        adv.stop()


def test_server_is_one_per_interface_and_a_second_advertise_updates_the_port(radio):
    a = mdns.Server(radio)
    assert mdns.Server(radio) is a
    assert a.hostname == "cpy-000001"   # CircuitPython's default: cpy- and the MAC's last three bytes
    a.advertise_service(service_type="_http", protocol="_tcp", port=80, txt_records=["path=/"])
    a.advertise_service(service_type="_http", protocol="_tcp", port=81)
    assert [r[4] for r in mdns.records() if r[2] == "_http"] == [81]
    a.deinit()
    with pytest.raises(ValueError):
        a.hostname = "x"
    assert mdns.Server(radio) is not a
    mdns.Server(radio).deinit()


def test_the_shelly_emulation_adds_its_service_and_name_and_takes_them_back(radio, port):
    on = [False]
    adv = MdnsAdvertiser(lambda: mdns.Server(radio), "024d50000001", 80, shelly=lambda: on[0])
    adv.start()
    try:
        assert not [r for r in mdns.records() if r[2] == "_shelly"]
        on[0] = True
        adv.poll(0)                       # switched on: the responder is made again with the Shelly service
        shelly = "shellypro3em-024d50000001"
        got = sorted(r for r in mdns.records() if r[0] == HOST)
        assert (HOST, shelly, "_shelly", "_tcp", 80) in got and (HOST, shelly, "_http", "_tcp", 80) in got
        ptr = ask(port, "_shelly._tcp.local.", "PTR")       # what Home Assistant's Shelly integration browses
        assert ptr.answer[0][0].target.to_text() == shelly + "._shelly._tcp.local."
        adv.poll(1)                       # unchanged: nothing is re-created
        assert adv.counters["advertised"] == 2 + 3
        on[0] = False
        adv.poll(2)
        got = [r for r in mdns.records() if r[0] == HOST]
        assert got == [(HOST, HOST, "_http", "_tcp", 80), (HOST, HOST, "_wattwaechter", "_tcp", 80)]
    finally:
        adv.stop()
