"""code.py on CircuitPython's own interpreter (unix port, the S3's number model): it runs, and it boots with the
smallest heap README.md names. Needs a CircuitPython source tree in CIRCUITPY_SRC (README.md, "Device bench")."""

import os
import re

import pytest

from bench import bench_device

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def circuitpython():
    try:
        return bench_device.build(bench_device.source_tree(os.environ.get("CIRCUITPY_SRC")))
    except bench_device.Skip as exc:
        pytest.skip(str(exc))


def readme_smallest_heap_kb():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"smallest heap that boots[^|\n]*\|\s*([\d,]+) KB", text)
    assert m, "README.md names no smallest heap that boots"
    return int(m.group(1).replace(",", ""))


def test_runs_on_circuitpython_with_traffic(circuitpython):
    rc, result, tail = bench_device.run_firmware(circuitpython, 20)
    assert rc == 0 and result, tail
    assert "FAILED" not in result["module_states"].values(), result["module_states"]
    assert result["module_errors"] == {}, result["module_errors"]
    # The standard load asks near the device-wide budget (25 requests / 10 s): a 429 now and then is the limit at
    # work, anything else is not.
    bad = {k: v for k, v in result["http"].items() if not k.endswith((" 200", " 429"))}
    assert not bad, bad
    assert sum(v for k, v in result["http"].items() if k.endswith(" 200")) >= 30
    assert result["udp_answers"] >= 15 and result["ws_answers"] >= 5 and result["sma_datagrams"] >= 15
    assert result["modbus_ok"] >= 10 and result["modbus_bad"] == 0
    assert result["mqtt_connects"] == 1 and result["mqtt_publishes"] > 0
    assert result["telegrams"] >= 19
    assert result["features_off"] == {}
    assert result["loaded"] == []   # no BLE window open, no update work: neither adafruit_ble nor the OTA parts


def test_boots_with_the_smallest_heap_the_readme_names(circuitpython):
    kb = readme_smallest_heap_kb()
    assert bench_device.boots(circuitpython, kb), "code.py does not boot in %d KB on CircuitPython" % kb


def test_a_heap_far_below_does_not_boot(circuitpython):
    # The check above can fail: 40 % less heap must not pass it.
    assert not bench_device.boots(circuitpython, readme_smallest_heap_kb() * 6 // 10)


def test_a_heap_without_psram_boots_what_fits_and_keeps_running(circuitpython):
    """~190 KB of heap (an S3 without PSRAM): code.py starts, every feature that does not fit stays off (named in
    the log), and the loop runs on: no MemoryError ends code.py, so the RESET watchdog never restarts it in a loop."""
    # 200 KB: ~190 KB for the firmware, the rest the bench runner's own code (it grew by the flash events, ~8 KB).
    rc, result, tail = bench_device.run_firmware(circuitpython, 20, "tiny", heap_kb=200, flags=("nopystone",))
    assert rc == 0 and result and result["cycles"] == 300, tail
    assert "api" in result["features_off"] and "button" in result["running"]
    assert "api off: out of memory at start" in tail


# A feature whose import spins on the device clock for 40 S3 s without returning: a start that hangs for longer than
# the watchdog's 30 s inside one feature (time.monotonic is the device clock in the bench).
HANG = 'import time\n_t = time.monotonic()\nwhile time.monotonic() - _t < 40:\n    pass\n'


def test_no_image_trips_the_watchdog_while_starting(circuitpython):
    """Every drive the owner can end up with starts at the 1,000 pystones/s reference without a gap of the watchdog
    over its timeout: as .mpy (fresh drive and with history), as .py, after a network update (issue 35)."""
    starts = bench_device.start_figures(circuitpython)
    keys = bench_device.start_keys(starts)
    assert keys["start_watchdog_tripped"] == [], keys
    for image, runs in starts.items():
        for r in runs:
            assert r["alive_ms"] is not None and r["first_reading_ms"] is not None, (image, r["log"])
            assert r["watchdog_longest_gap_ms"] < 30000 and r["watchdog_feeds"] > 17, (image, r)
            assert r["features_off"] == {} and "FAILED" not in r["module_states"].values(), (image, r)


def test_a_start_that_hangs_trips_the_watchdog(circuitpython):
    """The feeds between features do not hide a hang: a feature stuck for 40 S3 s in its import trips it."""
    def hang(root):
        with open(os.path.join(ROOT, "services", "metering", "pipeline.py")) as f:
            source = f.read()
        with open(os.path.join(root, "services", "metering", "pipeline.py"), "w") as f:   # wins over the .mpy
            f.write(HANG + source)

    rc, result, tail = bench_device.start_once_with(circuitpython, hang)
    assert result is not None, tail
    assert result["watchdog_tripped"] and result["watchdog_longest_gap_ms"] >= 40000, result
