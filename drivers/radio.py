"""WiFi manager: two station profiles (DHCP or static), reconnect with backoff, the access point table, scans."""

from adafruit_ticks import ticks_diff

from core.module import OK, WARN, Module

AP_ALWAYS = "always"     # factory state, or accessPoint.enable true
AP_TIMED = "timed"       # cold start: 15 minutes next to the home WiFi, off when nobody is connected
AP_OFF = "off"           # software restart
AP_RESCUE = "rescue"     # the station has not been joined for rescue_ms: the owner must be able to get back in
# Resets where power was applied or a person pressed reset: the spec's "cold start". SOFTWARE (reboot call, update)
# and WATCHDOG, DEEP_SLEEP_ALARM, UNKNOWN are restarts nobody stood next to: no AP for them.
COLD_RESETS = ("POWER_ON", "BROWNOUT", "RESET_PIN")
AP_IP = "192.168.4.1"    # the Espressif port's fixed AP address (the web interface on the AP network)


def expired(now_ms, since_ms, duration_ms):
    """True when duration_ms have passed since since_ms; a stamp older than ticks_diff can tell (2**28 ms) counts
    as expired, never as in the future."""
    d = ticks_diff(now_ms, since_ms)
    return d < 0 or d >= duration_ms


def profile_usable(p):
    """True for a profile the station may join: enabled and with an SSID."""
    return bool(p) and bool(p.get("enable")) and bool(p.get("ssid"))


def ap_rule(configured, reset_reason, ap_enable):
    """The spec's access point table: AP_ALWAYS, AP_TIMED or AP_OFF."""
    if not configured or ap_enable:
        return AP_ALWAYS
    if reset_reason in COLD_RESETS:
        return AP_TIMED
    return AP_OFF


def ap_ssid(settings, device_id):
    """accessPoint.ssid, or Meter-Plus-<last six hex digits of the MAC>."""
    return settings.get("accessPoint.ssid") or ("Meter-Plus-" + device_id[-6:].upper())


class WifiScanner:
    """Background scan, one network per poll (the scan iterator waits for a channel on the device); cached results.

    radio: wifi.radio. Started by request(); WifiManager.poll() drives it and holds back connects meanwhile.
    """

    max_networks = 20
    stop_channel = 13     # 2.4 GHz channels allowed in Europe: the S3 has no 5 GHz, and 14 is Japan only

    def __init__(self, radio, open_mode=None):
        self._radio = radio
        self._open = open_mode   # wifi.AuthMode.OPEN: a network whose authmode lists it needs no password
        self._it = None
        self._found = {}
        self.networks = []       # [{"ssid", "rssi", "secure"}] of the last finished scan, strongest first
        self.scanning = False
        self.scanned = False
        self.scans = 0
        self.errors = 0
        self.wanted = False

    def request(self):
        """Ask for a fresh scan; it starts at the next poll unless one runs."""
        if not self.scanning:
            self.wanted = True

    def _begin(self):
        self.wanted = False
        try:
            self._it = self._radio.start_scanning_networks(start_channel=1, stop_channel=self.stop_channel)
        except Exception:  # RuntimeError while the radio is busy: the next request tries again
            self.errors += 1
            return
        self._found = {}
        self.scanning = True

    def poll(self):
        """One step: start a wanted scan or take one network from the running one."""
        if not self.scanning:
            if self.wanted:
                self._begin()
            return
        try:
            net = next(self._it)
        except StopIteration:
            self._finish()
            return
        except Exception:
            self.errors += 1
            self._finish()
            return
        ssid = net.ssid
        if ssid and (ssid not in self._found or net.rssi > self._found[ssid][0]):
            self._found[ssid] = (net.rssi, self._open not in net.authmode)

    def _finish(self):
        try:
            self._radio.stop_scanning_networks()
        except Exception:
            pass
        found = sorted(self._found.items(), key=lambda kv: -kv[1][0])[:self.max_networks]
        self.networks = [{"ssid": s, "rssi": v[0], "secure": v[1]} for s, v in found]
        self._found = {}
        self._it = None
        self.scanning = False
        self.scanned = True
        self.scans += 1

    def stop(self):
        if self.scanning:
            self._finish()


class WifiManager(Module):
    """radio (wifi.radio), auth_modes (wifi.AuthMode), settings, reset_reason (ResetReason name), device_id,
    ip_address (ipaddress.ip_address), log. Joins a station profile and runs the access point by the spec's table.

    CircuitPython's connect() blocks until it joins or fails (scan + association + DHCP, bounded by timeout), so a
    poll calls it at most once, with the channel of the last join (no full scan), and attempts back off.
    """

    name = "wifi"
    poll_every_ms = 250     # joins and losses take seconds
    connect_timeout_s = 4       # the IR head's 4096 B UART buffer covers 4 s at 9600 baud
    reconnect_grace_ms = 8000   # CircuitPython retries by itself after a loss: give it this long first
    backoff_first_ms = 5000
    backoff_max_ms = 300000
    ap_window_ms = 15 * 60 * 1000   # spec: AP after a cold start, 15 minutes without a connection
    rescue_ms = 5 * 60 * 1000       # station lost this long (the router restarting): the AP comes back
    rescue_first_ms = 60 * 1000     # station not joined once since this start (a wrong password saved): sooner

    def __init__(self, radio, auth_modes, settings, reset_reason, device_id, ip_address=None, log=None):
        Module.__init__(self)
        self._radio = radio
        self._auth = auth_modes
        self._settings = settings
        self.reset_reason = reset_reason
        self.device_id = device_id
        self._ip = ip_address
        self._log = log
        self.scanner = WifiScanner(radio, auth_modes.OPEN)
        self.hostname = "meterplus-" + device_id
        self.ap_mode = AP_OFF
        self.ap_since = None
        self.ap_used = False
        self.active = None          # "primary"/"secondary": the profile joined at boot, kept for reconnects
        self.was_connected = False
        self.joined_once = False    # joined since this start: a later loss waits rescue_ms, else rescue_first_ms
        self.lost_at = None
        self.down_since = None      # ticks since when the station has not been joined (None while joined)
        self._next_try = None       # (since, wait_ms): earliest next connect() attempt
        self._backoff = 0
        self._order_pos = 0
        self.last_error = ""
        self._now = 0

    # --- profiles ---

    def profiles(self):
        """[(name, profile dict)] the station may use, primary first."""
        out = []
        for name in ("primary", "secondary"):
            p = self._settings.get("wifi." + name)
            if profile_usable(p):
                out.append((name, p))
        return out

    def configured(self):
        return len(self.profiles()) > 0

    def _addressing(self, p):
        """Static IPv4 (empty dns = gateway) or DHCP, before connect()."""
        r = self._radio
        if p.get("static_ip") and self._ip is not None:
            ip = self._ip
            r.set_ipv4_address(ipv4=ip(p["ip"]), netmask=ip(p["subnet"]), gateway=ip(p["gateway"]),
                               ipv4_dns=ip(p.get("dns") or p["gateway"]))
        else:
            r.start_dhcp()

    def _join(self, p):
        """One connect() call; None on success, else the reason."""
        try:
            self._addressing(p)
            channel = 0
            if self._channel_ssid == p["ssid"]:
                channel = self._channel
            self._radio.connect(p["ssid"], p.get("password", ""), channel=channel, timeout=self.connect_timeout_s)
        except (ConnectionError, OSError, RuntimeError, ValueError, TypeError) as exc:
            self.count("connect_failures")
            self.last_error = str(exc) or type(exc).__name__
            return self.last_error
        self.count("connects")
        self.last_error = ""
        info = self._radio.ap_info
        if info is not None:
            self._channel_ssid = p["ssid"]
            self._channel = info.channel
        return None

    _channel_ssid = None
    _channel = 0

    def try_credentials(self, profile, name="primary"):
        """Join the network of profile now (Improv, the web interface's join): None on success, else the reason.
        The access point stays as it is, so the person who asked still reaches the device. The caller stores it."""
        err = self._join(profile)
        if err is None:
            self.active = name
            self._on_connected(self._now)
            self._reconsider_ap(self._now, configured=True)
        else:
            self._next_try = (self._now, 0)   # back to the stored profile at the next poll
        return err

    # --- access point ---

    def _start_ap(self):
        s = self._settings
        ssid = ap_ssid(s, self.device_id)
        password = s.get("accessPoint.password", "") if s.get("accessPoint.password_enable") else ""
        try:
            if password:
                self._radio.start_ap(ssid, password, authmode=(self._auth.WPA2, self._auth.PSK))
            else:
                self._radio.start_ap(ssid, "", authmode=(self._auth.OPEN,))
        except (ValueError, RuntimeError, OSError) as exc:
            self.count("ap_errors")
            self.last_error = "AP: %s" % exc
            return False
        self.count("ap_starts")
        if self._log is not None:
            self._log.info("access point %s up (%s, %s)", ssid, self.ap_mode, "WPA2" if password else "open")
        return True

    def _stop_ap(self, why):
        try:
            self._radio.stop_ap()
        except Exception:
            self.count("ap_errors")
        if self._log is not None:
            self._log.info("access point off (%s)", why)

    def _stations(self):
        try:
            st = self._radio.stations_ap
            return len(st) if st is not None else 0
        except Exception:
            return 0

    def _reconsider_ap(self, now_ms, configured):
        """WiFi became configured at run time (Improv): the factory row no longer holds; the cold-start window
        starts now unless accessPoint.enable keeps the AP on."""
        if self.ap_mode == AP_ALWAYS and configured and not self._settings.get("accessPoint.enable"):
            self.ap_mode = AP_TIMED
            self.ap_since = now_ms

    # --- module contract ---

    def start(self):
        r = self._radio
        r.enabled = True
        try:
            r.hostname = self.hostname
        except (ValueError, AttributeError):
            pass
        self.ap_mode = ap_rule(self.configured(), self.reset_reason, self._settings.get("accessPoint.enable"))
        if self.ap_mode != AP_OFF and not r.ap_active:
            self._start_ap()
        self._next_try = None

    def poll(self, now_ms):
        self._now = now_ms
        r = self._radio
        if self.ap_mode != AP_OFF and self.ap_since is None:
            self.ap_since = now_ms
        self.scanner.poll()
        connected = r.connected
        if connected:
            self.down_since = None
        elif self.down_since is None:
            self.down_since = now_ms
        self._poll_ap(now_ms)
        if connected:
            if not self.was_connected:
                if self.active is None:   # joined before us (CircuitPython's own boot connect): adopt its profile
                    self.active = self._profile_of(self.ssid())
                self._on_connected(now_ms)
            self.state = OK
            return
        if self.was_connected:
            self.was_connected = False
            self.lost_at = now_ms
            self.count("losses")
            self._next_try = (now_ms, self.reconnect_grace_ms)
            self._backoff = 0
            if self._log is not None:
                self._log.warning("WiFi lost")
        profiles = self.profiles()
        if not profiles:
            self.state = OK
            return
        self.state = WARN
        if self.scanner.scanning:
            return  # a connect() would fail while the radio scans
        if self._next_try is not None and not expired(now_ms, self._next_try[0], self._next_try[1]):
            return
        name, p = self._pick(profiles)
        if self._join(p) is None:
            self.active = name
            self._on_connected(now_ms)
            return
        self._order_pos += 1
        if self.active is None and self._order_pos % len(profiles):
            self._next_try = (now_ms, 0)   # at boot: the next profile at once
            return
        self._backoff = self.backoff_first_ms if not self._backoff else min(self._backoff * 2, self.backoff_max_ms)
        self._next_try = (now_ms, self._backoff)

    def _profile_of(self, ssid):
        for name, p in self.profiles():
            if p["ssid"] == ssid:
                return name
        return None

    def _pick(self, profiles):
        """After a join, only the joined profile; at boot primary first, the secondary when it is unreachable."""
        if self.active is not None:
            for name, p in profiles:
                if name == self.active:
                    return name, p
        return profiles[self._order_pos % len(profiles)]

    def _on_connected(self, now_ms):
        self.was_connected = True
        self.joined_once = True
        self.lost_at = None
        self._backoff = 0
        self._next_try = None
        self.state = OK
        if self._log is not None:
            self._log.info("WiFi %s joined (%s), %s", self.active, self.ssid(), self.ip())

    def _poll_ap(self, now_ms):
        r = self._radio
        if self.ap_mode == AP_OFF:
            # The lock-out rule: whatever the reset, a station that cannot join (a wrong password saved, the router
            # replaced) brings the AP back, so nobody has to unplug the device to reach it again: after a minute when
            # it has not joined since this start, after rescue_ms when a joined network went away.
            wait = self.rescue_ms if self.joined_once else self.rescue_first_ms
            if self.down_since is not None and self.configured() and expired(now_ms, self.down_since, wait):
                self.ap_mode = AP_RESCUE
                self.ap_since = now_ms
                self.count("ap_rescues")
                if self._log is not None:
                    self._log.warning("WiFi not joined for %d min: access point back until it joins",
                                      wait // 60000)
                self._start_ap()
            return
        if not r.ap_active:
            return
        stations = self._stations()
        if stations:
            self.ap_used = True
        if self.ap_mode == AP_TIMED and stations == 0 and expired(now_ms, self.ap_since, self.ap_window_ms):
            if self.down_since is not None and expired(now_ms, self.down_since, self.rescue_ms):
                self.ap_mode = AP_RESCUE     # the window ends while the station still cannot join: keep it up
                return
            self.ap_mode = AP_OFF
            self._stop_ap("%d min passed and nobody is connected" % (self.ap_window_ms // 60000))
        elif self.ap_mode == AP_RESCUE and stations == 0 and self.down_since is None:
            self.ap_mode = AP_OFF
            self._stop_ap("the WiFi is joined again and nobody is connected")

    def stop(self):
        self.scanner.stop()

    # --- facts for /system/info, mDNS, captive DNS, Improv ---

    def connected(self):
        return bool(self._radio.connected)

    def ip(self):
        ip = self._radio.ipv4_address if self._radio.connected else None
        return str(ip) if ip is not None else ""

    def ssid(self):
        info = self._radio.ap_info if self._radio.connected else None
        return info.ssid if info is not None else ""

    def rssi(self):
        info = self._radio.ap_info if self._radio.connected else None
        return info.rssi if info is not None else 0

    def ap_active(self):
        return bool(self._radio.ap_active)

    def mac(self):
        """Station MAC as AA:BB:CC:DD:EE:FF."""
        return ":".join("%02X" % b for b in self._radio.mac_address)

    def describe(self):
        d = Module.describe(self)
        d["profile"] = self.active or ""
        d["connected"] = self.connected()
        d["ap_mode"] = self.ap_mode
        d["ap_active"] = self.ap_active()
        d["reset_reason"] = self.reset_reason
        if self.last_error:
            d["last_error"] = self.last_error
        return d
