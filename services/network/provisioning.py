"""Improv Wi-Fi provisioning session: BLE window, authorization by the button, the RPC commands, LED states."""

from adafruit_ticks import ticks_diff

from core.module import Module
from drivers.radio import expired as _expired
from core import improv

CAPABILITIES = improv.CAP_IDENTIFY | improv.CAP_DEVICE_INFO | improv.CAP_SCAN_WIFI


class ImprovProvisioning(Module):
    """transport (drivers.ble_provision.BleImprovTransport or a fake), wifi (drivers.radio.WifiManager), settings,
    bus (button events in, "settings" out), led (StatusLed), info: (firmware, version, chip), web_url: callable
    giving the web interface's URL once joined, log.

    The BLE window opens at boot in setup mode (no WiFi configured) and on a short press of the button, and closes
    after window_ms without a phone. A short press also authorizes (Improv's "authorization required" state): only
    someone at the device can hand it new WiFi credentials.
    """

    name = "improv"
    poll_every_ms = 100     # a phone's BLE writes wait in the characteristic
    window_ms = 5 * 60 * 1000     # BLE advertising after setup mode starts or a short press
    window_max_ms = 10 * 60 * 1000  # a connected phone extends the window to this, never further
    authorized_ms = 60 * 1000     # an authorization is good for this long (then a press is needed again)
    partial_ms = 2000             # a frame split over writes must be complete within this long
    identify_ms = 5000
    blink_ms = 250

    def __init__(self, transport, wifi, settings, bus, led, info, web_url, log=None):
        Module.__init__(self)
        self._t = transport
        self._wifi = wifi
        self._settings = settings
        self._bus = bus
        self._events = bus.subscribe("event", 4)
        self._led = led
        self._info = info
        self._web_url = web_url
        self._log = log
        self._frames = improv.Reassembler()
        self.improv_state = improv.AUTHORIZATION_REQUIRED
        self.window_since = None
        self.authorized_since = None
        self._partial_since = None
        self._pending_wifi = None    # (doc, changed, profile) to try at the next poll
        self._results = []           # frames to notify, one per poll
        self._scan_wanted = False
        self._identify_since = None
        self._led_enabled = True
        self._was_connected = False
        self._now = 0

    # --- module contract ---

    def start(self):
        self._t.start()
        if not self._wifi.configured():
            self.open_window(None)   # setup mode: factory state

    def poll(self, now_ms):
        self._now = now_ms
        if self.window_since == -1:
            self.window_since = now_ms
        ev = self._events.pop()
        while ev is not None:
            if ev == ("button", "short"):
                self._on_short_press(now_ms)
            elif ev == ("ble", "open_window"):   # Lifecycle's word for the same press, or another opener
                self.open_window(now_ms)
            ev = self._events.pop()
        connected = self._t.connected
        if connected != self._was_connected:
            self._was_connected = connected
            self._frames.reset()
            self.count("connections" if connected else "disconnections")
            if not connected:
                self._results = []
        if self.window_since is not None:
            # A connected phone may finish what it started, but it cannot hold the window open: at window_max_ms
            # the window closes and the phone is disconnected.
            limit = self.window_max_ms if connected else self.window_ms
            if _expired(now_ms, self.window_since, limit):
                self.close_window()
                if connected:
                    self._t.disconnect()
                    self.count("sessions_ended")
                    if self._log is not None:
                        self._log.info("improv: window closed after %d min, phone disconnected",
                                       self.window_max_ms // 60000)
                    connected = False
        if self.authorized_since is not None and self.improv_state == improv.AUTHORIZED and \
                _expired(now_ms, self.authorized_since, self.authorized_ms):
            self._set_state(improv.AUTHORIZATION_REQUIRED)
            self.authorized_since = None
        self._t.advertise(self.window_since is not None and not connected)
        self._poll_identify(now_ms)
        self._show_led(connected)
        if self._pending_wifi is not None:
            self._finish_wifi()
        elif connected and self.window_since is not None:
            self._receive(now_ms)
        elif connected:
            self._t.discard_input()     # outside a window nothing a phone writes is acted on
        self._poll_scan()
        if self._results and connected:
            self._t.send_result(self._results.pop(0))

    def stop(self):
        self._stop_identify()
        try:
            self._t.advertise(False)
        except Exception:
            pass
        self._led.set("BLE_ACTIVE", False)
        self._led.set("BLE_CONNECTED", False)

    def describe(self):
        d = Module.describe(self)
        d["window_open"] = self.window_since is not None
        d["improv_state"] = self.improv_state
        loaded = getattr(self._t, "loaded", None)   # services/network/ble_on_demand.py: BLE built on demand
        if loaded is not None:
            d["ble_loaded"] = loaded
            if self._t.failed:
                d["ble_failed"] = self._t.failed
        return d

    # --- window and authorization ---

    def open_window(self, now_ms):
        """Start (or extend) the BLE window."""
        self.window_since = now_ms if now_ms is not None else -1   # -1: stamped at the next poll
        self.count("windows")

    def close_window(self):
        self.window_since = None
        self._t.advertise(False)
        if self.improv_state == improv.AUTHORIZED:
            self._set_state(improv.AUTHORIZATION_REQUIRED)
        self.authorized_since = None

    def _on_short_press(self, now_ms):
        self.open_window(now_ms)
        if self.improv_state in (improv.AUTHORIZATION_REQUIRED, improv.AUTHORIZED):
            self.authorized_since = now_ms
            self._set_state(improv.AUTHORIZED)

    def _set_state(self, state):
        self.improv_state = state
        self._t.set_state(state)

    def _show_led(self, connected):
        self._led.set("BLE_CONNECTED", connected)
        self._led.set("BLE_ACTIVE", self.window_since is not None and not connected)

    # --- commands ---

    def _receive(self, now_ms):
        data = self._t.read()
        if data:
            if not self._frames.add(data):
                self._error(improv.INVALID_RPC, "frame longer than %d bytes" % improv.MAX_FRAME)
                return
            self._partial_since = now_ms
        frame = self._frames.take()
        if frame is None:
            if self._frames.pending() and self._partial_since is not None and \
                    _expired(now_ms, self._partial_since, self.partial_ms):
                self._frames.reset()
                self._error(improv.INVALID_RPC, "incomplete frame dropped")
            return
        err, command, payload = frame
        if err != improv.NO_ERROR:
            self._frames.reset()   # the bytes after a broken frame cannot be trusted
            self._error(err, "bad checksum")
            return
        self._t.set_error(improv.NO_ERROR)
        self._command(command, payload)

    def _error(self, code, why):
        self.count("errors")
        self._t.set_error(code)
        if self._log is not None:
            self._log.warning("improv: error %d (%s)", code, why)

    def _command(self, command, payload):
        self.count("commands")
        strings = improv.strings(payload)
        if strings is None:
            self._error(improv.INVALID_RPC, "string lengths do not add up")
        elif command == improv.WIFI_SETTINGS:
            self._wifi_settings(strings)
        elif command == improv.IDENTIFY:
            self._start_identify()
        elif command == improv.DEVICE_INFO:
            firmware, version, chip = self._info
            name = self._settings.get("device_name", "")
            self._results.append(improv.encode(improv.DEVICE_INFO, [firmware.encode(), version.encode(),
                                                                    chip.encode(), name.encode()]))
        elif command == improv.SCAN_WIFI:
            self._scan_wanted = True
            self._wifi.scanner.request()
        else:
            self._error(improv.UNKNOWN_RPC, "unknown command 0x%02x" % command)

    def _wifi_settings(self, strings):
        if self.improv_state != improv.AUTHORIZED:
            self._error(improv.NOT_AUTHORIZED, "WiFi settings without a button press")
            return
        if len(strings) != 2:
            self._error(improv.INVALID_RPC, "WiFi settings need ssid and password")
            return
        try:
            ssid = strings[0].decode()
            password = strings[1].decode()
        except UnicodeError:
            self._error(improv.INVALID_RPC, "ssid or password is not UTF-8")
            return
        # The same validation as POST /api/v1/settings; a phone provisions a DHCP network. An empty password is an
        # open network (null clears the stored secret; an empty string would keep it).
        patch = {"wifi": {"primary": {"ssid": ssid, "password": password or None, "enable": True,
                                      "static_ip": False}}}
        doc, changed, errors = self._settings.prepare(patch)
        if not ssid:
            errors["wifi.primary.ssid"] = "must not be empty"
        if errors:
            self._error(improv.UNABLE_TO_CONNECT, "; ".join("%s %s" % (k, errors[k]) for k in sorted(errors)))
            return
        self._set_state(improv.PROVISIONING)
        self._pending_wifi = (doc, changed, doc["wifi"]["primary"])  # joined at the next poll: the state goes first

    def _finish_wifi(self):
        doc, changed, profile = self._pending_wifi
        self._pending_wifi = None
        err = self._wifi.try_credentials(profile)
        if err is not None:
            self._set_state(improv.AUTHORIZED)
            self._error(improv.UNABLE_TO_CONNECT, err)   # the old settings stay
            return
        try:
            self._settings.commit(doc)
        except OSError as exc:
            self._set_state(improv.AUTHORIZED)
            self._error(improv.UNKNOWN_ERROR, "settings not stored: %s" % exc)
            return
        if changed:
            self._bus.publish("settings", changed)
        self._set_state(improv.PROVISIONED)
        self.count("provisioned")
        url = self._web_url()
        self._results.append(improv.encode(improv.WIFI_SETTINGS, [url.encode()] if url else []))
        if self._log is not None:
            self._log.info("improv: provisioned %s", profile["ssid"])

    def _poll_scan(self):
        sc = self._wifi.scanner
        if not self._scan_wanted or sc.scanning or sc.wanted:
            return
        self._scan_wanted = False
        for n in sc.networks:
            self._results.append(improv.encode(improv.SCAN_WIFI, [
                n["ssid"].encode(), str(n["rssi"]).encode(), b"YES" if n["secure"] else b"NO"]))
        self._results.append(improv.encode(improv.SCAN_WIFI, []))   # an empty result ends the list

    # --- identify: blink the LED ---

    def _start_identify(self):
        if self._identify_since is None:
            self._led_enabled = self._led.enabled
        self._identify_since = self._now

    def _poll_identify(self, now_ms):
        if self._identify_since is None:
            return
        d = ticks_diff(now_ms, self._identify_since)
        if d < 0 or d >= self.identify_ms:
            self._stop_identify()
            return
        self._led.enabled = (d // self.blink_ms) % 2 == 0

    def _stop_identify(self):
        if self._identify_since is not None:
            self._led.enabled = self._led_enabled
            self._identify_since = None
