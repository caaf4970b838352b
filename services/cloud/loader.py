"""The cloud upload's code in the heap only while cloudIotEnabled is on: imported when the setting turns it on, let go
when it is switched off (off by default: a device that never uses the cloud never pays for its code)."""

from adafruit_ticks import ticks_diff

from core.module import OK, WARN, Module
from core.modules import unload

PARTS = ("services.cloud.service",)


class CloudLoader(Module):
    """app: core.app.App (pool, bus, settings, device id, clock, log). While cloudIotEnabled is true it builds the
    cloud service (app.cloud, with the stored pairing app.cloud_pairing), starts and polls it; switched off, it stops
    it and lets its code go. Out of memory while loading: off (counted, logged) and tried again after retry_ms."""

    name = "cloud"
    poll_every_ms = 250     # the service's own interval
    retry_ms = 60000

    def __init__(self, app, version, ssl_factory=None):
        Module.__init__(self)
        self._app = app
        self._version = version
        self._ssl_factory = ssl_factory
        self._failed_at = None
        self._changes = app.bus.subscribe("settings", 4)
        self._want = app.settings.get("cloudIotEnabled", False) is True

    def poll(self, now_ms):
        app = self._app
        changed = False
        while self._changes.pop() is not None:
            changed = True
        if changed:
            self._want = app.settings.get("cloudIotEnabled", False) is True
            if not self._want:
                self._failed_at = None
        if self._want != (app.cloud is not None):
            if self._want:
                self._load(now_ms)
            else:
                self._drop()
        if app.cloud is not None:
            app.cloud.poll(now_ms)
            self.state = app.cloud.state     # the LED and /system/info see the service's own state

    def _load(self, now_ms):
        at = self._failed_at
        if at is not None and 0 <= ticks_diff(now_ms, at) < self.retry_ms:
            return
        app = self._app
        try:
            from services.cloud.pairing import Pairing
            from services.cloud.service import CloudService

            if getattr(app, "cloud_pairing", None) is None:
                pairing = Pairing("cloud.json")     # the cloud/pair routes store through the same object
                pairing.load()
                app.cloud_pairing = pairing
            app.cloud = CloudService(app.pool, app.bus, app.settings, app.cloud_pairing, app.device_id,
                                     self._version, ssl_factory=self._ssl_factory, clock=app.clock, log=app.log)
            app.cloud.start()
        except MemoryError:
            self._drop()
            self._failed_at = now_ms
            self.state = WARN
            self.count("out_of_memory")
            app.log.error("cloud off: out of memory")
            return
        self._failed_at = None
        self.state = OK
        self.count("loaded")

    def _drop(self):
        app = self._app
        if app.cloud is not None:
            app.cloud.stop()
        app.cloud = None
        unload(*PARTS)

    def stop(self):
        self._drop()

    def describe(self):
        cloud = self._app.cloud
        d = cloud.describe() if cloud is not None else Module.describe(self)
        d["loaded"] = cloud is not None
        if cloud is None:
            d["connection"] = "OFF"
        return d
