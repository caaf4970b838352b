"""python -m host: run code.py on this computer with a simulated (or USB) meter and a folder as CIRCUITPY."""

import argparse
import gc
import os
import runpy
import shutil
import signal
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CP_DIR = os.path.join(REPO, "host", "cp")
EXIT_BAD_FLAGS = 2
FIRMWARE_PACKAGES = ("core", "drivers", "meter", "services")


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


def parse_args(argv):
    """The runtime's flags; argparse exits with status 2 and a message on bad ones."""
    p = argparse.ArgumentParser(prog="python -m host", description=__doc__)
    p.add_argument("--http-port", type=_port, default=8080, help="REST API port (default 8080)")
    p.add_argument("--modbus-port", type=_port, default=5020, help="Modbus TCP port when enabled (default 5020)")
    p.add_argument("--bind", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--state", default=".host", help="folder acting as the CIRCUITPY drive (default .host/)")
    p.add_argument("--meter", default="sim", help="sim, a capture file (hex or binary) or a serial device")
    p.add_argument("--speed", type=_positive_float, default=1.0, help="simulated clock speed factor (default 1)")
    p.add_argument("--ntp", default="local", help="local (computer clock), HOST[:PORT], or fail")
    p.add_argument("--led", action="store_true", help="draw the status LED in the terminal")
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


def _purge_firmware_modules():
    """Forget imported firmware modules so a reset starts from fresh module state, as on the chip."""
    for name in list(sys.modules):
        if name.split(".")[0] in FIRMWARE_PACKAGES:
            del sys.modules[name]


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if os.path.exists(args.meter) or args.meter == "sim" or args.meter.startswith("/dev/"):
        pass
    else:
        sys.stderr.write("python -m host: error: --meter: no such file or device: %s\n" % args.meter)
        return EXIT_BAD_FLAGS
    sys.path[:0] = [CP_DIR, REPO]
    import _hostenv  # noqa: E402  (the stand-ins' shared state)
    import neopixel  # noqa: E402

    state = os.path.abspath(args.state)
    toml = _prepare_drive(state)
    _hostenv.state_dir = state
    _hostenv.set_speed(args.speed)
    neopixel.show_in_terminal = args.led

    from host import meter_source  # noqa: E402

    try:
        _hostenv.meter_source = meter_source.open_source(args.meter)
    except (OSError, ValueError) as exc:
        sys.stderr.write("python -m host: error: --meter: %s\n" % exc)
        return EXIT_BAD_FLAGS

    overrides = {
        "METERPLUS_HTTP_PORT": str(args.http_port),
        "METERPLUS_MODBUS_PORT": str(args.modbus_port),
        "METERPLUS_BIND": args.bind,
    }
    overrides.update(_start_ntp(args.ntp, args.speed))

    # gc.mem_free/mem_alloc exist only on the device; the runtime can force a low reading for the 503 path.
    def _mem_free():
        forced = _hostenv.control("free_heap") or _hostenv.forced_free_heap
        return int(forced) if forced is not None else 2_000_000

    gc.mem_free = _mem_free
    gc.mem_alloc = lambda: 100_000

    def _terminate(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _terminate)
    os.chdir(state)
    print("Meter Plus host runtime: http://%s:%d/  (drive %s, meter %s, speed %g)"
          % (args.bind, args.http_port, state, args.meter, args.speed), flush=True)
    while True:
        _load_settings_toml(toml, overrides)
        _stretch_network_deadlines(args.speed)
        try:
            runpy.run_path(os.path.join(REPO, "code.py"), run_name="__main__")
            return 0  # code.py returned: the device would wait for a reload
        except _hostenv.HostReset as reset:
            _hostenv.reset_count += 1
            print("host: %s: restarting the firmware" % reset.kind, flush=True)
            _purge_firmware_modules()
        except KeyboardInterrupt:
            print("host: stopped", flush=True)
            return 0


# Deadlines that a peer on the real network experiences (an HTTP client, the MQTT broker, a Modbus client, the NTP
# server). The firmware measures them on ticks, which run --speed times faster here, so they are stretched by the
# same factor; everything else (meter staleness, history intervals) stays on simulated time on purpose.
NETWORK_DEADLINES = (
    ("core.supervisor", "Supervisor", ("warn_poll_ms",)),
    ("services.api.server", "HardenedServer", ("recv_deadline_ms", "send_deadline_ms", "drain_ms", "stall_ms",
                                                "send_stall_ms")),
    ("services.mqtt.service", "MqttService", ("connect_timeout_ms", "connack_timeout_ms", "ping_every_ms",
                                              "ping_timeout_ms", "send_stall_ms", "backoff_first_ms",
                                              "backoff_max_ms", "stable_ms")),
    ("services.modbus.server", "ModbusServer", ("idle_ms",)),
    ("core.clock", "Clock", ("TIMEOUT_MS", "RETRY_MS", "RETRY_MAX_MS")),
)


def _stretch_network_deadlines(speed):
    """Scale the real-time deadlines by --speed on the freshly imported firmware classes (before code.py runs)."""
    import importlib

    for module, cls, attrs in NETWORK_DEADLINES:
        klass = getattr(importlib.import_module(module), cls)
        for attr in attrs:
            setattr(klass, attr, int(getattr(klass, attr) * speed))


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
