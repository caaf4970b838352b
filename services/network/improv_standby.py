"""Improv provisioning's code in the heap only once it is needed: at a button press, or at start in setup mode.

The provisioning session (services/network/provisioning.py, core/improv.py, the on-demand BLE transport) is used
when someone sets the device up; a configured device whose button is never pressed never loads it. Once loaded it
stays until the next restart: its BLE transport, once built, publishes a GATT service that CircuitPython keeps until
the chip resets (services/network/ble_on_demand.py), so the session is never built twice.
"""

from core.module import OK, WARN, Module


class ImprovStandby(Module):
    """make() -> services.network.provisioning.ImprovProvisioning (imports it); wifi (drivers.radio.WifiManager);
    bus (button events); log. Stands in for the session until a short press of the button or a request to open the
    BLE window (the press is handed on to it), or at start when no WiFi is configured (setup mode)."""

    name = "improv"
    poll_every_ms = 100     # the session's own interval

    def __init__(self, make, wifi, bus, log=None):
        Module.__init__(self)
        self._make = make
        self._wifi = wifi
        self._log = log
        self._events = bus.subscribe("event", 4)
        self.session = None

    def start(self):
        if self.session is not None:
            self.session.start()
        elif not self._wifi.configured():
            self._load()     # setup mode: its start opens the window

    def _load(self):
        try:
            s = self._make()
            s.start()
        except MemoryError:
            self.state = WARN
            self.count("out_of_memory")
            if self._log is not None:
                self._log.error("improv: out of memory loading the provisioning, the access point still offers setup")
            return None
        self.session = s
        self.state = OK
        self.count("loaded")
        return s

    def poll(self, now_ms):
        s = self.session
        ev = self._events.pop()
        while ev is not None:
            if s is None and (ev == ("button", "short") or ev == ("ble", "open_window")):
                s = self._load()
                if s is not None:
                    if ev == ("button", "short"):
                        s._on_short_press(now_ms)    # the press that woke it opens the window and authorizes
                    else:
                        s.open_window(now_ms)
            ev = self._events.pop()   # once loaded the session reads its own copy of each event
        if s is not None:
            s.poll(now_ms)
            self.state = s.state

    def stop(self):
        if self.session is not None:
            self.session.stop()

    def describe(self):
        if self.session is not None:
            d = self.session.describe()
        else:
            d = Module.describe(self)
            d["window_open"] = False
        d["loaded"] = self.session is not None
        return d
