"""Soak: the whole firmware on the host runtime at --speed for simulated days, with its clients at once: an MQTT
subscriber on mosquitto, a Modbus poller (pymodbus, the SunSpec energy registers) and a REST poller. Reports the
process's growth (resident memory, open file descriptors), restarts, faults and data lost.

    .venv/bin/python -m bench.soak_firmware [--days 30] [--speed 3600]      (30 days: ~13 min)

Data lost means: a quarter hour missing from highRes between the first and the last closed one that the next
record does not mark as a gap (gap_s), a day whose quarter hours do not add up to its lowRes energy, a total (REST,
MQTT, Modbus) that went backwards, or a client that stopped getting values. At --speed 3600 a quarter hour is
0.25 s of real time: a stall of the host's loop that long (a busy machine) leaves a quarter hour without a reading,
which the firmware records as a gap with its energy kept; the report counts those separately.
The simulated clock starts 2026-03-15 (UTC), so 30 days cross the spring DST change.
"""

import argparse
import datetime
import json
import os
import shutil
import sys
import tempfile
import time
from decimal import Decimal

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from host.ntp_server import scaled_clock, start_ntp_server  # noqa: E402
from tests.hostproc import HostProcess, meter_time_args  # noqa: E402
from tests.mqtt_peers import Broker, Subscriber  # noqa: E402

EPOCH0 = 1_773_532_800          # 2026-03-15 00:00 UTC
DEVICE_ID = "024d50000001"      # the host runtime's MAC
STATE_TOPIC = "meterplus/%s/state" % DEVICE_ID
ENERGY_CODES = ("1.8.0", "2.8.0")


def _proc_figures(pid):
    """(resident KB, open fds) of a process from /proc."""
    rss = 0
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
    return rss, len(os.listdir("/proc/%d/fd" % pid))


def _info_value(info, section, name):
    for entry in info.get(section, ()):
        if entry["name"] == name:
            return entry["value"]
    return None


class _Monotone:
    """A series that must never go down; counts the values seen and each step back."""

    def __init__(self, name):
        self.name = name
        self.last = None
        self.count = 0
        self.backwards = []

    def add(self, value):
        if self.last is not None and value < self.last:
            self.backwards.append((self.last, value))
        self.last = value
        self.count += 1


class _ModbusEnergy:
    """Reads TotWhImp/TotWhExp of SunSpec model 203 with pymodbus, at the addresses /modbus/status names."""

    def __init__(self, host):
        from pymodbus.client import ModbusTcpClient

        status, body, _h = host.get("/api/v1/modbus/status")
        regs = {r["name"]: r for r in body["registers"]} if status == 200 else {}
        self.points = [(name, regs[name]["register"], regs[name]["scale_register"])
                       for name in ("TotWhImp", "TotWhExp") if name in regs]
        self.client = ModbusTcpClient("127.0.0.1", port=host.modbus_port, timeout=10, retries=0)
        self.series = {name: _Monotone("modbus " + name) for name, _r, _s in self.points}
        self.errors = 0

    def poll(self):
        if not self.client.connected and not self.client.connect():
            self.errors += 1
            return
        for name, reg, sf_reg in self.points:
            value = self.client.read_holding_registers(reg, count=2)
            scale = self.client.read_holding_registers(sf_reg, count=1)
            if value.isError() or scale.isError():
                self.errors += 1
                continue
            raw = (value.registers[0] << 16) | value.registers[1]
            sf = scale.registers[0] - 0x10000 if scale.registers[0] & 0x8000 else scale.registers[0]
            if raw in (0, 0xFFFFFFFF) or sf == -0x8000:     # not implemented: no reading (stale)
                continue
            self.series[name].add(Decimal(raw).scaleb(sf))

    def close(self):
        self.client.close()


def _check_history(host, first_day, last_day):
    """(quarter hours seen, [(UTC second after which quarter hours are missing, how many)], days whose quarter hours
    do not add up to their lowRes energy). Days the HighRes ring no longer holds whole are not compared."""
    quarters = []
    mismatched = []
    days = (last_day - first_day).days + 1
    status, low, _h = host.get("/api/v1/history/lowRes?start=%s&days=%d" % (first_day.isoformat(), days))
    low_by_date = {}
    if status == 200:
        for item in low["items"]:
            low_by_date[item["date"]] = item
    day = first_day
    oldest_whole = None
    while day <= last_day:
        status, high, _h = host.get("/api/v1/history/highRes?date=%s" % day.isoformat())
        items = high["items"] if status == 200 and high else []
        quarters += [(item["timestamp"], item.get("gap_s", 0)) for item in items]
        if items and oldest_whole is None and items[0]["date"].endswith("T00:00"):
            oldest_whole = day
        low_item = low_by_date.get(day.isoformat())
        whole = oldest_whole is not None and first_day < day < last_day
        if items and low_item is not None and whole:
            for code, high_key, low_key in (("1.8.0", "import_kW", "import_kWh"),
                                            ("2.8.0", "export_kW", "export_kWh")):
                if low_key not in low_item:
                    continue                # an import-only meter
                total = sum((Decimal(str(i[high_key])) for i in items), Decimal(0))
                if total != Decimal(str(low_item[low_key])):
                    mismatched.append((day.isoformat(), code, str(total), low_item[low_key]))
        day += datetime.timedelta(days=1)
    quarters.sort()
    missing = []
    marked = 0
    for (a, _g), (b, gap) in zip(quarters, quarters[1:]):
        if b - a > 900:
            if gap == b - a - 900:
                marked += (b - a) // 900 - 1   # a gap the closing record says it covers: energy kept, not lost
            else:
                missing.append((a, (b - a) // 900 - 1))
    return len(quarters), missing, mismatched, marked


def _sample(host, sim, samples, last_uptime, report):
    """Append one (simulated s, rss KB, fds, uptime s) sample; return the uptime seen and 1 if it went back."""
    status, info, _h = host.get("/api/v1/system/info")
    uptime = _info_value(info, "uptime", "uptime") if status == 200 else None
    went_back = 0
    if uptime is not None:
        went_back = 1 if uptime < last_uptime else 0
        last_uptime = uptime
    rss, fds = _proc_figures(host.proc.pid)
    samples.append((int(sim() - EPOCH0), rss, fds, uptime))
    if len(samples) % 24 == 1:
        report("  day %5.1f  rss %6d KB  fds %3d  uptime %s s" % ((sim() - EPOCH0) / 86400.0, rss, fds, uptime))
    return last_uptime, went_back


def run(days, speed, work, report=print):
    """Run the soak for `days` simulated days at `speed`; return a dict of findings."""
    sim = scaled_clock(float(speed), EPOCH0)
    ntp_host, ntp_port, stop_ntp = start_ntp_server(clock=sim)
    broker = Broker(os.path.join(work, "broker")).start()
    sub = Subscriber(broker.port, topics=(STATE_TOPIC,), client_id="soak-sub")
    ntp = "%s:%d" % (ntp_host, ntp_port)
    clients = {"mqtt": {"enable": True, "host": "127.0.0.1", "port": broker.port, "sendInterval": 1},
               "modbus": {"enable": True}}
    args = ["--speed", str(speed), "--ntp", ntp] + meter_time_args(EPOCH0)
    host = HostProcess(os.path.join(work, "drive"), args=args, settings=clients)
    rest = {code: _Monotone("REST latest " + code) for code in ENERGY_CODES}
    quarter_totals = {key: _Monotone("REST highRes " + key[:6]) for key in ("import_total_kWh", "export_total_kWh")}
    samples = []            # (simulated s since start, rss KB, fds, uptime s)
    uptime_back = 0
    answers = {}
    modbus = None
    end_sim = EPOCH0 + days * 86400
    try:
        host.start()
        host.wait_for(lambda: _info_value(host.get("/api/v1/system/info")[1], "meter", "telegrams_ok"), timeout=120)
        modbus = _ModbusEnergy(host)
        last_uptime = -1
        next_sample = 0.0
        while sim() < end_sim:
            status, body, _h = host.get("/api/v1/history/latest")
            # At --speed S a loop cycle of the host spans S/100 simulated seconds, so a reading is often older
            # than the 15 s /latest serves: 204 is the honest answer then, not a fault.
            answers[status] = answers.get(status, 0) + 1
            if status == 200:
                for code in ENERGY_CODES:
                    if code in body:
                        rest[code].add(Decimal(str(body[code]["value"])))
            # The newest quarter hour's totals: REST values that do not depend on the reading's age.
            today = datetime.datetime.fromtimestamp(int(sim()), datetime.timezone.utc).date().isoformat()
            status, high, _h = host.get("/api/v1/history/highRes?date=%s" % today)
            if status == 200 and high and high.get("items"):
                newest = high["items"][-1]
                for key in ("import_total_kWh", "export_total_kWh"):
                    if key in newest:
                        quarter_totals[key].add(Decimal(str(newest[key])))
            modbus.poll()
            now = time.monotonic()
            if now >= next_sample:
                next_sample = now + 5.0
                last_uptime, went_back = _sample(host, sim, samples, last_uptime, report)
                uptime_back += went_back
            if host.proc.poll() is not None:
                break
            time.sleep(1.0)
        alive = host.proc.poll() is None
        if alive:       # the run's last figures are taken at its end, not up to 5 s (hours simulated) before it
            last_uptime, went_back = _sample(host, sim, samples, last_uptime, report)
            uptime_back += went_back
        first = datetime.datetime.fromtimestamp(EPOCH0, datetime.timezone.utc).date()
        last = datetime.datetime.fromtimestamp(int(sim()), datetime.timezone.utc).date()
        quarters, missing, mismatched, marked = _check_history(host, first, last) if alive else (0, [(0, -1)], [], 0)
    finally:
        if modbus is not None:
            modbus.close()
        host.stop()
        sub.close()
        broker.stop()
        stop_ntp()
    mqtt = {code: _Monotone("MQTT " + key) for code, key in (("1.8.0", "import_total"), ("2.8.0", "export_total"))}
    for topic, payload, *_rest in sub.snapshot():
        if topic != STATE_TOPIC:
            continue
        doc = json.loads(payload, parse_float=Decimal)
        for code, key in (("1.8.0", "import_total"), ("2.8.0", "export_total")):
            if key in doc:
                mqtt[code].add(Decimal(str(doc[key])))
    log = host.log()
    starts = log.count("Meter Plus host runtime:")
    faults = [ln for ln in log.splitlines() if ln.startswith("error:") or " fault " in ln or "Traceback" in ln]
    warm = [s for s in samples if s[0] >= samples[-1][0] // 4] if samples else []
    series = list(rest.values()) + list(quarter_totals.values()) + list(mqtt.values())
    series += list(modbus.series.values()) if modbus else []
    return {
        "alive": alive, "starts": starts, "uptime_went_back": uptime_back, "faults": faults,
        "simulated_days": (samples[-1][0] / 86400.0) if samples else 0.0,
        "rss_kb": (warm[0][1], max(s[1] for s in warm)) if warm else (0, 0),
        "fds": (warm[0][2], max(s[2] for s in warm)) if warm else (0, 0),
        "quarters": quarters, "missing_quarters": missing, "mismatched_days": mismatched, "gap_quarters": marked,
        "series": [(s.name, s.count, s.backwards[:3]) for s in series],
        "modbus_errors": modbus.errors if modbus else 0, "latest_answers": answers,
        "samples": samples,
    }


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m bench.soak_firmware", description=__doc__)
    p.add_argument("--days", type=float, default=30.0)
    p.add_argument("--speed", type=float, default=3600.0)
    p.add_argument("--keep", action="store_true", help="keep the work folder (drive, broker log)")
    args = p.parse_args(argv)
    work = tempfile.mkdtemp(prefix="soak-firmware-")
    print("soak: %g simulated days at --speed %g, work folder %s" % (args.days, args.speed, work), flush=True)
    t0 = time.monotonic()
    try:
        r = run(args.days, args.speed, work, report=lambda line: print(line, flush=True))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print("simulated %.1f days in %.0f s real; firmware alive at the end: %s, starts %d, uptime went back %d times"
          % (r["simulated_days"], time.monotonic() - t0, r["alive"], r["starts"], r["uptime_went_back"]))
    print("resident memory %d -> max %d KB after the first quarter; open fds %d -> max %d"
          % (r["rss_kb"] + r["fds"]))
    print("history: %d quarter hours, %d missing without a gap mark, %d days not matching lowRes; %d quarter hours "
          "without a reading, marked as gaps (gap_s)" % (r["quarters"], sum(n for _t, n in r["missing_quarters"]),
                                                          len(r["mismatched_days"]), r["gap_quarters"]))
    for after, n in r["missing_quarters"][:10]:
        print("  %d quarter hours missing after %s UTC"
              % (n, datetime.datetime.fromtimestamp(after, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M")))
    for day in r["mismatched_days"][:10]:
        print("  %s %s: quarter hours add up to %s, lowRes says %s" % day)
    for name, count, back in r["series"]:
        print("  %-22s %7d values, %d steps back %s" % (name, count, len(back), back or ""))
    print("REST /history/latest answers %s; modbus errors %d; faults logged %d"
          % (sorted(r["latest_answers"].items()), r["modbus_errors"], len(r["faults"])))
    for line in r["faults"][:10]:
        print("  " + line)
    lost = r["missing_quarters"] or r["mismatched_days"] or any(b for _n, _c, b in r["series"])
    return "soak: %s" % ("data lost" if lost else "nothing lost")


if __name__ == "__main__":
    print(main(sys.argv[1:]))
