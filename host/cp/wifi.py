"""Stand-in for wifi: one radio with a station and an access point, over a simulated air of networks (_hostenv.air).

Behaviour kept from CircuitPython 10 on Espressif: connect() raises ConnectionError ("No network with that ssid",
"Authentication failure") and validates the password length; start_ap() validates password and authmode the way
the Espressif port does; a scan is an iterator that raises RuntimeError while another scan runs; addresses are
ipaddress.IPv4Address objects or None. The station's sockets still go over this computer's loopback.
"""

import ipaddress

import _hostenv


class AuthMode:
    """The authentication protocols used by WiFi (opaque objects, compared by identity like the device's)."""

    OPEN = object()
    WEP = object()
    WPA = object()
    WPA2 = object()
    WPA3 = object()
    PSK = object()
    ENTERPRISE = object()


class Network:
    """A scan result or the ap_info of the joined network."""

    def __init__(self):
        self.ssid = ""
        self.bssid = b"\x02\x00\x00\x00\x00\x01"
        self.rssi = 0
        self.channel = 1
        self.country = "DE"
        self.authmode = (AuthMode.OPEN,)


def _network(entry):
    n = Network()
    n.ssid = entry["ssid"]
    n.rssi = entry.get("rssi", -60)
    n.channel = entry.get("channel", 6)
    n.authmode = (AuthMode.WPA2, AuthMode.PSK) if entry.get("password") else (AuthMode.OPEN,)
    return n


class ScannedNetworks:
    """Iterates over the networks of one scan; created by Radio.start_scanning_networks()."""

    def __init__(self):
        self._pending = []
        self._radio = None

    def __iter__(self):
        return self

    def __next__(self):
        if self._radio is None or not self._pending:
            raise StopIteration
        return _network(self._pending.pop(0))


def _password_ok(password):
    n = len(password)
    if n == 64:
        try:
            int(password if isinstance(password, str) else bytes(password).decode(), 16)
            return True
        except ValueError:
            return False
    return n == 0 or 8 <= n <= 63


class Radio:
    """wifi.radio: station (connect, DHCP or static IPv4), access point (start_ap/stop_ap), scans."""

    def __init__(self):
        self.enabled = True
        self.hostname = "cpy-" + "".join("%02x" % b for b in _hostenv.mac[3:])
        self.tx_power = 20.0
        self.power_management = None
        self.connect_calls = []   # host hook: (ssid, password, channel, timeout) of every connect() call
        self._joined = None       # air entry of the joined network
        self._static = None       # (ip, netmask, gateway, dns) strings, or None for DHCP
        self._ap = None           # (ssid, password, authmode, channel) while the AP runs
        self._scan = None

    # --- station ---

    @property
    def mac_address(self):
        return bytes(_hostenv.mac)

    @property
    def mac_address_ap(self):
        return bytes(_hostenv.mac[:5]) + bytes([(_hostenv.mac[5] + 1) & 255])

    def _in_air(self, ssid):
        if _hostenv.control("wifi") == "down":
            return None
        for entry in _hostenv.networks():
            if entry["ssid"] == ssid:
                return entry
        return None

    @property
    def connected(self):
        # The joined network must still be on the air (a test takes it away with .host_control/wifi = down).
        return self._joined is not None and self._in_air(self._joined["ssid"]) is not None

    def connect(self, ssid, password=b"", *, channel=0, bssid=None, timeout=None):
        if isinstance(ssid, (bytes, bytearray)):
            ssid = bytes(ssid).decode()
        if isinstance(password, (bytes, bytearray)):
            password = bytes(password).decode()
        self.connect_calls.append((ssid, password, channel, timeout))
        if not self.enabled:
            raise RuntimeError("Wifi is not enabled")
        if not _password_ok(password):
            raise ValueError("Invalid password length")
        if not 0 < len(ssid.encode()) <= 32:
            raise ValueError("ssid must be 1..32 bytes")
        self._joined = None
        entry = self._in_air(ssid)
        if entry is None:
            raise ConnectionError("No network with that ssid")
        if entry.get("password", "") != password:
            raise ConnectionError("Authentication failure")
        self._joined = entry

    def lose_connection(self):
        """Host hook: the station dropped and CircuitPython's own reconnection gave up (connect() is needed)."""
        self._joined = None

    def restore_connection(self):
        """Host hook: the network is back (for .host_control/wifi); a dropped station still needs connect()."""

    def _addr(self, text):
        return ipaddress.ip_address(text) if text else None

    @property
    def ipv4_address(self):
        if not self.connected:
            return None
        return self._addr(self._static[0] if self._static else "127.0.0.1")

    @property
    def ipv4_subnet(self):
        if not self.connected:
            return None
        return self._addr(self._static[1] if self._static else "255.0.0.0")

    @property
    def ipv4_gateway(self):
        if not self.connected:
            return None
        return self._addr(self._static[2] if self._static else "127.0.0.1")

    @property
    def ipv4_dns(self):
        if self._static:
            return self._addr(self._static[3] or "0.0.0.0")
        return self._addr("127.0.0.1" if self.connected else "0.0.0.0")

    @property
    def addresses(self):
        ip = self.ipv4_address
        return (str(ip),) if ip is not None else ()

    @property
    def dns(self):
        return (str(self.ipv4_dns),)

    @property
    def ap_info(self):
        if not self.connected:
            return None
        return _network(self._joined)

    def set_ipv4_address(self, *, ipv4, netmask, gateway, ipv4_dns=None):
        for value in (ipv4, netmask, gateway):
            if not isinstance(value, ipaddress.IPv4Address):
                raise TypeError("ipv4, netmask and gateway must be ipaddress.IPv4Address")
        self._static = (str(ipv4), str(netmask), str(gateway), str(ipv4_dns) if ipv4_dns is not None else "")

    def start_dhcp(self, *, ipv4=True, ipv6=False):
        if ipv4:
            self._static = None

    def stop_dhcp(self):
        pass

    def start_station(self):
        pass

    def stop_station(self):
        self._joined = None

    # --- access point ---

    def start_ap(self, ssid, password=b"", *, channel=1, authmode=(), max_connections=4):
        if isinstance(ssid, (bytes, bytearray)):
            ssid = bytes(ssid).decode()
        if isinstance(password, (bytes, bytearray)):
            password = bytes(password).decode()
        authmode = tuple(authmode)
        if password:
            if not (8 <= len(password) <= 63 or len(password) == 64):
                raise ValueError("Invalid password length")
            if AuthMode.OPEN in authmode:
                raise ValueError("Invalid authmode")
            if authmode and (AuthMode.PSK not in authmode or
                             (AuthMode.WPA not in authmode and AuthMode.WPA2 not in authmode)):
                raise ValueError("Invalid authmode")
        if not authmode:
            authmode = (AuthMode.WPA, AuthMode.WPA2, AuthMode.PSK) if password else (AuthMode.OPEN,)
        if not 0 < len(ssid.encode()) <= 32:
            raise ValueError("ssid must be 1..32 bytes")
        self._ap = (ssid, password, authmode, channel)

    def stop_ap(self):
        self._ap = None

    @property
    def ap_active(self):
        return self._ap is not None

    @property
    def ap_ssid(self):
        """Host hook: the running AP's SSID, or None."""
        return self._ap[0] if self._ap else None

    @property
    def ap_password(self):
        """Host hook: the running AP's password, or None."""
        return self._ap[1] if self._ap else None

    @property
    def ap_authmode(self):
        """Host hook: the running AP's authmode tuple, or None."""
        return self._ap[2] if self._ap else None

    @property
    def ipv4_address_ap(self):
        return ipaddress.ip_address("192.168.4.1") if self._ap else None

    @property
    def ipv4_gateway_ap(self):
        return ipaddress.ip_address("192.168.4.1") if self._ap else None

    @property
    def ipv4_subnet_ap(self):
        return ipaddress.ip_address("255.255.255.0") if self._ap else None

    @property
    def addresses_ap(self):
        return ("192.168.4.1",) if self._ap else ()

    @property
    def stations_ap(self):
        """Phones joined to the AP: _hostenv.ap_stations, or .host_control/ap_stations (a count) from outside."""
        if not self._ap:
            return None
        n = _hostenv.control("ap_stations")
        if n is not None and n.isdigit():
            return [(bytes(6), -40, None)] * int(n)
        return list(_hostenv.ap_stations)

    def set_ipv4_address_ap(self, *, ipv4, netmask, gateway):
        pass

    def start_dhcp_ap(self):
        pass

    def stop_dhcp_ap(self):
        pass

    # --- scanning ---

    def start_scanning_networks(self, *, start_channel=1, stop_channel=165):
        if self._scan is not None:
            raise RuntimeError("Already scanning for wifi networks")
        scan = ScannedNetworks()
        scan._radio = self
        scan._pending = [e for e in _hostenv.networks() if start_channel <= e.get("channel", 6) <= stop_channel]
        if _hostenv.control("wifi") == "down":
            scan._pending = []
        self._scan = scan
        return scan

    def stop_scanning_networks(self):
        if self._scan is not None:
            self._scan._radio = None
            self._scan = None

    def ping(self, ip, *, timeout=0.5):
        return 0.001 if self.connected else None


radio = Radio()
