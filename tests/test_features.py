"""code.py as a table of features (issue 19 points 2 and 4): a feature that runs out of memory at start stays off
(logged, in /system/info) while the rest runs; modules that are only needed for a while are let go after."""

import os
import shutil
import sys

import pytest

from core.modules import unload
from core.supervisor import Supervisor
from tests.hostproc import HostProcess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
APP_ENTRIES = ("code.py", "boot.py", "core", "drivers", "meter", "services", "web")


class _Mod:
    def __init__(self, name):
        self.name = name
        self.state = "OK"
        self.polls = []

    def start(self):
        pass

    def poll(self, now):
        self.polls.append(now)

    def stop(self):
        pass


def test_a_last_module_stays_at_the_end_of_the_poll_order():
    sup = Supervisor(lambda: 0)
    a = sup.add(_Mod("a"))
    http = sup.add(_Mod("http"), essential=True, last=True)
    b = sup.add(_Mod("b"))
    c = sup.add(_Mod("c"))
    assert [m.name for m in sup.modules()] == ["a", "b", "c", "http"]
    sup.forget([b, c])
    assert sup.modules() == [a, http]
    sup.step()
    assert a.polls and http.polls and not b.polls


def test_unload_drops_a_module_and_its_children_and_lets_them_be_imported_again():
    import services.ota.manifest as first  # noqa: F401

    assert "services.ota.manifest" in sys.modules
    assert unload("services.ota.manifest") == 1
    assert "services.ota.manifest" not in sys.modules
    assert not hasattr(sys.modules["services.ota"], "manifest")
    import services.ota.manifest as again

    assert again is not first and again.MAX_FILES == first.MAX_FILES   # imported afresh


def test_unload_in_the_micropython_vm():
    from tools.mpvm import MicroVM

    out = MicroVM().run("""
import sys
from core.modules import unload
import core.tz
print("in", "core.tz" in sys.modules, hasattr(sys.modules["core"], "tz"))
print("n", unload("core.tz"))
print("out", "core.tz" in sys.modules, hasattr(sys.modules["core"], "tz"))
import core.tz
print("again", core.tz.is_leap(2024))
""")[0]
    assert "in True True" in out and "n 1" in out and "out False False" in out and "again True" in out


def _drive_with_app(tmp_path):
    drive = tmp_path / "drive"
    drive.mkdir()
    for entry in APP_ENTRIES:
        src = os.path.join(ROOT, entry)
        if os.path.isdir(src):
            shutil.copytree(src, drive / entry, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy(src, drive / entry)
    return drive


def _info(h):
    return h.get("/api/v1/system/info")[1]


@pytest.mark.slow
def test_a_feature_out_of_memory_at_start_stays_off_and_the_rest_runs(tmp_path):
    drive = _drive_with_app(tmp_path)
    # MQTT cannot even import its wiring; history runs out of memory half-way (its module already registered).
    (drive / "services" / "mqtt" / "wiring.py").write_text(
        'raise MemoryError("memory allocation failed, allocating 2048 bytes")\n')
    (drive / "services" / "history" / "wiring.py").write_text(
        "from services.history.service import History\n"
        "from services.history.store import HistoryStore\n\n\n"
        "def wire(app):\n"
        "    app.supervisor.add(History(app.bus, app.clock, app.settings, HistoryStore('history/history.bin'),"
        " log=app.log))\n"
        "    raise MemoryError('memory allocation failed, allocating 4096 bytes')\n")
    h = HostProcess(drive, args=["--app-on-drive"]).start()
    try:
        info = h.wait_for(lambda: (lambda i: i["meter"] and i)(_info(h)))
        off = {e["name"]: e["value"] for e in info["features_off"]}
        assert off == {"history": "out of memory at start", "mqtt": "out of memory at start"}
        states = {e["name"] for e in info["supervisor"]}
        assert "history.state" not in states and "mqtt.state" not in states   # nothing half-wired is polled
        assert "modbus.state" in states and "meter.state" in states and "ota.state" in states
        assert h.get("/api/v1/history/latest")[0] == 404          # its routes never joined
        assert h.get("/api/v1/system/alive")[0] == 200
        assert "mqtt off: out of memory at start" in h.log() and "history off: out of memory at start" in h.log()
        assert h.log().count("Meter Plus up") == 1                 # no restart loop
    finally:
        h.stop()


class _Stop(Exception):
    """Ends the test's pass through code.py's endless wait."""


def _code_py_namespace(monkeypatch, tmp_path):
    """code.py's functions without its last line (run(build())), imported with the host stand-ins, cwd = a drive."""
    monkeypatch.chdir(tmp_path)
    with open(os.path.join(ROOT, "code.py"), encoding="utf-8") as f:
        source = f.read()
    assert source.count("\nrun(build())") == 1
    namespace = {"__name__": "code_under_test"}
    exec(compile(source.replace("\nrun(build())", "\n"), "code.py", "exec"), namespace)
    # code.py armed the host's real watchdog (its countdown runs from the mode, as on the chip): disarm it, or its
    # expiry would end this test process 30 s later. The tests hand code.py's functions a fake watchdog instead.
    import microcontroller

    microcontroller.watchdog.mode = None
    return namespace


class _Watchdog:
    def __init__(self):
        self.feeds = 0

    def feed(self):
        self.feeds += 1


def test_a_core_that_does_not_fit_the_heap_stays_up_and_says_so_instead_of_a_restart_loop(monkeypatch, tmp_path,
                                                                                           capsys):
    """A board without PSRAM: build_core() runs out of memory. code.py must not end (the armed RESET watchdog would
    restart the chip every 30 s for ever): it prints why and keeps feeding the watchdog."""
    ns = _code_py_namespace(monkeypatch, tmp_path)
    wd = _Watchdog()
    sleeps = []

    def sleep(s):
        sleeps.append(s)
        if len(sleeps) >= 3:
            raise _Stop()

    def no_room():
        raise MemoryError("memory allocation failed, allocating 2048 bytes")

    ns["WATCHDOG"] = wd
    ns["build_core"] = no_room
    monkeypatch.setattr(ns["time"], "sleep", sleep)
    monkeypatch.setattr(ns["gc"], "mem_free", lambda: 151552, raising=False)   # CircuitPython's; the host's has none
    with pytest.raises(_Stop):
        ns["build"]()
    assert wd.feeds == 3 and sleeps == [1, 1, 1]
    out = capsys.readouterr().out
    assert "heap is too small" in out and "151552 bytes free" in out and "PSRAM" in out


def test_a_new_version_on_trial_that_does_not_fit_is_let_fail_so_boot_py_rolls_it_back(monkeypatch, tmp_path):
    ns = _code_py_namespace(monkeypatch, tmp_path)
    os.makedirs(tmp_path / "ota")
    (tmp_path / "ota" / "journal").write_text('{"phase": "trial", "boots": 1}')

    def no_room():
        raise MemoryError("memory allocation failed")

    ns["build_core"] = no_room
    with pytest.raises(MemoryError):
        ns["build"]()


class _Sup:
    """What wire_next() asks of the supervisor."""

    def __init__(self):
        self.cut = False
        self.work = False

    def mid_round(self):
        return self.cut

    def busy(self):
        return self.work


class _StartingApp:
    def __init__(self, names):
        self.starting = [(n, "services.%s.wiring" % n) for n in names]
        self.supervisor = _Sup()
        self.device_id = "024d50000001"
        self.logged = []
        self.log = self

    def info(self, msg, *args):
        self.logged.append(msg % args)


def test_the_start_in_stages_wires_one_feature_a_round_and_yields_to_work_in_flight(monkeypatch, tmp_path):
    """wire_next(): one feature per call, in order; none while the last cycle was cut (modules still waiting for
    their turn) or, for up to WIRING_WAITS_MS, while a module has work in flight; "Meter Plus up" once the last
    is in. Stepped ticks across the wrap."""
    from tests.steppedclock import SteppedClock

    ns = _code_py_namespace(monkeypatch, tmp_path)
    clock = SteppedClock(start=(1 << 29) - 700)      # the wait spans the tick wrap
    ns["ticks_ms"] = clock
    wired = []
    ns["wire_feature"] = lambda app, name, module_name: wired.append(name)
    app = _StartingApp(["web", "meter", "mqtt"])
    assert ns["wire_next"](app) is True and wired == ["web"]
    app.supervisor.cut = True
    assert ns["wire_next"](app) is True and wired == ["web"]          # the round goes on first
    app.supervisor.cut = False
    app.supervisor.work = True
    for _ in range(3):
        assert ns["wire_next"](app) is True and wired == ["web"]      # an answer or a connection in flight
        clock.advance(ns["WIRING_WAITS_MS"] // 3 - 10)
    clock.advance(ns["WIRING_WAITS_MS"] - 3 * (ns["WIRING_WAITS_MS"] // 3 - 10))   # WIRING_WAITS_MS since it began
    assert ns["wire_next"](app) is True and wired == ["web", "meter"]  # waited long enough: the start goes on
    app.supervisor.work = False
    assert app.logged == []
    assert ns["wire_next"](app) is True and wired == ["web", "meter", "mqtt"]
    assert app.logged == ["Meter Plus up, device 024d50000001"] and app.starting == []
    assert ns["wire_next"](app) is False


def test_features_wired_before_the_loop_are_those_the_first_answer_needs(monkeypatch, tmp_path):
    """system, api, logs, network before the loop; web first after it, the meter's way to MQTT next (the rest after
    the first reading, tests/test_start_stages.py), Improv last."""
    ns = _code_py_namespace(monkeypatch, tmp_path)
    names = [n for n, _ in ns["FEATURES"]]
    assert names[:ns["WIRED_BEFORE_LOOP"]] == ["system", "api", "logs", "network"]
    assert names[4:ns["WIRED_BEFORE_READING"]] == ["web", "meter", "mqtt"] and names[-1] == "provisioning"
    assert names.index("clock") < names.index("history")      # the history books quarter hours on the clock
    assert names.index("history") < names.index("tariff") < names.index("outages")
