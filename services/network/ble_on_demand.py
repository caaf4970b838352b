"""The Improv BLE transport, built the first time the provisioning window opens.

A configured device whose button is never pressed then never loads adafruit_ble (about 35 KB of heap on
CircuitPython, `make bench-device`). Once built it stays until the next restart: CircuitPython keeps a published
GATT service until the chip resets, so building the transport again would publish a second Improv service.
"""


class OnDemandTransport:
    """Stands in for drivers.ble_provision.BleImprovTransport until the window first opens; factory() builds it."""

    def __init__(self, factory, log=None):
        self._factory = factory
        self._log = log
        self._t = None
        self._state = None
        self.failed = ""    # why the transport could not be built (out of memory, adafruit_ble missing)

    @property
    def loaded(self):
        return self._t is not None

    def _load(self):
        if self._factory is None:
            return False
        try:
            t = self._factory()
            t.start()
            if self._state is not None:
                t.set_state(self._state)
        except (MemoryError, ImportError) as exc:
            # Tried once per restart: the window stays without BLE, the access point still offers setup.
            self._factory = None
            self.failed = "%s: %s" % (type(exc).__name__, exc)
            if self._log is not None:
                self._log.error("BLE provisioning off until restart: %s", self.failed)
            return False
        self._t = t
        return True

    def start(self):
        """Nothing yet: the transport is built when the window opens."""

    @property
    def connected(self):
        return self._t.connected if self._t is not None else False

    @property
    def advertising(self):
        return self._t.advertising if self._t is not None else False

    def advertise(self, on):
        if self._t is None and (not on or not self._load()):
            return
        self._t.advertise(on)

    def read(self):
        return self._t.read() if self._t is not None else None

    def discard_input(self):
        if self._t is not None:
            self._t.discard_input()

    def set_state(self, state):
        self._state = state
        if self._t is not None:
            self._t.set_state(state)

    def set_error(self, error):
        if self._t is not None:
            self._t.set_error(error)

    def send_result(self, frame):
        if self._t is not None:
            self._t.send_result(frame)

    def disconnect(self):
        if self._t is not None:
            self._t.disconnect()
