"""Our mDNS responder on crafted packets: probing, announcing, QM/QU/legacy answers, known answers, cache-flush bit,
TTLs, goodbyes, conflict renaming; every packet read back with dnspython (a DNS implementation nobody here wrote)."""

import errno
import random
import struct

import dns.flags
import dns.message
import dns.rdataclass
import dns.rdatatype
import dns.rrset
import pytest

from services.network.mdns_responder import MDNS_GROUP, MDNS_PORT, MdnsResponder, service_list
from services.network.mdns_wire import name_equals, skip_name

DEV = "024d50000001"
HOST = "meterplus-%s.local." % DEV
INST = "meterplus-000001"                 # the services' instance name: the id's last 6 digits
IP = bytes((192, 168, 1, 50))
GROUP = (MDNS_GROUP, MDNS_PORT)
PEER = ("192.168.1.20", MDNS_PORT)        # another mDNS host (port 5353)
LEGACY = ("192.168.1.20", 40000)          # a plain DNS resolver


class FakeSock:
    """A CircuitPython UDP socket: recvfrom_into from a queue (EAGAIN when empty), sendto recorded."""

    def __init__(self, join_fails=False):
        self.inbox = []
        self.sent = []
        self.opts = []
        self.bound = None
        self.closed = False
        self.join_fails = join_fails

    def setblocking(self, flag):
        self.blocking = flag

    def bind(self, addr):
        self.bound = addr

    def setsockopt(self, level, opt, value):
        if self.join_fails and opt == 3:
            raise OSError(errno.ENOMEM, "join")
        self.opts.append((level, opt, bytes(value) if not isinstance(value, int) else value))

    def recvfrom_into(self, buf):
        if not self.inbox:
            raise OSError(errno.EAGAIN, "EAGAIN")
        data, addr = self.inbox.pop(0)
        buf[:len(data)] = data
        return len(data), addr

    def sendto(self, data, addr):
        self.sent.append((bytes(data), addr))
        return len(data)

    def close(self):
        self.closed = True


class FakePool:
    AF_INET = 2
    SOCK_DGRAM = 2

    def __init__(self, **kw):
        self.kw = kw
        self.socks = []

    def socket(self, family, kind):
        s = FakeSock(**self.kw)
        self.socks.append(s)
        return s


class Emul:
    def __init__(self):
        self.on = False


def make(shelly=None, join_fails=False, fallback=None, port=MDNS_PORT, log=None):
    pool = FakePool(join_fails=join_fails)
    emu = shelly or Emul()
    r = MdnsResponder(pool, lambda: IP, "meterplus-" + DEV,
                      lambda: service_list(DEV, 80, "0.1.0", emu.on),
                      changed=lambda: emu.on, port=port, fallback=fallback, log=log)
    r.start()
    return r, pool.socks[0], emu


def run_until_running(r, sock, t=0):
    """Poll through probing (3 x 250 ms) and announcing (2 x 1 s); returns the time reached."""
    for _ in range(40):
        r.poll(t)
        t += 100
    return t


def flush_bits(data):
    """The wire with the class's top bit (cache-flush / QU) cleared everywhere, and which records had it."""
    buf = bytearray(data)
    qd, an, ns, ar = struct.unpack_from("!HHHH", buf, 4)
    pos = 12
    for _ in range(qd):
        pos = skip_name(buf, len(buf), pos)
        buf[pos + 2] &= 0x7F
        pos += 4
    flags = []
    for _ in range(an + ns + ar):
        pos = skip_name(buf, len(buf), pos)
        flags.append(bool(buf[pos + 2] & 0x80))
        buf[pos + 2] &= 0x7F
        pos += 10 + struct.unpack_from("!H", buf, pos + 8)[0]
    return bytes(buf), flags


def parse(data):
    """dnspython reads the message once the cache-flush bits are out of the way (it takes them for a class)."""
    return dns.message.from_wire(flush_bits(data)[0])


def sent_to(sock, addr):
    return [parse(d) for d, a in sock.sent if a == addr]


def query(name, rtype, qu=False, known=(), qid=0):
    q = dns.message.make_query(name, rtype)
    q.id = qid
    q.flags = 0
    for rr in known:
        q.answer.append(rr)
    wire = bytearray(q.to_wire())
    if qu:   # the QU bit: the top bit of the question's class
        end = 12 + len(dns.name.from_text(name).to_wire())
        wire[end + 2] |= 0x80
    return bytes(wire)


def rrsets(msg):
    out = {}
    for rr in msg.answer + msg.additional:
        out.setdefault((rr.name.to_text().lower(), dns.rdatatype.to_text(rr.rdtype)), []).append(rr)
    return out


def test_probes_three_times_then_announces_twice_with_cache_flush_on_unique_records():
    r, sock, _ = make()
    assert sock.bound == ("0.0.0.0", 5353) and not sock.opts       # the join waits for the station's address
    run_until_running(r, sock)
    assert (0, 3, bytes((224, 0, 0, 251)) + IP) in sock.opts        # joined 224.0.0.251 on the station address
    msgs = sent_to(sock, GROUP)
    probes = [m for m in msgs if not m.flags & dns.flags.QR]
    announces = [m for m in msgs if m.flags & dns.flags.QR]
    assert len(probes) == 3 and len(announces) == 2
    qnames = {q.name.to_text() for q in probes[0].question}
    assert HOST in qnames and INST + "._wattwaechter._tcp.local." in qnames
    assert all(q.rdtype == dns.rdatatype.ANY for q in probes[0].question)
    assert probes[0].authority                                      # the proposed records, for tie-breaking
    raw = sock.sent[0][0]
    assert raw[12 + len(dns.name.from_text(HOST).to_wire()) + 2] & 0x80      # the first probe asks QU
    assert not sock.sent[1][0][12 + len(dns.name.from_text(HOST).to_wire()) + 2] & 0x80
    a = announces[0]
    got = rrsets(a)
    assert got[(HOST, "A")][0][0].address == "192.168.1.50"
    # the cache-flush bit on the unique records (A, SRV, TXT), not on the shared PTRs
    flags = flush_bits(sock.sent[3][0])[1]
    kinds = [rr.rdtype for rr in a.answer for _ in rr]
    assert flags == [k != dns.rdatatype.PTR for k in kinds]
    ptr = got[("_wattwaechter._tcp.local.", "PTR")]
    assert ptr[0].ttl == 4500 and got[(HOST, "A")][0].ttl == 120
    txt = got[(INST + "._wattwaechter._tcp.local.", "TXT")][0][0]
    assert [s.decode() for s in txt.strings] == ["id=" + DEV, "model=MeterPlus", "ver=0.1.0",
                                                 "mac=02:4D:50:00:00:01"]
    assert ("_services._dns-sd._udp.local.", "PTR") in got


def test_a_qm_question_is_answered_to_the_group_with_additionals():
    r, sock, _ = make()
    t = run_until_running(r, sock)
    sock.sent.clear()
    sock.inbox.append((query("_wattwaechter._tcp.local.", "PTR"), PEER))
    r.poll(t + 1500)
    (m,) = sent_to(sock, GROUP)
    assert m.id == 0 and m.flags & dns.flags.AA and not m.question
    assert [rr.name.to_text() for rr in m.answer] == ["_wattwaechter._tcp.local."]
    kinds = {(rr.name.to_text(), dns.rdatatype.to_text(rr.rdtype)) for rr in m.additional}
    inst = INST + "._wattwaechter._tcp.local."
    assert {(inst, "SRV"), (inst, "TXT"), (HOST, "A")} <= kinds


def test_a_record_multicast_within_the_last_second_is_not_sent_again():
    r, sock, _ = make()
    t = run_until_running(r, sock)
    sock.sent.clear()
    sock.inbox.append((query(HOST, "A"), PEER))
    r.poll(t + 1500)
    sock.inbox.append((query(HOST, "A"), PEER))
    r.poll(t + 1600)
    assert len(sent_to(sock, GROUP)) == 1
    sock.inbox.append((query(HOST, "A"), PEER))
    r.poll(t + 2600)
    assert len(sent_to(sock, GROUP)) == 2


def test_a_qu_question_is_answered_to_the_asker():
    r, sock, _ = make()
    t = run_until_running(r, sock)
    sock.sent.clear()
    sock.inbox.append((query(HOST, "A", qu=True), PEER))
    r.poll(t + 1500)
    (m,) = sent_to(sock, PEER)
    assert m.answer[0][0].address == "192.168.1.50" and not sent_to(sock, GROUP)


def test_a_legacy_query_gets_its_id_and_question_back_ttl_10_and_no_cache_flush():
    r, sock, _ = make()
    t = run_until_running(r, sock)
    sock.sent.clear()
    q = query(INST + "._wattwaechter._tcp.local.", "SRV", qid=0x1234)
    sock.inbox.append((q, LEGACY))
    r.poll(t + 1500)
    ((data, addr),) = sock.sent
    assert addr == LEGACY
    m = parse(data)
    assert m.id == 0x1234 and m.question[0].name.to_text() == INST + "._wattwaechter._tcp.local."
    assert m.answer[0].ttl == 10 and m.answer[0].rdclass == dns.rdataclass.IN   # no cache-flush bit
    assert m.answer[0][0].port == 80 and len(data) <= 2 * len(q)


def test_a_legacy_answer_that_would_be_over_twice_the_query_is_cut_and_says_so():
    r, sock, _ = make()
    t = run_until_running(r, sock)
    sock.sent.clear()
    plain = query(INST + "._wattwaechter._tcp.local.", "TXT", qid=1)          # 59 B; the TXT answer: 134 B
    sock.inbox.append((plain, LEGACY))
    r.poll(t + 100)
    m = parse(sock.sent[-1][0])
    assert m.flags & dns.flags.TC and not m.answer and len(sock.sent[-1][0]) <= 2 * len(plain)
    padded = legacy_query(INST + "._wattwaechter._tcp.local.", "TXT", pad=128)
    sock.inbox.append((padded, LEGACY))
    r.poll(t + 200)
    m = parse(sock.sent[-1][0])
    assert not m.flags & dns.flags.TC and "mac=02:4D:50:00:00:01" in [s.decode() for s in m.answer[0][0].strings]
    assert len(sock.sent[-1][0]) <= 2 * len(padded)


def test_known_answers_with_half_the_ttl_left_are_suppressed():
    r, sock, _ = make()
    t = run_until_running(r, sock)
    sock.sent.clear()
    inst = INST + "._http._tcp.local."
    fresh = dns.rrset.from_text("_http._tcp.local.", 4500, "IN", "PTR", inst)
    sock.inbox.append((query("_http._tcp.local.", "PTR", known=[fresh]), PEER))
    r.poll(t + 1500)
    assert not sock.sent and r.counters["known_answers"] == 1
    stale = dns.rrset.from_text("_http._tcp.local.", 100, "IN", "PTR", inst)      # < half of 4500: answered
    sock.inbox.append((query("_http._tcp.local.", "PTR", known=[stale]), PEER))
    r.poll(t + 1600)
    assert len(sent_to(sock, GROUP)) == 1


def test_nothing_is_answered_while_probing():
    r, sock, _ = make()
    r.poll(0)
    sock.inbox.append((query(HOST, "A"), PEER))
    r.poll(100)
    assert all(not parse(d).answer for d, _ in sock.sent)


def test_a_conflicting_answer_while_probing_renames_the_host():
    r, sock, _ = make()
    r.poll(0)
    resp = dns.message.make_response(dns.message.make_query(HOST, "A"))
    resp.question = []
    resp.answer.append(dns.rrset.from_text(HOST, 120, "IN", "A", "192.168.1.99"))
    sock.inbox.append((resp.to_wire(), PEER))
    r.poll(100)
    assert r.fqdn() == "meterplus-%s-2.local" % DEV and r.counters["conflicts"] == 1
    run_until_running(r, sock, 200)
    last = parse(sock.sent[-1][0])
    assert ("meterplus-%s-2.local." % DEV, "A") in rrsets(last)
    assert INST + "-2._http._tcp.local." in {rr.name.to_text() for rr in last.answer}


def test_our_own_announcement_looped_back_is_no_conflict():
    r, sock, _ = make()
    t = run_until_running(r, sock)
    for data, _ in list(sock.sent):
        sock.inbox.append((data, ("192.168.1.50", MDNS_PORT)))
    for i in range(4):
        r.poll(t + 100 * i)
    assert "conflicts" not in r.counters and r.fqdn() == HOST.rstrip(".")


def test_a_probe_after_the_services_changed_hears_our_own_records_and_keeps_the_names():
    """The Shelly turns on after the first announcement (code.py wires the emulation from the loop): the new probe
    hears our earlier announcement (looped back, or a cache's answer) while probing. Equal records are no conflict
    (RFC 6762 9: inconsistent rdata), so no name becomes -2; another host's A record still is one."""
    r, sock, emu = make()
    t = run_until_running(r, sock)
    earlier = [data for data, _ in sock.sent]
    emu.on = True
    r.poll(t + 10)                        # the change: probing again
    for data in earlier:
        sock.inbox.append((data, ("192.168.1.50", MDNS_PORT)))
    for i in range(4):
        r.poll(t + 20 + 100 * i)
    assert "conflicts" not in r.counters and r.fqdn() == HOST.rstrip(".")
    r.poll(t + 2000)
    resp = dns.message.Message(id=0)
    resp.flags = dns.flags.QR | dns.flags.AA
    resp.answer.append(dns.rrset.from_text(HOST, 120, "IN", "A", "192.168.1.99"))
    emu.on = False
    r.poll(t + 2100)                      # probing again, and now another host claims our name
    sock.inbox.append((resp.to_wire(), PEER))
    r.poll(t + 2200)
    assert r.counters["conflicts"] == 1 and r.fqdn().endswith("-2.local")


def test_a_conflict_after_announcing_says_goodbye_and_renames():
    r, sock, _ = make()
    t = run_until_running(r, sock)
    sock.sent.clear()
    resp = dns.message.Message(id=0)
    resp.flags = dns.flags.QR | dns.flags.AA
    resp.answer.append(dns.rrset.from_text(HOST, 120, "IN", "A", "192.168.1.99"))
    sock.inbox.append((resp.to_wire(), PEER))
    r.poll(t)
    bye = parse(sock.sent[0][0])
    assert all(rr.ttl == 0 for rr in bye.answer) and r.fqdn().endswith("-2.local")


def test_the_shelly_service_comes_with_gen2_txt_and_leaves_with_a_goodbye():
    r, sock, emu = make()
    t = run_until_running(r, sock)
    emu.on = True
    t = run_until_running(r, sock, t + 2000)
    last = rrsets(parse(sock.sent[-1][0]))
    inst = "shellypro3em-%s._shelly._tcp.local." % DEV
    txt = {s.decode() for s in last[(inst, "TXT")][0][0].strings}
    assert {"gen=2", "id=shellypro3em-" + DEV, "app=Pro3EM", "arch=esp8266"} <= txt
    assert any(s.startswith("fw_id=") for s in txt)
    assert last[("shellypro3em-%s._http._tcp.local." % DEV, "SRV")][0][0].target.to_text() == HOST
    sock.sent.clear()
    emu.on = False
    run_until_running(r, sock, t + 2000)
    bye = parse(sock.sent[0][0])
    assert bye.answer and all(rr.ttl == 0 for rr in bye.answer)
    assert {rr.name.to_text() for rr in bye.answer} >= {inst, "_shelly._tcp.local."}
    assert "_http._tcp.local." in {rr.name.to_text() for rr in bye.answer}   # only the Shelly _http instance
    gone = [rr for rr in bye.answer if rr.name.to_text() == "_http._tcp.local."]
    assert [rr[0].target.to_text() for rr in gone] == ["shellypro3em-%s._http._tcp.local." % DEV]


def test_stop_sends_goodbyes_for_everything():
    r, sock, _ = make()
    run_until_running(r, sock)
    sock.sent.clear()
    r.stop()
    bye = parse(sock.sent[0][0])
    assert len(bye.answer) >= 8 and all(rr.ttl == 0 for rr in bye.answer) and sock.closed


def test_a_failed_join_falls_back_to_the_system_responder():
    started = []

    class Fallback:
        def start(self):
            started.append("start")

        def poll(self, now_ms):
            started.append("poll")

        def stop(self):
            started.append("stop")

    r, sock, _ = make(join_fails=True, fallback=Fallback)
    r.poll(0)
    assert sock.closed and started == ["start"]
    d = r.describe()
    assert d["responder"] == "system" and "join" in d["fallback_reason"]
    r.poll(100)
    r.stop()
    assert started == ["start", "poll", "stop"]


def test_name_equals_follows_pointers_but_not_loops():
    buf = bytearray(b"\x00" * 12 + b"\x05local\x00" + b"\x03abc\xc0\x0c" + b"\xc0\x1b")
    assert name_equals(buf, len(buf), 19, b"\x03abc\x05local\x00")
    loop = bytearray(b"\x00" * 12 + b"\xc0\x0c")
    assert not name_equals(loop, len(loop), 12, b"\x05local\x00")


def fuzz_packets(seed, count):
    rnd = random.Random(seed)
    base = [query(HOST, "A"), query("_http._tcp.local.", "PTR", qu=True),
            query(INST + "._wattwaechter._tcp.local.", "ANY", qid=7)]
    resp = dns.message.Message(id=0)
    resp.flags = dns.flags.QR | dns.flags.AA
    resp.answer.append(dns.rrset.from_text("_http._tcp.local.", 120, "IN", "PTR", "x._http._tcp.local."))
    base.append(resp.to_wire())
    inst = INST + "._wattwaechter._tcp.local."
    base.append(query("_wattwaechter._tcp.local.", "PTR",
                      known=[dns.rrset.from_text("_wattwaechter._tcp.local.", 4500, "IN", "PTR", inst)]))
    probe = dns.message.make_query(HOST, "ANY")
    probe.authority.append(dns.rrset.from_text(HOST, 120, "IN", "A", "192.168.1.99"))
    base.append(probe.to_wire())
    for _ in range(count):
        kind = rnd.random()
        if kind < 0.15:                      # a well-formed one now and then: the answering path runs amid the junk
            yield rnd.choice(base)
        elif kind < 0.4:
            yield bytes(rnd.getrandbits(8) for _ in range(rnd.randrange(0, 80)))
        else:
            p = bytearray(rnd.choice(base))
            for _ in range(rnd.randrange(1, 6)):
                i = rnd.randrange(12 if rnd.random() < 0.8 else 0, len(p))   # mostly past the header
                p[i] = rnd.getrandbits(8)
            if rnd.random() < 0.3:
                p = p[:rnd.randrange(len(p))]
            if rnd.random() < 0.2:           # header counts made huge
                p[4:12] = struct.pack("!HHHH", 0xFFFF, 0xFFFF, 0xFFFF, 0xFFFF)
            yield bytes(p)


@pytest.mark.parametrize("sender", [PEER, LEGACY])
def test_fuzz_no_packet_faults_stalls_or_amplifies_beyond_twice(sender):
    r, sock, _ = make()
    t = run_until_running(r, sock)
    worst = 0.0
    answered = 0
    for pkt in fuzz_packets(30 + sender[1], 3000):
        sock.sent.clear()
        sock.inbox.append((pkt, sender))
        t += 1100                      # past the once-a-second limit: every packet may be answered
        r.poll(t)
        assert not sock.inbox
        answered += bool(sock.sent)
        for data, addr in sock.sent:
            parse(data)                # whatever goes out is a well-formed DNS message
            if addr != GROUP:          # unicast replies are what a spoofed source could aim at someone
                worst = max(worst, len(data) / max(len(pkt), 1))
    assert worst <= 2.0
    assert answered > 300 and r.counters["bad_packets"] > 300     # the fuzz reaches both the answers and the guards
    sock.inbox.append((query(HOST, "A", qid=5), LEGACY))         # and it still answers afterwards
    r.poll(t + 1100)
    assert parse(sock.sent[-1][0]).answer


def legacy_query(text, qtype, pad=0):
    q = dns.message.make_query(text, qtype, use_edns=0 if pad else None, pad=pad)
    q.id = 9
    return q.to_wire()


def test_every_legacy_question_for_our_names_fits_in_twice_its_size():
    r, sock, emu = make()
    emu.on = True
    t = run_until_running(r, sock)
    t = run_until_running(r, sock, t)
    names = sorted({(rec.name, rec.rtype) for rec in r.records()})
    worst = 0
    for wire_name, rtype in names:
        text = dns.name.from_wire(wire_name, 0)[0].to_text()
        for qtype in (rtype, 255):
            for pad in (0, 256):
                sock.sent.clear()
                q = legacy_query(text, qtype, pad)
                sock.inbox.append((q, LEGACY))
                t += 100
                r.poll(t)
                ((data, addr),) = sock.sent
                m = parse(data)
                worst = max(worst, len(data) / len(q))
                whole = m.answer and not m.flags & dns.flags.TC
                matching = [x for x in r.records() if x.name == wire_name and qtype in (x.rtype, 255)]
                own = (len(matching) == 1 and b"shelly" not in matching[0].name + matching[0].rdata
                       and matching[0].rtype != dns.rdatatype.TXT)
                if pad or own:
                    # each of Meter Plus' own records but the TXT fits a plain query; several answers, the TXT
                    # records and the Shelly's long names need a query padded to half their size (RFC 7830)
                    assert whole, (text, qtype, pad)
                else:
                    assert whole or m.flags & dns.flags.TC, (text, qtype)
    assert worst <= 2.0


def claim(name, ip="192.168.1.99"):
    """Another host's answer: name's A record is ip (authoritative, cache-flush not needed for the check)."""
    resp = dns.message.Message(id=0)
    resp.flags = dns.flags.QR | dns.flags.AA
    resp.answer.append(dns.rrset.from_text(name, 120, "IN", "A", ip))
    return resp.to_wire()


def logged():
    from core.log import Log

    log = Log(capacity=256)
    lines = []
    log.sinks.append(lines.append)
    return log, lines


def test_a_flood_of_conflicts_slows_probing_but_never_stops_the_responder():
    """RFC 6762 8.1: 15 conflicts within 10 s and each further probe waits 5 s; the rename waits with it (a conflict
    heard meanwhile is for the name still waiting to be probed), so a flood renames no faster than that."""
    log, lines = logged()
    r, sock, _ = make(log=log)
    t = run_until_running(r, sock)
    for _ in range(20):
        sock.inbox.append((claim(r.fqdn() + "."), PEER))
        t += 100
        r.poll(t)
    assert r.counters["conflicts"] == 20 and r.counters["conflict_bursts"] == 1
    assert r.fqdn() == "meterplus-%s-16.local" % DEV and r.counters["conflicts_held"] == 5
    assert len(lines) == 15 and "each further rename waits 5 s" in lines[-1][2]
    sock.sent.clear()
    t = run_until_running(r, sock, t + 100)           # 4 s: still waiting out the burst
    assert not sock.sent
    t = run_until_running(r, sock, t)
    assert len(sent_to(sock, GROUP)) == 5             # then three probes and two announcements


def test_a_host_that_claims_every_name_from_port_5353_renames_us_once_per_5_s_and_logs_no_more():
    """Issue 36 point 6: a peer on port 5353 answering for every name we take, ten times a second for 60 s: 15 quick
    renames, then one per 5 s, each probe waiting 5 s; the log gets the first 15 lines and one about the burst.
    After 10 s without a conflict, a conflict counts from the start again."""
    log, lines = logged()
    r, sock, _ = make(log=log)
    t = run_until_running(r, sock)
    renamed_at = []
    for _ in range(600):
        name = r.fqdn()
        sock.inbox.append((claim(name + "."), PEER))
        t += 100
        r.poll(t)
        if r.fqdn() != name:
            renamed_at.append(t)
    assert r.counters["conflicts"] == 600
    slow = renamed_at[15:]
    assert len(renamed_at) <= 15 + 60 // 5 and all(b - a >= 5000 for a, b in zip(slow, slow[1:]))
    assert len(lines) == 15
    t = run_until_running(r, sock, t + 10000)         # quiet for over 10 s: probed and announced
    sock.inbox.append((claim(r.fqdn() + "."), PEER))
    name = r.fqdn()
    r.poll(t + 100)
    assert r.fqdn() != name and len(lines) == 16 and lines[-1][2] == "mdns: name conflict, now %s" % r.fqdn()


@pytest.mark.parametrize("running", [False, True], ids=["probing", "running"])
def test_a_forged_answer_from_an_ephemeral_port_is_no_conflict(running):
    """Issue 36 point 6: RFC 6762 6: a response whose source port is not 5353 is ignored (a legacy unicast answer at
    best; 159 renames in 30 s and 14 KB of log from forgeries before). No rename, no log line, no probe again; the
    same answer from port 5353 is a conflict."""
    log, lines = logged()
    r, sock, _ = make(log=log)
    t = run_until_running(r, sock) if running else 0
    r.poll(t)
    sent = len(sock.sent)
    for i in range(50):
        sock.inbox.append((claim(HOST), ("192.168.1.66", 40000 + i)))
        r.poll(t + 10 + i)
    assert r.fqdn() == HOST.rstrip(".") and "conflicts" not in r.counters and not lines
    assert r.counters["responses_off_port"] == 50
    if running:
        assert len(sock.sent) == sent            # nothing sent because of them: no goodbye, no probes
    sock.inbox.append((claim(HOST), ("192.168.1.66", MDNS_PORT)))
    r.poll(t + 100)
    assert r.fqdn() == "meterplus-%s-2.local" % DEV and r.counters["conflicts"] == 1
    assert [e[2] for e in lines] == ["mdns: name conflict, now meterplus-%s-2.local" % DEV]


def test_a_forged_probe_from_an_ephemeral_port_does_not_hold_our_probing_back():
    """A probe (a query with our name in its authority section) comes from port 5353; one from another port with
    lexicographically later data would make us defer a second each time (RFC 6762 8.2), so it is ignored."""
    r, sock, _ = make()
    r.poll(0)
    q = dns.message.make_query(HOST, "ANY")
    q.id = 0
    q.flags = 0
    q.authority.append(dns.rrset.from_text(HOST, 120, "IN", "A", "255.255.255.255"))
    for i in range(10):
        sock.inbox.append((q.to_wire(), ("192.168.1.66", 40000)))
        r.poll(10 + 100 * i)
    assert "probe_deferred" not in r.counters
    run_until_running(r, sock, 1000)
    assert r.fqdn() == HOST.rstrip(".") and r.counters["announcements"] == 2
    r2, sock2, _ = make()                                 # the same probe from port 5353 while we probe: we defer
    r2.poll(0)
    sock2.inbox.append((q.to_wire(), PEER))
    r2.poll(100)
    assert r2.counters["probe_deferred"] == 1


def test_off_port_5353_it_joins_nothing_and_answers_every_asker_directly():
    r, sock, _ = make(port=5999)
    r.poll(0)
    assert sock.bound == ("0.0.0.0", 5999) and not sock.opts and not sock.sent     # no join, no probes
    sock.inbox.append((query(HOST, "A"), PEER))                       # even an mDNS querier on port 5353
    r.poll(100)
    ((data, addr),) = sock.sent
    m = parse(data)
    assert addr == PEER and m.question and m.answer[0][0].address == "192.168.1.50" and m.answer[0].ttl == 10


def test_the_socket_budget_decides_between_our_socket_and_the_system_responder_and_follows_the_settings():
    """Every feature on (Modbus, both emulations, MQTT) may hold the device's 8 sockets: our responder then takes
    none (the HTTP API keeps its way in) and CircuitPython's answers; once a feature goes off, ours comes back."""
    events = []

    class Fallback:
        def start(self):
            events.append("start")

        def poll(self, now_ms):
            events.append("poll")

        def stop(self):
            events.append("stop")

    verdict = ["socket budget: 8 of 8"]
    pool = FakePool()
    r = MdnsResponder(pool, lambda: IP, "meterplus-" + DEV, lambda: service_list(DEV, 80, "0.1.0", False),
                      fallback=Fallback, budget=lambda: verdict[0])
    r.start()
    assert pool.socks == [] and events == ["start"]
    d = r.describe()
    assert d["responder"] == "system" and d["fallback_reason"].startswith("socket budget")
    r.poll(0)
    verdict[0] = None                       # a feature went off
    r.poll(1000)                            # not looked at yet (every address_every_ms)
    assert pool.socks == []
    r.poll(r.address_every_ms + 10)
    assert len(pool.socks) == 1 and "stop" in events and r.describe()["responder"] == "own"
    verdict[0] = "socket budget: again"
    r.poll(2 * r.address_every_ms + 20)
    assert pool.socks[0].closed and r.describe()["responder"] == "system"


def test_the_budget_counts_what_the_features_on_may_hold():
    from services.network.mdns_wiring import mdns_budget

    class S(dict):
        def get(self, key, default=None):
            return dict.get(self, key, default)

    assert mdns_budget(S({"mqtt.enable": True})) is None
    assert mdns_budget(S({"mqtt.enable": True, "emulation.shelly": True, "emulation.shellyUdpPort": 1010})) is None
    full = S({"mqtt.enable": True, "modbus.enable": True, "emulation.shelly": True, "emulation.shellyUdpPort": 1010,
              "emulation.sma": True})
    assert "socket budget" in mdns_budget(full)
    # MQTT and Modbus: HTTP 3, MQTT, the listener, two clients = 7; the responder lends its socket to an NTP round
    assert mdns_budget(S({"mqtt.enable": True, "modbus.enable": True})) is None
    assert "besides an NTP round" in mdns_budget(S({"mqtt.enable": True, "modbus.enable": True,
                                                    "emulation.shelly": True, "emulation.shellyUdpPort": 1010}))


def test_the_socket_lent_to_an_ntp_round_is_taken_back_once_it_fits_and_the_name_probed_again():
    """Issue 36 finding 6: the budget may give our socket to an NTP round (core/sockbudget.py LENDERS); we answer
    again as soon as a socket is free, joined and probed afresh, looked at every address_every_ms across the wrap."""

    class Budget:
        free = False

        def may_take(self, n=1, rank=2, borrow=False):
            return self.free

    r, sock, _emu = make()
    budget = r.sockets = Budget()
    t = (1 << 29) - 1500                      # just below the tick wrap
    budget.free = True
    t = run_until_running(r, sock, t) % (1 << 29)
    assert r.lendable()
    budget.free = False
    r.lend()
    assert sock.closed and r.sockets_held() == 0 and not r.lendable() and r.counters["lent"] == 1
    r.poll(t)                                 # still no socket free: nothing opened
    r.poll((t + r.address_every_ms + 10) % (1 << 29))
    assert len(r._pool.socks) == 1
    budget.free = True                        # the round is over
    t = (t + 2 * r.address_every_ms + 20) % (1 << 29)
    r.poll(t)
    assert len(r._pool.socks) == 2 and r.counters["taken_back"] == 1
    back = r._pool.socks[1]
    r.poll(t)                                 # the address looked at once: the group joined, probing again
    assert back.opts and back.sent and r.describe()["responder"] == "own"
