"""Stand-in for wifi.radio: a station that reports a connection on 127.0.0.1 (and can be told to lose it)."""

import _hostenv


class AuthMode:
    OPEN = "OPEN"
    WPA2 = "WPA2"
    PSK = "PSK"


class Network:
    """A scan result."""

    def __init__(self, ssid, rssi, channel=6, authmode=(AuthMode.WPA2, AuthMode.PSK)):
        self.ssid = ssid
        self.rssi = rssi
        self.channel = channel
        self.authmode = authmode
        self.bssid = b"\x02\x00\x00\x00\x00\x01"
        self.country = "DE"


class _ScanIterator:
    def __init__(self, networks):
        self._it = iter(list(networks))

    def __iter__(self):
        return self

    def __next__(self):
        return next(self._it)

    def stop(self):
        pass


class Radio:
    """wifi.radio: enabled, connected, ipv4_address, ap_info, mac_address, connect(), start_ap(), scanning."""

    def __init__(self):
        self.enabled = True
        self.hostname = "meter-plus"
        self.connected = True
        self.ipv4_address = "127.0.0.1"
        self.ipv4_subnet = "255.0.0.0"
        self.ipv4_gateway = "127.0.0.1"
        self.ipv4_dns = "127.0.0.1"
        self.ap_active = False
        self.ipv4_address_ap = None
        self.ssid = "HostNetwork"
        self.scan_results = [Network("HostNetwork", -48), Network("Neighbour", -77)]
        self.connect_calls = []

    @property
    def mac_address(self):
        return bytes(_hostenv.mac)

    @property
    def mac_address_ap(self):
        return bytes(_hostenv.mac[:5]) + bytes([(_hostenv.mac[5] + 1) & 255])

    @property
    def connected(self):
        # A test drops the station from outside the process with .host_control/wifi = down.
        return self._connected and _hostenv.control("wifi") != "down"

    @connected.setter
    def connected(self, value):
        self._connected = value

    @property
    def ap_info(self):
        if not self.connected:
            return None
        return Network(self.ssid, -48)

    def connect(self, ssid, password="", *, channel=0, bssid=None, timeout=None):
        self.connect_calls.append(ssid)
        if not self.enabled:
            raise RuntimeError("Wifi is not enabled")
        self.ssid = ssid
        self.connected = True

    def lose_connection(self):
        """Host hook: the access point went away."""
        self.connected = False
        self.ipv4_address = None

    def restore_connection(self):
        """Host hook: the access point is back."""
        self.connected = True
        self.ipv4_address = "127.0.0.1"

    def start_ap(self, ssid, password="", *, channel=1, authmode=(), max_connections=4):
        if password and len(password) < 8:
            raise ValueError("password length must be 8 to 63")
        self.ap_active = True
        self.ap_ssid = ssid
        self.ipv4_address_ap = "192.168.4.1"

    def stop_ap(self):
        self.ap_active = False
        self.ipv4_address_ap = None

    def start_scanning_networks(self, *, start_channel=1, stop_channel=11):
        return _ScanIterator(self.scan_results)

    def stop_scanning_networks(self):
        pass

    def set_ipv4_address(self, *, ipv4, netmask, gateway, ipv4_dns=None):
        self.static = (ipv4, netmask, gateway, ipv4_dns)

    def start_dhcp(self, *, ipv4=True, ipv6=False):
        self.static = None

    def stop_dhcp(self):
        pass


radio = Radio()
