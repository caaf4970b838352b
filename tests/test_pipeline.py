"""Meter pipeline: decode, plausibility, median, ctRatio, staleness, health, settings changes — with the real bus."""

import binascii
import os

from core.bus import Bus
from core.settings import Settings
from drivers.ir_head import IrHead
from core.supervisor import Supervisor
from drivers.status_led import StatusLed
from meter import sml_encode as enc
from services.metering.pipeline import MeterPipeline, parse_ct, parse_median
from tests.steppedclock import SteppedClock
from tests import CAPTURES as _CAPTURES

CAPTURES = _CAPTURES


def cap(name):
    with open(os.path.join(CAPTURES, name), "rb") as f:
        data = f.read()
    return binascii.unhexlify(data.strip()) if name.endswith(".hex") else data


class Pixels(list):
    def __init__(self):
        list.__init__(self, [(0, 0, 0)])

    def show(self):
        pass


class Uart:
    def __init__(self):
        self.rx = bytearray()

    @property
    def in_waiting(self):
        return len(self.rx)

    def readinto(self, buf):
        n = min(len(buf), len(self.rx))
        if not n:
            return None
        buf[:n] = self.rx[:n]
        del self.rx[:n]
        return n

    def write(self, b):
        return len(b)


SID = bytes.fromhex("0a01534d5400000004d2")


def telegram(imp, power, exp=0, volts=2301, amps=None, seq=0, imp_scaler=-1):
    entries = [
        enc.entry(enc.obis_name("1.8.0"), imp, 30, imp_scaler, signed=False),
        enc.entry(enc.obis_name("2.8.0"), exp, 30, -1, signed=False),
        enc.entry(enc.obis_name("16.7.0"), power, 27, 0),
        enc.entry(enc.obis_name("32.7.0"), volts, 35, -1, signed=False),
    ]
    if amps is not None:
        entries.append(enc.entry(enc.obis_name("31.7.0"), amps, 33, -2, signed=False))
    return enc.transport(enc.sml_file(SID, entries, seq))


class Rig:
    def __init__(self, **settings):
        self.bus = Bus()
        self.settings = Settings()
        self.settings.doc.update(settings)
        self.uart = Uart()
        self.head = IrHead(self.uart, "auto")
        self.led = StatusLed(Pixels())
        self.pipe = MeterPipeline(self.bus, self.settings, self.head, led=self.led)
        self.readings = self.bus.subscribe("reading", 64)
        self.health = self.bus.subscribe("meter_health", 64)
        self.clock = SteppedClock()

    def send(self, data, advance=1000):
        self.clock.advance(advance)
        self.uart.rx += data
        self.head.poll(self.clock())
        self.pipe.poll(self.clock())

    def idle(self, ms):
        self.clock.advance(ms)
        self.head.poll(self.clock())
        self.pipe.poll(self.clock())

    def drain(self):
        out = []
        while len(self.readings):
            out.append(self.readings.pop())
        return out


def test_parse_settings():
    assert parse_median(0) == 1 and parse_median("Off") == 1 and parse_median(9) == 9
    assert parse_median(4) is None and parse_median(True) is None and parse_median("5") is None
    assert parse_ct(1) == 10 and parse_ct(2.5) == 25 and parse_ct(10000) == 100000 and parse_ct(1.1) == 11
    assert parse_ct(9999.9) == 99999 and parse_ct(1.05) is None
    assert parse_ct(0.5) is None and parse_ct(10000.1) is None and parse_ct(1.25) is None and parse_ct("2") is None


def test_reading_is_published_with_timestamp_exact_values_and_server_id():
    rig = Rig(medianFilterSize=0)
    rig.send(telegram(123456789, -150, exp=42))
    (r,) = rig.drain()
    assert r.ts_ms == rig.clock() and r.source == "sml" and r.server_id == SID.hex()
    assert r.values["1.8.0"] == (123456789, -1) and r.values["16.7.0"] == (-150, 0)
    assert r.values["2.8.0"] == (42, -1)
    assert rig.bus.latest("reading") is r
    assert not rig.pipe.stale


def test_real_capture_through_the_whole_chain():
    rig = Rig(medianFilterSize=0)
    rig.send(cap("holley-dtz541-1.hex"))
    rig.send(cap("d0-ebz-dd3-2r06-1.txt"))  # D0 without BCC: the first layout waits for confirmation
    rig.send(cap("d0-ebz-dd3-2r06-1.txt"))
    a, b = rig.drain()
    assert a.values["1.8.0"] == (44998962, -1) and a.source == "sml"
    # a lower counter, but from another meter (server id): a new baseline, not a rejection
    assert b.values["1.8.0"] == (271412830185, -5) and b.source == "d0"  # 2714.12830185 kWh in Wh
    assert rig.pipe.counters["meter_changed"] == 1


def test_median_filter_removes_a_power_spike_and_lags_by_half_the_window():
    rig = Rig(medianFilterSize=5)
    powers = [100, 110, 5000, 120, 130, 140]
    out = []
    for i, p in enumerate(powers):
        rig.send(telegram(1000 + i, p, seq=i))
        out.append(rig.drain()[0].values["16.7.0"][0])
    # windows: [100] [100,110] [100,110,5000] [..120] [..130] [110,5000,120,130,140]
    assert out == [100, 100, 110, 110, 120, 130]
    assert 5000 not in out


def test_median_off_passes_values_through():
    rig = Rig(medianFilterSize=0)
    for i, p in enumerate([100, 5000, 120]):
        rig.send(telegram(1000 + i, p, seq=i))
    assert [r.values["16.7.0"][0] for r in rig.drain()] == [100, 5000, 120]


def test_ct_ratio_scales_energy_power_current_not_voltage():
    rig = Rig(medianFilterSize=0, ctRatio=2.5)
    rig.send(telegram(1000, 200, exp=10, volts=2301, amps=123))
    (r,) = rig.drain()
    v = r.values
    assert v["1.8.0"] == (25000, -2)  # 100.0 Wh * 2.5 = 250.00 Wh, still exact
    assert v["2.8.0"] == (250, -2)
    assert v["16.7.0"] == (5000, -1)
    assert v["31.7.0"] == (3075, -3)
    assert v["32.7.0"] == (2301, -1)


def test_settings_change_is_applied_after_the_bus_says_so():
    rig = Rig(medianFilterSize=0, ctRatio=1)
    rig.send(telegram(1000, 200))
    rig.settings.doc["ctRatio"] = 100
    rig.send(telegram(1001, 200))  # not announced yet: unchanged
    rig.bus.publish("settings", ["ctRatio"])
    rig.idle(10)
    rig.send(telegram(1002, 200))
    assert [r.values["16.7.0"] for r in rig.drain()] == [(200, 0), (200, 0), (20000, 0)]


def test_invalid_setting_falls_back_and_is_counted():
    rig = Rig(medianFilterSize=4, ctRatio=-3)
    assert rig.pipe.median_size == 5 and rig.pipe.ct_tenths == 10
    assert rig.pipe.counters["bad_settings"] == 2


def test_backwards_counter_with_same_server_id_is_rejected_but_another_meter_is_not():
    rig = Rig(medianFilterSize=0)
    rig.send(cap("holley-dtz541-1.hex"))
    rig.send(cap("holley-dtz541-2.hex"))  # another Holley (other server id), 1.8.0 absent
    rig.send(cap("holley-dtz541-1.hex"))  # the first meter again: another change, another baseline
    assert len(rig.drain()) == 3


def test_stale_after_10_s_publishes_none_and_sets_led_error():
    rig = Rig(medianFilterSize=0)
    rig.send(telegram(1000, 200))
    assert rig.drain()[0] is not None
    rig.idle(9000)
    assert not rig.pipe.stale and rig.drain() == []
    rig.idle(1000)
    assert rig.pipe.stale and rig.bus.latest("reading") is None
    assert rig.led.is_active("ERROR") and rig.pipe.state == "WARN"
    assert rig.bus.latest("meter_health")["stale"] is True
    rig.idle(5000)  # None is published once, not on every poll
    rig.send(telegram(1001, 200))
    assert not rig.pipe.stale and not rig.led.is_active("ERROR")
    assert rig.bus.latest("reading").values["16.7.0"] == (200, 0)


def test_a_pipeline_the_supervisor_stops_or_gives_up_leaves_no_reading_behind():
    rig = Rig(medianFilterSize=0)
    rig.send(telegram(1000, 200))
    assert rig.bus.latest("reading") is not None
    sup = Supervisor(rig.clock)
    sup.add(rig.pipe)

    def broken(now_ms):
        raise RuntimeError("pipeline bug")

    rig.pipe.poll = broken
    sup.step()
    assert rig.bus.latest("reading") is None and rig.pipe.state == "WARN"
    rig.pipe.start = lambda: rig.bus.publish("reading", "restarted")  # a restart must be cleared again
    for _ in range(sup.max_restarts + 1):
        rig.clock.advance(sup.backoff_max_ms)
        sup.step()
    assert rig.pipe.state == "FAILED" and rig.bus.latest("reading") is None
    # every reader's age check wraps after 2**29 ms; the reading is gone, not merely old
    rig.clock.advance(1 << 29)
    assert rig.bus.latest("reading") is None


def test_crc_errors_do_not_keep_the_meter_fresh():
    rig = Rig(medianFilterSize=0)
    rig.send(telegram(1000, 200))
    bad = bytearray(telegram(1001, 200))
    bad[-1] ^= 0xFF
    for _ in range(10):
        rig.send(bytes(bad))
    assert rig.pipe.stale
    assert rig.pipe.counters["crc_errors"] == 10
    h = rig.bus.latest("meter_health")
    assert h["crc_errors"] == 10 and h["telegrams_ok"] == 1


def test_meter_is_stale_from_boot_until_the_first_telegram():
    rig = Rig()
    rig.idle(0)
    assert rig.pipe.stale and not rig.led.is_active("ERROR")
    rig.idle(10000)
    assert rig.led.is_active("ERROR")


def test_energy_going_backwards_is_rejected_and_counted():
    rig = Rig(medianFilterSize=0)
    rig.send(telegram(100000, 200))
    rig.send(telegram(99990, 200))
    rig.send(telegram(100001, 200))
    vals = [r.values["1.8.0"] for r in rig.drain()]
    assert vals == [(100000, -1), (100001, -1)]
    assert rig.pipe.counters["implausible"] == 1


def test_energy_jump_beyond_physics_is_rejected():
    rig = Rig(medianFilterSize=0)
    rig.send(telegram(100000, 200))
    # 1 s later: 100 kW for 1 s is 27.8 Wh = 278 tenths; 300 tenths is too much
    rig.send(telegram(100300, 200), advance=1000)
    rig.send(telegram(100270, 200), advance=1000)  # 27.0 Wh in 2 s since the last accepted: fine
    vals = [r.values["1.8.0"] for r in rig.drain()]
    assert vals == [(100000, -1), (100270, -1)]
    assert rig.pipe.counters["implausible"] == 1


def test_a_burst_of_buffered_telegrams_with_one_timestamp_is_plausible():
    rig = Rig(medianFilterSize=0)
    rig.send(telegram(100000, 3600))
    # three telegrams at 3.6 kW (+10 tenths of Wh per second each) read in the same poll
    rig.send(telegram(100010, 3600) + telegram(100020, 3600) + telegram(100030, 3600), advance=1000)
    assert [r.values["1.8.0"][0] for r in rig.drain()] == [100000, 100010, 100020, 100030]
    assert rig.pipe.counters["implausible"] == 0
    rig.send(telegram(100330, 3600) + telegram(100340, 3600), advance=1000)  # +30 Wh in a second: no
    assert [r.values["1.8.0"][0] for r in rig.drain()] == []
    assert rig.pipe.counters["implausible"] == 2


def test_a_meter_back_after_days_of_silence_is_not_judged_against_one_second():
    """The IR head was off for 4 days (past the 2**28 ms the tick wrap allows): 96 kWh more at 1 kW is plausible."""
    rig = Rig(medianFilterSize=0)
    rig.send(telegram(100000, 1000))
    for _ in range(330):  # 4 days, polled (coarsely) as the supervisor does
        rig.idle(1 << 20)
    grown = 100000 + 330 * (1 << 20) // 3600  # tenths of Wh at 1 kW over the gap
    rig.send(telegram(grown, 1000))
    rig.send(telegram(grown - 10, 1000), advance=1000)  # running backwards is still refused after the gap
    assert [r.values["1.8.0"][0] for r in rig.drain() if r is not None] == [100000, grown]
    assert rig.pipe.counters["implausible"] == 1


def test_low_resolution_counter_may_step_by_one_digit():
    rig = Rig(medianFilterSize=0)
    rig.send(telegram(13391, 100, imp_scaler=3))  # kWh resolution like dzg-1.hex
    rig.send(telegram(13392, 100, imp_scaler=3))
    assert len(rig.drain()) == 2 and rig.pipe.counters["implausible"] == 0


def test_a_replaced_meter_is_accepted_after_a_run_of_rejections():
    rig = Rig(medianFilterSize=0)
    rig.send(telegram(5000000, 200))
    for i in range(MeterPipeline.REBASE_AFTER):
        rig.send(telegram(10 + i, 200))
    vals = [r.values["1.8.0"] for r in rig.drain()]
    assert vals == [(5000000, -1), (10 + MeterPipeline.REBASE_AFTER - 1, -1)]
    assert rig.pipe.counters["rebased"] == 1


def test_power_falls_back_to_1_7_0_and_15_7_0():
    rig = Rig(medianFilterSize=0)
    rig.send(cap("emh-ehz-gw8e2a500ak2-1.hex"))
    rig.send(cap("drneuhaus-smarty-1.hex"))
    a, b = rig.drain()
    assert a.values["16.7.0"] == (138, -1) == a.values["1.7.0"]
    assert b.values["16.7.0"] == (0, 0)


def test_damaged_captures_never_become_readings():
    rig = Rig(medianFilterSize=0)
    rig.send(cap("itron-openway3hz-1.hex"))
    rig.send(cap("dzg-dwsb20-3-corrupt.hex"))
    assert rig.drain() == []
    h = rig.pipe.health()
    assert h["crc_errors"] == 1 and h["resyncs"] >= 1 and h["telegrams_ok"] == 0


def test_health_and_describe():
    rig = Rig()
    rig.send(telegram(1000, 200))
    h = rig.pipe.health()
    assert h["telegrams_ok"] == 1 and h["bytes"] == len(telegram(1000, 200))
    assert h["last_telegram_ms"] == rig.clock() and h["format"] == "sml" and h["crc"] == "x25"
    d = rig.pipe.describe()
    assert d["stale"] is False and d["median"] == 5 and str(d["ct_ratio"]) == "1.0"


def _kermit(frame):
    from meter.crc import crc16_kermit

    b = bytearray(frame)
    k = crc16_kermit(b, 0, len(b) - 2)
    b[-2], b[-1] = k & 0xFF, k >> 8
    return bytes(b)


def test_crc_kind_is_latched_from_the_first_good_telegram_until_stale():
    rig = Rig(medianFilterSize=0)
    rig.send(telegram(1000, 200))  # X.25
    rig.send(_kermit(telegram(1001, 200)))  # a KERMIT frame now counts as damaged
    assert rig.pipe.counters["crc_errors"] == 1 and len(rig.drain()) == 1
    rig.idle(11000)  # stale: the meter may have been exchanged
    rig.send(_kermit(telegram(1002, 200)))
    (r,) = [x for x in rig.drain() if x is not None]
    assert r.values["1.8.0"] == (1002, -1) and rig.pipe.health()["crc"] == "kermit"
    rig.send(telegram(1003, 200))  # now X.25 is the stranger
    assert rig.pipe.counters["crc_errors"] == 2


def test_d0_without_checksum_needs_a_confirmed_layout():
    good = cap("d0-ebz-dd3-2r06-1.txt")
    dropped = good.replace(b"000211.26", b"00021.26")  # one character lost on the wire
    doubled = good.replace(b"002714.12830185", b"0027144.12830185")
    rig = Rig(medianFilterSize=0)
    rig.send(good)
    assert rig.drain() == [] and rig.pipe.counters["d0_unconfirmed"] == 1
    rig.send(good)
    rig.send(dropped)
    rig.send(doubled)
    rig.send(good)  # the known layout again: accepted at once
    vals = [r.values["16.7.0"] for r in rig.drain()]
    assert vals == [(21126, -2), (21126, -2)]
    assert rig.pipe.counters["d0_unconfirmed"] == 3


def test_d0_parity_errors_are_counted_not_published():
    def parity(c):
        return c | (0x80 if bin(c).count("1") % 2 else 0)

    tele = bytearray(parity(c) for c in cap("d0-ebz-dd3-2r06-1.txt"))
    rig = Rig(medianFilterSize=0)
    rig.send(bytes(tele))
    rig.send(bytes(tele))
    assert len(rig.drain()) == 1
    tele[60] ^= 0x02  # one flipped data bit: the parity bit no longer matches
    rig.send(bytes(tele))
    assert rig.drain() == [] and rig.pipe.counters["decode_errors"] == 1
    assert rig.pipe.last_error == "parity error"
