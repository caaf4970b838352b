"""Stand-in for microcontroller: pins, cpu (uid, reset_reason), nvm backed by a file, reset()."""

import os

import _hostenv


class Pin:
    """A named pin; the host only compares them."""

    def __init__(self, name):
        self._name = name

    def __repr__(self):
        return "board." + self._name

    def __hash__(self):
        return hash(self._name)


class ResetReason:
    """Enum-like reset reasons of the real module."""

    POWER_ON = "POWER_ON"
    BROWNOUT = "BROWNOUT"
    SOFTWARE = "SOFTWARE"
    DEEP_SLEEP_ALARM = "DEEP_SLEEP_ALARM"
    RESET_PIN = "RESET_PIN"
    WATCHDOG = "WATCHDOG"
    UNKNOWN = "UNKNOWN"
    RESCUE_DEBUG = "RESCUE_DEBUG"


class RunMode:
    """Enum-like run modes for on_next_reset()."""

    NORMAL = "NORMAL"
    SAFE_MODE = "SAFE_MODE"
    UF2 = "UF2"
    BOOTLOADER = "BOOTLOADER"


class Processor:
    """The CPU: uid, frequency, temperature, reset_reason."""

    frequency = 240_000_000
    temperature = 41.0
    voltage = None

    @property
    def uid(self):
        return bytearray(_hostenv.mac)

    @property
    def reset_reason(self):
        # Starting the process is applying power; microcontroller.reset() is a software restart; a restart after a
        # crash with the watchdog armed is WATCHDOG. A test can force any reason (_hostenv.reset_reason in-process,
        # .host_control/reset_reason from outside).
        forced = _hostenv.reset_reason or _hostenv.control("reset_reason")
        if forced:
            return getattr(ResetReason, forced)
        if _hostenv.last_reset_reason == "WATCHDOG":
            return ResetReason.WATCHDOG
        return ResetReason.SOFTWARE if _hostenv.reset_count else ResetReason.POWER_ON


class _FileNvm:
    """8 KB of non-volatile memory kept in nvm.bin inside the state folder; every write rewrites all of it."""

    SIZE = 8192

    def __init__(self):
        self.writes = 0

    def _path(self):
        return os.path.join(_hostenv.state_dir, ".nvm.bin")

    def _load(self):
        try:
            with open(self._path(), "rb") as f:
                data = f.read()
        except OSError:
            data = b""
        return bytearray(data[: self.SIZE].ljust(self.SIZE, b"\xff"))

    def __len__(self):
        return self.SIZE

    def __getitem__(self, index):
        return self._load()[index]

    def __setitem__(self, index, value):
        data = self._load()
        data[index] = value
        if len(data) != self.SIZE:
            raise ValueError("nvm size cannot change")
        with open(self._path(), "wb") as f:
            f.write(data)
        self.writes += 1


cpu = Processor()
cpus = [cpu]
nvm = _FileNvm()


def on_next_reset(run_mode):
    """Recorded only: the host has no bootloader."""
    global _next_mode
    _next_mode = run_mode


_next_mode = RunMode.NORMAL


def reset():
    """Restart the firmware (the host runner catches this and runs code.py again)."""
    raise _hostenv.HostReset("reset")


def delay_us(delay):
    """Busy wait on the device; a no-op here."""


import watchdog as _watchdog_module  # noqa: E402  (the real module owns the same timer object)

watchdog = _watchdog_module.WatchDogTimer()
