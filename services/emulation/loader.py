"""The emulations' code in the heap only while one is on: imported when the setting turns it on, let go when off.

CircuitPython keeps every imported module's bytecode in the heap (README, "Device bench"); the emulations are off
by default, so a device that never uses them never pays for them, as the update code is loaded only while in use.
"""

from adafruit_ticks import ticks_diff

from core.module import OK, WARN, Module
from core.modules import unload

SHELLY_PARTS = ("services.emulation.shelly_udp", "services.emulation.shelly_ws", "services.emulation.shelly_rpc",
                "services.emulation.em_text", "services.emulation.ws_frames")
SMA_PARTS = ("services.emulation.sma_sender", "services.emulation.sma_wire")
SHARED_PARTS = ("services.emulation.meter_view",)


class EmulationLoader(Module):
    """app: core.app.App (pool, bus, settings, device id, energy floor, log, env). Builds the Shelly listeners
    (app.shelly_udp, app.shelly_ws, app.shelly_ident) while emulation.shelly is on and the SMA sender (app.sma)
    while emulation.sma is on, polls them, and stops and unloads them when switched off. Out of memory while
    loading: that emulation stays off (counted, logged, in /system/info) and is tried again after retry_ms."""

    name = "emulation"
    poll_every_ms = 50      # batteries regulate on 1-4 s; 50 ms added is not felt
    retry_ms = 60000

    def __init__(self, app, bind="0.0.0.0", sma_group=None):
        Module.__init__(self)
        self._app = app
        self._bind = bind
        self._sma_group = sma_group
        self._failed = {}          # "shelly"/"sma" -> ticks of the last out-of-memory load
        # Read again only when the settings change (a dotted get allocates; this runs every cycle for every user).
        self._changes = app.bus.subscribe("settings", 4)
        self._want = {}
        self._read_settings()

    def _read_settings(self):
        get = self._app.settings.get
        self._want = {"shelly": get("emulation.shelly", False) is True, "sma": get("emulation.sma", False) is True}
        for key in ("shelly", "sma"):
            if not self._want[key]:
                self._failed.pop(key, None)   # switched off: no back-off stamp left to age past the tick wrap

    def wanted(self, key):
        """Whether the emulation key ("shelly", "sma") is switched on (as of the last settings change)."""
        return self._want[key]

    def _may_try(self, key, now_ms):
        at = self._failed.get(key)
        return at is None or not 0 <= ticks_diff(now_ms, at) < self.retry_ms

    def poll(self, now_ms):
        app = self._app
        changed = False
        while self._changes.pop() is not None:
            changed = True
        if changed:
            self._read_settings()
        # Nothing allocated while both are off and stay off: this runs every cycle on every device.
        if self._want["shelly"] != (app.shelly_udp is not None):
            self._switch("shelly", now_ms)
        if self._want["sma"] != (app.sma is not None):
            self._switch("sma", now_ms)
        if app.shelly_udp is not None:
            app.shelly_udp.poll(now_ms)
            app.shelly_ws.poll(now_ms)
        if app.sma is not None:
            app.sma.poll(now_ms)

    def _switch(self, key, now_ms):
        """Load the emulation key when it is wanted (unless backing off after running out of memory), else drop."""
        shelly = key == "shelly"
        if not self._want[key]:
            if shelly:
                self._drop_shelly()
            else:
                self._drop_sma()
            return
        if not self._may_try(key, now_ms):
            return
        try:
            if shelly:
                self._load_shelly()
            else:
                self._load_sma()
        except MemoryError:
            if shelly:
                self._drop_shelly()
            else:
                self._drop_sma()
            self._failed[key] = now_ms
            self.state = WARN
            self.count(key + "_out_of_memory")
            self._app.log.error("emulation %s off: out of memory", key)
            return
        self._failed.pop(key, None)
        self.count(key + "_loaded")
        if not self._failed:
            self.state = OK

    def _load_shelly(self):
        from core.version import VERSION
        from services.emulation.shelly_rpc import Identity
        from services.emulation.shelly_udp import ShellyUdp, own_addresses
        from services.emulation.shelly_ws import ShellyWs

        app = self._app
        ident = Identity(app.device_id, app.settings.get("device_name", None), VERSION)
        uptime = app.log.uptime.ms
        udp = ShellyUdp(app.pool, app.bus, app.settings, ident, energy_floor=app.energy_floor,
                        uptime=lambda: uptime() // 1000, host=self._bind,
                        own=own_addresses(app.radio) if app.radio is not None else None)
        ws = ShellyWs(app.bus, app.settings, ident, energy_floor=app.energy_floor, uptime=lambda: uptime() // 1000,
                      unix_ms=lambda ticks: app.clock.time_ms(ticks) if app.clock is not None else None)
        udp.budget = ws.budget = app.sockets
        udp.start()
        ws.start()
        app.shelly_ident, app.shelly_udp, app.shelly_ws = ident, udp, ws
        if app.sma is not None:
            app.sma.lender = udp

    def _drop_shelly(self):
        app = self._app
        for module in (app.shelly_udp, app.shelly_ws):
            if module is not None:
                module.stop()
        if app.shelly_udp is not None:
            app.shelly_udp.release()
        app.shelly_ident = app.shelly_udp = app.shelly_ws = None
        if app.sma is not None:
            app.sma.lender = None   # it opens its own socket again (asking the budget)
        self._unload(SHELLY_PARTS, app.sma is None)

    def _load_sma(self):
        from services.emulation.sma_sender import GROUP, SmaSender

        app = self._app
        sender = SmaSender(app.pool, app.bus, app.settings, app.device_id, energy_floor=app.energy_floor,
                           log=app.log, group=self._sma_group or GROUP)
        sender.budget = app.sockets
        sender.lender = app.shelly_udp
        sender.start()
        app.sma = sender

    def _drop_sma(self):
        app = self._app
        if app.sma is not None:
            app.sma.stop()
            app.sma.release()
        app.sma = None
        self._unload(SMA_PARTS, app.shelly_udp is None)

    @staticmethod
    def _unload(parts, shared_too):
        unload(*(parts + SHARED_PARTS if shared_too else parts))

    def stop(self):
        self._drop_shelly()
        self._drop_sma()

    def describe(self):
        d = Module.describe(self)
        d["shelly_loaded"] = self._app.shelly_udp is not None
        d["sma_loaded"] = self._app.sma is not None
        return d
