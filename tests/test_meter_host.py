"""python -m host.decode as users run it, and the host runtime's meter sources (sim, replay)."""

import binascii
import json
import os
import subprocess
import sys

import pytest

from host.decode import decode_bytes, load_capture
from host.meter_source import ReplaySource, SimMeter, open_source
from meter.framer import SML, Framer
from meter.sml import SmlResult, decode_frame
from tests import CAPTURES as _CAPTURES

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CAPTURES = _CAPTURES


def cap(name):
    return os.path.join(CAPTURES, name)


def run_decode(*files):
    p = subprocess.run([sys.executable, "-m", "host.decode", *files], cwd=ROOT, capture_output=True, text=True,
                       timeout=60)
    return p.returncode, [json.loads(line) for line in p.stdout.splitlines()]


def test_cli_prints_one_json_object_per_telegram_and_exits_0():
    rc, objs = run_decode(cap("holley-dtz541-1.hex"), cap("dzg-dvs7412-1.hex"), cap("d0-ebz-dd3-2r06-1.txt"))
    assert rc == 0 and len(objs) == 3
    h = objs[0]
    assert h["ok"] and h["format"] == "sml" and h["crc"] == "x25" and h["server_id"] == "0a01484c5902000424a0"
    assert h["values"]["1.8.0"] == {"value": 4499.8962, "unit": "kWh"}
    assert h["values"]["16.7.0"] == {"value": 137.0, "unit": "W"}
    assert objs[1]["values"]["16.7.0"] == {"value": -299.12, "unit": "W"}
    assert objs[2]["format"] == "d0" and objs[2]["values"]["1.8.0"]["value"] == 2714.12830185


def test_cli_reports_damage_and_exits_1_when_nothing_decodes(tmp_path):
    rc, objs = run_decode(cap("itron-openway3hz-1.hex"))
    assert rc == 1 and objs == [{"ok": False, "format": "sml", "error": "crc mismatch"}]
    rc, objs = run_decode(cap("dzg-dwsb20-3-corrupt.hex"))
    assert rc == 1 and objs and all(not o["ok"] for o in objs)
    empty = tmp_path / "empty.bin"
    empty.write_bytes(b"\x00" * 100)
    rc, objs = run_decode(str(empty))
    assert rc == 1 and objs == [{"ok": False, "error": "no telegram found"}]
    rc, objs = run_decode(str(tmp_path / "missing.bin"))
    assert rc == 1 and not objs[0]["ok"]


def test_cli_on_a_binary_rawdump_with_garbage_between_telegrams(tmp_path):
    parts = [b"\x00\xffnoise", load_capture(open(cap("ebz-dd3-1.hex"), "rb").read()), b"\x1b\x1b\x1b",
             load_capture(open(cap("itron-openway3hz-1.hex"), "rb").read()), b"zz",
             load_capture(open(cap("iskra-mt691-1.hex"), "rb").read())[:-30],  # cut off
             load_capture(open(cap("emh-1.hex"), "rb").read())]
    dump = tmp_path / "rawdump.bin"
    dump.write_bytes(b"".join(parts))
    rc, objs = run_decode(str(dump))
    assert rc == 0
    oks = [o for o in objs if o["ok"]]
    assert [o["values"]["1.8.0"]["value"] for o in oks] == [450.09189911, 3132.3636]
    assert sum(1 for o in objs if not o["ok"]) >= 2  # the damaged and the cut-off one are reported


def test_cli_hex_text_with_whitespace_and_many_telegrams(tmp_path):
    a = open(cap("iskra-mt631-1.hex")).read().strip()
    b = open(cap("efr-1.hex")).read().strip()
    f = tmp_path / "two.hex"
    f.write_text(a[:50] + "\n" + a[50:] + "  \n" + b + "\n")
    rc, objs = run_decode(str(f))
    assert rc == 0 and [o["server_id"] for o in objs] == ["0a0149534b00047a5544", "0a014546522003b2a618"]


def test_partial_captures_are_decoded_as_bare_messages():
    out = decode_bytes(load_capture(open(cap("emh-2-partial.hex"), "rb").read()))
    assert out[0]["ok"] and out[0]["transport"] is False and out[0]["values"]["16.7.0"]["value"] == -177.2


def test_dzg_flag():
    out = decode_bytes(load_capture(open(cap("dzg-dvs7412-1.hex"), "rb").read()), dzg=True)
    assert out[0]["values"]["16.7.0"]["value"] == 356.24


def _decode_stream(data):
    fr = Framer(4096, "sml")
    res = SmlResult()
    out = []
    pos = 0
    while pos < len(data):
        pos += fr.feed(data[pos:pos + 1000])
        while True:
            fmt = fr.next()
            if not fmt:
                break
            assert fmt == SML
            b = bytearray(fr.telegram())
            assert decode_frame(b, len(b), res, crc="x25"), res.error
            out.append((res.values(), res.server_id()))
    return out


def _sim_window(start_tod_s, seconds, seed=7):
    """Decoded values of a sim meter read every 5 simulated seconds for the given span."""
    sim = SimMeter(seed=seed, start_tod_s=start_tod_s)
    data = bytearray()
    for t in range(0, seconds + 5, 5):
        data += sim.read_available(float(t))
    readings = _decode_stream(bytes(data))
    assert all(r[1] == SimMeter.SERVER_ID.hex() for r in readings)
    return [r[0] for r in readings]


def test_sim_meter_power_matches_its_energy_counters():
    for start in (2 * 3600, 12 * 3600, 19 * 3600):
        vals = _sim_window(start, 1200)
        assert len(vals) >= 1199  # one telegram per second, nothing lost at line rate
        for a, b in zip(vals, vals[1:]):
            di = b["1.8.0"][0] - a["1.8.0"][0]
            de = b["2.8.0"][0] - a["2.8.0"][0]
            assert di >= 0 and de >= 0
            p = b["16.7.0"][0]
            if p > 0:  # import rises only while power > 0, export only while power < 0
                assert de == 0 and di <= p // 360 + 1
            elif p < 0:
                assert di == 0 and de <= -p // 360 + 1
        # the counters are the integral of the power (Ws -> 0.1 Wh), up to counter rounding
        imp_ws = sum(v["16.7.0"][0] for v in vals[1:] if v["16.7.0"][0] > 0)
        exp_ws = -sum(v["16.7.0"][0] for v in vals[1:] if v["16.7.0"][0] < 0)
        assert abs((vals[-1]["1.8.0"][0] - vals[0]["1.8.0"][0]) - imp_ws // 360) <= 1
        assert abs((vals[-1]["2.8.0"][0] - vals[0]["2.8.0"][0]) - exp_ws // 360) <= 1
        phases = vals[100]
        assert phases["36.7.0"][0] + phases["56.7.0"][0] + phases["76.7.0"][0] == phases["16.7.0"][0]


def test_sim_meter_daily_curve():
    sim = SimMeter(seed=3, start_tod_s=0)
    by_hour = [[sim.power_at(h * 3600 + m * 60) for m in range(60)] for h in range(24)]
    assert max(by_hour[12]) < 0 < min(by_hour[2])  # PV export at midday, import at night
    assert sum(by_hour[19]) > sum(by_hour[3])  # evening peak


def test_sim_runs_on_simulated_time_and_bounds_its_backlog():
    sim = SimMeter(seed=1, start_tod_s=3600)
    assert sim.read_available(0.5) == b""
    first = sim.read_available(1.0 + 0.1)  # 0.1 s after the first telegram: ~96 bytes at 9600 baud
    assert 0 < len(first) <= 97
    big = sim.read_available(100000.0)  # the host jumped far ahead (high --speed)
    assert len(big) <= 15 * 960
    uart = type("U", (), {"baudrate": 300})()
    assert sim.read_available(100001.5, uart) == b""  # a meter at 9600 baud is not heard at 300


def test_replay_loops_a_capture_file(tmp_path):
    src = ReplaySource(cap("holley-dtz541-1.hex"))
    data = b""
    t = 0.0
    while t < 5.0:
        data += src.read_available(t)
        t += 0.05
    got = _decode_stream(data)
    assert len(got) >= 4 and all(v[0]["1.8.0"] == (44998962, -1) for v in got)
    binfile = tmp_path / "cap.bin"
    binfile.write_bytes(load_capture(open(cap("emh-1.hex"), "rb").read()))
    src = open_source(str(binfile))
    assert isinstance(src, ReplaySource) and _decode_stream(src.read_available(0.0) + src.read_available(1.0))


def test_open_source_choices():
    assert isinstance(open_source("sim"), SimMeter)
    with pytest.raises(ValueError):
        open_source("/no/such/file.hex")
    with pytest.raises(ValueError):
        open_source(os.path.join(CAPTURES, "nothing-here"))


def test_the_simulated_household_starts_at_the_time_it_is_given():
    # --meter-time: a test with a simulated clock imports at night and exports at noon whatever hour it runs at
    night = open_source("sim", start_tod_s=2 * 3600)
    noon = open_source("sim", start_tod_s=12 * 3600)
    assert all(night.power_at(t) > 0 for t in range(0, 3 * 3600, 600))
    assert all(noon.power_at(t) < 0 for t in range(0, 3600, 600))


def test_load_capture_hex_or_binary():
    assert load_capture(b"1b1b 1b1b\n") == b"\x1b\x1b\x1b\x1b"
    assert load_capture(b"/EBZ\r\n!") == b"/EBZ\r\n!"
    assert load_capture(b"abc") == b"abc"  # odd-length hex digits are text
    assert binascii.hexlify(load_capture(b"00ff")) == b"00ff"


def test_serial_source_reads_a_tty_and_follows_the_uart_settings():
    import tty

    from host.meter_source import SerialSource

    master, slave = os.openpty()
    tty.setraw(master)
    try:
        src = SerialSource(os.ttyname(slave))
        tele = load_capture(open(cap("iskra-mt691-1.hex"), "rb").read())
        os.write(master, tele)
        got = b""
        for _ in range(200):
            got += src.read_available(0.0)
            if len(got) >= len(tele):
                break
            import time

            time.sleep(0.01)
        assert got == tele
        uart = type("U", (), {"baudrate": 300, "bits": 8, "parity": None})()
        src.on_write(b"/?!\r\n", uart)
        assert src.ser.baudrate == 300 and src.setting_errors == 0
        assert os.read(master, 16) == b"/?!\r\n"
        # a pseudo terminal refuses 7E1: counted, never raised into the firmware's UART call
        uart7 = type("U", (), {"baudrate": 300, "bits": 7, "parity": "EVEN"})()
        assert src.read_available(0.0, uart7) == b"" and src.setting_errors == 1
        src.ser.close()
    finally:
        os.close(master)
        os.close(slave)
