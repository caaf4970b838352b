"""python -m host: run code.py on this computer with a simulated (or USB) meter and a folder as CIRCUITPY."""

import argparse
import gc
import os
import re
import runpy
import shutil
import signal
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CP_DIR = os.path.join(REPO, "host", "cp")
EXIT_BAD_FLAGS = 2
EXIT_PORT_IN_USE = 2
EXIT_NOT_INSTALLED = 1
FIRMWARE_PACKAGES = ("core", "drivers", "meter", "services")
APP_ENTRIES = ("code.py", "boot.py", "core", "drivers", "meter", "services", "web")  # what a device drive holds


def _positive_float(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("not a number: %r" % text)
    if not value > 0 or value > 100000:
        raise argparse.ArgumentTypeError("must be > 0 and <= 100000: %r" % text)
    return value


def _port(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("not a port number: %r" % text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError("port out of range 0-65535: %r" % text)
    return value


def _time_of_day(text):
    """HH:MM (00:00-23:59) -> seconds after midnight."""
    found = re.fullmatch(r"([01][0-9]|2[0-3]):([0-5][0-9])", text)
    if found is None:
        raise argparse.ArgumentTypeError("not a time of day HH:MM (00:00-23:59): %r" % text)
    return int(found.group(1)) * 3600 + int(found.group(2)) * 60


def parse_args(argv):
    """The runtime's flags; argparse exits with status 2 and a message on bad ones."""
    p = argparse.ArgumentParser(prog="python -m host", description=__doc__)
    p.add_argument("--http-port", type=_port, default=8080, help="REST API port (default 8080)")
    p.add_argument("--modbus-port", type=_port, default=5020, help="Modbus TCP port when enabled (default 5020)")
    p.add_argument("--bind", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--state", default=".host", help="folder acting as the CIRCUITPY drive (default .host/)")
    p.add_argument("--meter", default="sim", help="sim, a capture file (hex or binary) or a serial device")
    p.add_argument("--meter-time", type=_time_of_day, default=None, metavar="HH:MM",
                   help="time of day the simulated household starts at (its load and midday PV export follow it; "
                        "default: this computer's local time)")
    p.add_argument("--speed", type=_positive_float, default=1.0, help="simulated clock speed factor (default 1)")
    p.add_argument("--ntp", default="local", help="local (computer clock), HOST[:PORT], or fail")
    p.add_argument("--led", action="store_true", help="draw the status LED in the terminal")
    p.add_argument("--mdns-port", type=_port, default=0,
                   help="run the firmware's mDNS responder on --bind:PORT, answering DNS queries sent there "
                        "(default off)")
    p.add_argument("--dns-port", type=_port, default=5300,
                   help="captive-portal DNS port while the access point is up (the device uses 53; default 5300)")
    p.add_argument("--no-ble", action="store_true", help="a board without BLE (4 MB S3): no Improv provisioning")
    p.add_argument("--ble-port", type=_port, default=0,
                   help="a phone for the BLE stand-in: JSON lines on --bind:PORT (host/ble_bridge.py; default off)")
    p.add_argument("--app-on-drive", action="store_true",
                   help="copy the application files to the drive once and run them from there (OTA updates)")
    p.add_argument("--ota-pubkey", metavar="FILE", action="append", default=[],
                   help="also trust the update signing key in FILE (hex, from tools.ota_keygen); repeatable")
    return p.parse_args(argv)


def _prepare_drive(state):
    """Create the simulated drive: settings.toml copied once (the user edits it), web/ linked to the sources."""
    os.makedirs(state, exist_ok=True)
    toml = os.path.join(state, "settings.toml")
    if not os.path.exists(toml):
        shutil.copy(os.path.join(REPO, "settings.toml"), toml)
    web = os.path.join(state, "web")
    if not os.path.lexists(web):
        os.symlink(os.path.join(REPO, "web"), web)
    return toml


def _install_app(state):
    """Put the application files on the drive once, like flashing a device; later runs keep what OTA installed."""
    if os.path.exists(os.path.join(state, "code.py")):
        return
    web = os.path.join(state, "web")
    if os.path.islink(web):
        os.remove(web)
    for entry in APP_ENTRIES:
        src = os.path.join(REPO, entry)
        if os.path.isdir(src):
            shutil.copytree(src, os.path.join(state, entry), dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        elif os.path.exists(src) and entry != "code.py":
            shutil.copy(src, os.path.join(state, entry))
    shutil.copy(os.path.join(REPO, "code.py"), os.path.join(state, "code.py"))  # last: marks a complete copy


def _install_ota_keys(state, extra):
    """ota_keys.txt beside boot.py, as flashed over USB: the repository's release keys, plus --ota-pubkey keys."""
    path = os.path.join(state, "ota_keys.txt")
    if os.path.exists(path) and not extra:
        return
    with open(os.path.join(REPO, "ota_keys.txt")) as f:
        text = f.read()
    for name in extra:
        with open(name) as f:
            text += "# --ota-pubkey %s\n%s\n" % (name, f.read().strip())
    with open(path, "w") as f:
        f.write(text)


def _statvfs_with_quota(real):
    """os.statvfs that honours the host control drive_free_bytes (a full drive is simulated, not produced)."""
    import _hostenv

    def statvfs(path):
        st = real(path)
        free = _hostenv.control("drive_free_bytes")
        if free is None:
            return st
        blocks = int(free) // st.f_frsize
        return os.statvfs_result((st.f_bsize, st.f_frsize, st.f_blocks, blocks, blocks, st.f_files, st.f_ffree,
                                  st.f_favail, st.f_flag, st.f_namemax))
    return statvfs


def _crash_wait(speed):
    """After code.py raised: an armed RESET-mode watchdog resets the chip (CircuitPython keeps it running then);
    without one the device waits at the prompt. True when the runtime should restart."""
    import time

    import microcontroller
    from watchdog import WatchDogMode

    wd = microcontroller.watchdog
    if wd.mode == WatchDogMode.RESET and wd.timeout > 0:
        if wd._timer:
            wd._timer.cancel()
            wd._timer = None
        time.sleep(wd.timeout / speed)
        return True
    print("Code done running. (the device waits for a reset)", flush=True)
    while True:
        time.sleep(3600)


def _run_boot_py(app_dir):
    """boot.py runs before every start of code.py, as after every reset of the chip.

    The host control boot_op_delay_ms slows each file operation of boot.py so a power-cut test can land a
    SIGKILL inside the update switch (which takes milliseconds here)."""
    import time

    import _hostenv

    path = os.path.join(app_dir, "boot.py")
    if not os.path.exists(path):
        return
    delay = _hostenv.control("boot_op_delay_ms")
    saved = os.rename, os.remove, os.mkdir
    if delay:
        def slowed(fn):
            def op(*args, **kw):
                time.sleep(float(delay) / 1000)
                return fn(*args, **kw)
            return op
        os.rename, os.remove, os.mkdir = (slowed(f) for f in saved)
    try:
        runpy.run_path(path, run_name="__main__")
    finally:
        os.rename, os.remove, os.mkdir = saved


def _load_settings_toml(path, overrides):
    """What CircuitPython's os.getenv() sees: settings.toml's top-level keys, as strings (CP 10.2+)."""
    import tomllib

    with open(path, "rb") as f:
        data = tomllib.load(f)
    for key, value in data.items():
        if isinstance(value, bool):
            value = "true" if value else "false"
        os.environ[key] = str(value)
    os.environ.update(overrides)


class WatchdogReset(BaseException):
    """Raised in the main thread when the watchdog expires: the firmware hung (no feed within its timeout). A
    BaseException, so the firmware's own `except Exception` cannot swallow the reset."""


def _route_watchdog_resets():
    """An expired watchdog resets the firmware as the chip would (boot.py runs and counts the boot) instead of
    ending the process: its thread signals the main thread, whose handler raises WatchdogReset wherever code.py
    hangs (between two bytecodes, or out of a sleep)."""
    import watchdog

    def raise_reset(signum, frame):
        raise WatchdogReset()

    signal.signal(signal.SIGUSR1, raise_reset)
    watchdog._on_expire = lambda: os.kill(os.getpid(), signal.SIGUSR1)


def _disarm_watchdog():
    """A chip reset stops the watchdog: the next code.py runs unguarded until it arms it again."""
    import microcontroller

    wd = microcontroller.watchdog
    if wd._timer:
        wd._timer.cancel()
        wd._timer = None
    wd.mode = None


def _reset_radios():
    """A chip reset drops the WiFi station and AP and the BLE GATT table: fresh radio stand-ins."""
    if "wifi" in sys.modules:
        sys.modules["wifi"].radio = sys.modules["wifi"].Radio()
    ble = sys.modules.get("_bleio")
    if ble is not None and ble.adapter is not None:
        ble.adapter.host_reset()


def _purge_firmware_modules():
    """Forget imported firmware modules so a reset starts from fresh module state, as on the chip."""
    for name in list(sys.modules):
        if name.split(".")[0] in FIRMWARE_PACKAGES:
            del sys.modules[name]


def _port_in_use(bind, port):
    """True when another process listens on bind:port (the firmware binds with SO_REUSEADDR too, so a port in
    TIME_WAIT after a previous run counts as free, as it will be for the firmware)."""
    import socket

    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((bind, port))
    except OSError:
        return True
    finally:
        probe.close()
    return False


def _missing_package(exc):
    """The name of a host package that is not installed, or None when exc is the firmware's own import error."""
    name = (getattr(exc, "name", None) or "").split(".")[0]
    if not name or name in FIRMWARE_PACKAGES or os.path.exists(os.path.join(CP_DIR, name + ".py")) \
            or os.path.isdir(os.path.join(CP_DIR, name)):
        return None
    return name


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    # The device's console shows each line as it is printed; so does a log file this runtime writes into (tests
    # read it while the firmware runs), not only a terminal or PYTHONUNBUFFERED.
    sys.stdout.reconfigure(line_buffering=True)
    sys.stderr.reconfigure(line_buffering=True)
    if os.path.exists(args.meter) or args.meter == "sim" or args.meter.startswith("/dev/"):
        pass
    else:
        sys.stderr.write("python -m host: error: --meter: no such file or device: %s\n" % args.meter)
        return EXIT_BAD_FLAGS
    # One clear message instead of a firmware that starts, cannot listen, and retries for minutes.
    if args.http_port and _port_in_use(args.bind, args.http_port):
        sys.stderr.write("python -m host: error: port %d on %s is already in use (another `make run`?); stop it, or "
                         "start on another port: make run ARGS='--http-port N'\n" % (args.http_port, args.bind))
        return EXIT_PORT_IN_USE
    state = os.path.abspath(args.state)
    app_dir = state if args.app_on_drive else REPO
    if args.app_on_drive:  # the firmware is imported from the drive only, as on the chip
        sys.path[:] = [p for p in sys.path if p not in ("", REPO, os.getcwd())]
        sys.dont_write_bytecode = True   # no __pycache__ folders on the drive
    sys.path[:0] = [CP_DIR, app_dir]
    import _hostenv  # noqa: E402  (the stand-ins' shared state)
    import neopixel  # noqa: E402
    import socketpool  # noqa: E402

    toml = _prepare_drive(state)
    _install_ota_keys(state, args.ota_pubkey)
    if args.app_on_drive:
        _install_app(state)
        # boot.py first, as on the chip: the runtime's own meter decoder below imports meter/ from the drive, which
        # an interrupted update switch may have left half-moved until boot.py finishes it
        _hostenv.state_dir = state
        cwd = os.getcwd()
        os.chdir(state)
        try:
            _run_boot_py(app_dir)
        finally:
            os.chdir(cwd)
    booted = args.app_on_drive
    os.statvfs = _statvfs_with_quota(os.statvfs)
    _hostenv.state_dir = state
    _hostenv.set_speed(args.speed)
    neopixel.show_in_terminal = args.led
    _hostenv.ble = not args.no_ble
    if args.ble_port and not args.no_ble:
        from host import ble_bridge  # noqa: E402

        ble_bridge.serve(args.bind, args.ble_port)

    from host import meter_source  # noqa: E402

    try:
        _hostenv.meter_source = meter_source.open_source(args.meter, state, start_tod_s=args.meter_time)
    except (OSError, ValueError) as exc:
        sys.stderr.write("python -m host: error: --meter: %s\n" % exc)
        return EXIT_BAD_FLAGS

    overrides = {
        "METERPLUS_HTTP_PORT": str(args.http_port),
        "METERPLUS_MODBUS_PORT": str(args.modbus_port),
        "METERPLUS_BIND": args.bind,
        "METERPLUS_DNS_PORT": str(args.dns_port),
        # the firmware's own mDNS responder on --bind:PORT (unicast answers to the asker; 5353 joins 224.0.0.251),
        # or 0: CircuitPython's mdns module only (the stand-in publishes nothing on the network)
        "METERPLUS_MDNS_PORT": str(args.mdns_port),
        # The simulated access point's 192.168.4.1 does not exist here: phones' captive checks (and any client that
        # follows the redirect) are sent to this computer's own listener instead, never onto a real network.
        "METERPLUS_SETUP_URL": "http://%s:%d/" % (args.bind if args.bind != "0.0.0.0" else "127.0.0.1", args.http_port),
    }
    overrides.update(_start_ntp(args.ntp, args.speed))

    # gc.mem_free/mem_alloc exist only on the device; the runtime can force a low reading for the 503 path.
    def _mem_free():
        forced = _hostenv.control("free_heap") or _hostenv.forced_free_heap
        return int(forced) if forced is not None else 2_000_000

    gc.mem_free = _mem_free
    gc.mem_alloc = lambda: 100_000
    # The supervisor collects after every cycle to keep the device's heap tidy. Here that is CPython's collector
    # walking this whole process (4 ms a cycle, most of an idle host's CPU); reference counting frees the rest and
    # CPython's own thresholds still run the older generations, so the firmware's call collects the young one.
    full_collect = gc.collect
    gc.collect = lambda generation=0: full_collect(generation)

    def _terminate(signum, frame):
        _hostenv.clamp(None)   # an orderly stop waits on ticks outside the loop (the MQTT linger): no cycles bound it
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _terminate)
    _route_watchdog_resets()
    os.chdir(state)
    print("Meter Plus host runtime: http://%s:%d/  (drive %s, meter %s, speed %g)"
          % (args.bind, args.http_port, state, args.meter, args.speed), flush=True)
    while True:
        _load_settings_toml(toml, overrides)
        try:
            if not booted:
                _run_boot_py(app_dir)
            booted = False
            _stretch_network_deadlines(args.speed)
            _install_idle()
            runpy.run_path(os.path.join(app_dir, "code.py"), run_name="__main__")
            return 0  # code.py returned: the device would wait for a reload
        except WatchdogReset:
            _hostenv.reset_count += 1
            _hostenv.last_reset_reason = "WATCHDOG"
            print("host: watchdog: restarting the firmware after a hang", flush=True)
            socketpool.drop_all()
            _disarm_watchdog()
            _purge_firmware_modules()
            _reset_radios()
        except _hostenv.HostReset as reset:
            _hostenv.reset_count += 1
            _hostenv.last_reset_reason = None
            print("host: %s: restarting the firmware" % reset.kind, flush=True)
            socketpool.drop_all()       # a chip reset frees every socket: the new start can listen again
            _disarm_watchdog()
            _purge_firmware_modules()
            _reset_radios()
        except KeyboardInterrupt:
            print("host: stopped", flush=True)
            return 0
        except Exception as exc:
            missing = _missing_package(exc) if isinstance(exc, ImportError) else None
            if missing is not None:
                # Not a device behaviour: this computer lacks a package the runtime needs. Say so, free the port.
                socketpool.drop_all()
                sys.stderr.write("python -m host: error: the Python package providing '%s' is not installed (%s); "
                                 "`make run` installs the lines of requirements-dev.txt marked '# run'\n"
                                 % (missing, exc))
                return EXIT_NOT_INSTALLED
            import traceback

            traceback.print_exc()
            sys.stdout.flush()
            socketpool.drop_all()       # a chip reset (or a VM that ended) frees every socket
            try:
                restart = _crash_wait(args.speed)
            except KeyboardInterrupt:
                print("host: stopped", flush=True)
                return 0
            if restart:
                _hostenv.reset_count += 1
                _hostenv.last_reset_reason = "WATCHDOG"
                print("host: watchdog: restarting the firmware after a crash", flush=True)
                _disarm_watchdog()
                _purge_firmware_modules()


# Deadlines that a peer on the real network experiences (an HTTP client, the MQTT broker, a Modbus client, the NTP
# server). The firmware measures them on ticks, which run --speed times faster here, so they are stretched by the
# same factor; everything else (meter staleness, history intervals) stays on simulated time on purpose.
NETWORK_DEADLINES = (
    ("core.supervisor", "Supervisor", ("warn_poll_ms", "cycle_budget_ms")),
    ("services.api.server", "HardenedServer", ("recv_deadline_ms", "send_deadline_ms", "drain_ms", "stall_ms",
                                                "send_stall_ms")),
    ("services.mqtt.service", "MqttService", ("connect_timeout_ms", "connack_timeout_ms", "ping_every_ms",
                                              "ping_timeout_ms", "send_stall_ms", "backoff_first_ms",
                                              "backoff_max_ms", "stable_ms")),
    ("services.modbus.server", "ModbusServer", ("idle_ms",)),
    ("core.clock", "Clock", ("TIMEOUT_MS", "RETRY_MS", "RETRY_MAX_MS")),
    # A phone writing Improv frames: a split frame must be complete within partial_ms of real time.
    ("services.network.provisioning", "ImprovProvisioning", ("partial_ms",)),
    ("services.ota.http_get", "HttpGet", ("stall_ms",)),
    ("services.cloud.service", "CloudService", ("welcome_timeout_ms", "send_stall_ms")),
)


def _stretch_network_deadlines(speed):
    """Scale the real-time deadlines by --speed on the freshly imported firmware classes (before code.py runs)."""
    import importlib

    for module, cls, attrs in NETWORK_DEADLINES:
        try:
            klass = getattr(importlib.import_module(module), cls)
        except Exception:  # a broken (or older) application: code.py meets the error itself, as on the chip
            continue
        for attr in attrs:
            setattr(klass, attr, int(getattr(klass, attr) * speed))


def _install_idle():
    """Put the host's wait (host/idle_wait.py) behind the firmware's idle door, core.idle.wait, on the freshly
    imported module (before code.py runs, again after each reset), and bound the simulated clock per loop cycle.
    An application without the door (an older release on the drive) waits its own way, on an unbounded clock."""
    import _hostenv
    import microcontroller

    from host.idle_wait import HostIdle

    try:
        from core import idle
    except Exception:  # noqa: BLE001 - a broken (or older) application: code.py meets the error itself
        _hostenv.clamp(None)
        return None
    waiter = HostIdle(watchdog=microcontroller.watchdog)
    cap_ms = os.environ.get("METERPLUS_HOST_IDLE_CAP_MS")   # bench/bench_host_idle.py: CPU against timer lateness
    if cap_ms:
        waiter.CAP_S = float(cap_ms) / 1000
    idle.wait = waiter.wait
    _hostenv.clamp(_hostenv.STEP_S)
    return waiter


def _start_ntp(spec, speed):
    """Start the NTP stand-in and tell the firmware where it is (an override of the ntp_server setting)."""
    from host import ntp_server
    if spec in ("local", "fail"):
        # local answers from this computer's clock in lockstep with the simulated ticks; fail drops every request.
        host, port, _stop = ntp_server.start_ntp_server(speed, clock=ntp_server.hostenv_clock(),
                                                        answer=(spec == "local"))
        return {"METERPLUS_NTP_OVERRIDE": "%s:%d" % (host, port)}
    return {"METERPLUS_NTP_OVERRIDE": spec}


if __name__ == "__main__":
    sys.exit(main())
