"""The history store, serializer and service inside a real MicroPython VM give what CPython gives."""

import json
import os

import pytest

from services.history import store as hs
from tools.mpvm import MicroVM

DAY = 20614                      # 2026-06-10
T0 = DAY * 86400 - 7200          # local midnight, Berlin summer time


@pytest.fixture(scope="module")
def staged(tmp_path_factory):
    d = tmp_path_factory.mktemp("vmdrive")
    old = os.getcwd()
    os.chdir(d)
    try:
        st = hs.HistoryStore("history.bin", hr_cap=200, lr_cap=8)
        st.open()
        st.write([(0, T0 + 900 * i, DAY + i // 96, 900 + i, 120, hs.F_POWER | (hs.F_NO_EXPORT if i == 5 else 0),
                   10 ** 14 + 2250 * i, 7 * i, 2250, 7) for i in range(150)],
                 [(0, T0 + 86400 * i, DAY + i, 96, 120, 0, 123456789 + 216000 * i, 0, 216000, 0) for i in range(3)])
        with open("history.bin", "r+b") as f:      # one torn record: both sides must skip it
            f.seek(hs.HEADER_SIZE + 3 * hs.REC_SIZE + 9)
            f.write(b"\x55\xaa")
        st = hs.HistoryStore("history.bin", hr_cap=200, lr_cap=8)
        st.open()
        expect = {
            "hr": "".join(hs.high_res_json((st.records(hs.HR, 0xFFFFFFFF, DAY, DAY + 1, True),), DAY)),
            "lr": "".join(hs.low_res_json((st.records(hs.LR, 0xFFFFFFFF, DAY - 1, DAY + 5, True),), DAY - 1, 6)),
        }
        with MicroVM(packages=("core", "meter", "services"), extra_files=[(str(d / "history.bin"), "h.bin")]) as vm:
            yield vm, expect
    finally:
        os.chdir(old)


def test_serializer_output_is_byte_identical_in_the_vm(staged):
    vm, expect = staged
    out, _fuel = vm.run("""
from services.history import store as hs
st = hs.HistoryStore("/input/h.bin", hr_cap=200, lr_cap=8)
st.scan()
print("@HR" + "".join(hs.high_res_json((st.records(hs.HR, 0xFFFFFFFF, %d, %d, True),), %d)))
print("@LR" + "".join(hs.low_res_json((st.records(hs.LR, 0xFFFFFFFF, %d, %d, True),), %d, 6)))
print("@BAD", st.hr.bad, st.hr.valid, st.hr.head, st.hr.next_seq)
""" % (DAY, DAY + 1, DAY, DAY - 1, DAY + 5, DAY - 1))
    lines = {ln[:3]: ln[3:] for ln in out.splitlines() if ln.startswith("@")}
    assert lines["@HR"] == expect["hr"]
    assert lines["@LR"] == expect["lr"]
    assert lines["@BA"].split() == ["D", "1", "149", "150", "151"]
    body = json.loads(expect["hr"])
    assert body["count"] == 95 and "export_kW" not in body["items"][4]   # record 3 torn, record 5 import-only


def test_the_service_aggregates_flushes_and_serves_in_the_vm(staged):
    vm, _expect = staged
    out, _fuel = vm.run("""
from core.bus import Bus
from core.tz import Rule
from meter.reading import Reading
from services.history.service import History
from services.history.store import HistoryStore
class Clock:
    def __init__(self, utc):
        self.rule = Rule("CET-1CEST,M3.5.0,M10.5.0/3")
        self.utc = utc
        self.synced = True
    def time(self):
        return self.utc
    def offset_min(self, utc):
        return self.rule.offset_min(utc)
    def local(self, utc):
        return self.rule.local(utc)
class Settings:
    def get(self, key, default=None):
        return default
bus = Bus()
clock = Clock(%d - 5)
h = History(bus, clock, Settings(), HistoryStore("/input/new.bin"))
h.start()
imp = 10 ** 9
for i in range(3 * 360):
    clock.utc += 10
    imp += 25
    bus.publish("reading", Reading(i, {"1.8.0": (imp, -1), "2.8.0": (5, -1), "16.7.0": (900, 0)}))
    h.poll(i * 10000)
print("@", h.store_ok, h.state, h.counters["quarters"], h.counters["flushes"], h.counters["flush_errors"],
      h.store.status, h.store.slices, h.store.ready)
print("@J" + "".join(h.high_res(%d)()))
""" % (T0, DAY))
    first = [ln for ln in out.splitlines() if ln.startswith("@ ")][0].split()
    # The file made a slice per poll (117 of them), the quarter hours that waited flushed after it, then hourly.
    slices = -(-(hs.HEADER_SIZE + (hs.HR_CAP + hs.LR_CAP) * hs.REC_SIZE) // hs.FILL)
    assert first[1:] == ["True", "OK", "11", "3", "0", "created", str(slices), "True"]
    body = json.loads([ln for ln in out.splitlines() if ln.startswith("@J")][0][2:])
    assert body["count"] == 11 and body["items"][1]["import_kW"] == 0.225 and body["items"][1]["power_W"] == 900


def test_a_migration_in_slices_keeps_every_record_in_the_vm(staged, tmp_path):
    vm, _expect = staged
    # CPython's migration of the same file (200/8 slots into 300/10) is the reference.
    with open(os.path.join(vm.root, "h.bin"), "rb") as f:
        data = f.read()
    ref = tmp_path / "m.bin"
    ref.write_bytes(data)
    st = hs.HistoryStore(str(ref), hr_cap=300, lr_cap=10)
    assert st.open() == "migrated"
    want = [list(r) for r in st.records(hs.HR)] + [list(r) for r in st.records(hs.LR)]
    out, _fuel = vm.run("""
from services.history import store as hs
with open("/input/h.bin", "rb") as src, open("/input/m.bin", "wb") as dst:
    dst.write(src.read())
st = hs.HistoryStore("/input/m.bin", hr_cap=300, lr_cap=10)
print("@B", st.begin(), st.slices)
n = 1
while not st.step():
    n += 1
print("@S", st.status, n, st.slices, st.hr.next_seq, st.hr.head)
for r in st.records(hs.HR):
    print("@R", list(r))
for r in st.records(hs.LR):
    print("@R", list(r))
""")
    lines = out.splitlines()
    assert [ln for ln in lines if ln.startswith("@B")] == ["@B migrating 1"]
    slices = -(-(hs.HEADER_SIZE + 310 * hs.REC_SIZE) // hs.FILL)
    status = [ln for ln in lines if ln.startswith("@S")][0].split()
    assert status[1:] == ["migrated", str(slices), str(slices), str(st.hr.next_seq), str(st.hr.head)]
    got = [json.loads(ln[3:]) for ln in lines if ln.startswith("@R")]
    assert got == want and len(got) == 149 + 3
