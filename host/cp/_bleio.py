"""Stand-in for _bleio: the built-in adapter as a GATT server (local services), advertising, and a phone to play.

Kept from CircuitPython 10 on Espressif (NimBLE): advertising data over 31 bytes is refused for a legacy
advertisement, advertising stops when a central connects, a write longer than the negotiated ATT payload (MTU - 3)
or the characteristic's max_length is refused, a notification carries at most MTU - 3 bytes, a
CharacteristicBuffer drops bytes that do not fit. Adapter.host_connect() returns a HostCentral, the phone.
"""

import _hostenv


class BluetoothError(Exception):
    """Catch-all exception for Bluetooth related errors."""


class RoleError(BluetoothError):
    """Raised when a resource is used as the mismatched role."""


class SecurityError(BluetoothError):
    """Raised when a security related error occurs."""


class UUID:
    """A 16-bit or 128-bit UUID (from an int, a 16-byte buffer in little-endian order, or a string)."""

    def __init__(self, value):
        if isinstance(value, int):
            if not 0 <= value <= 0xFFFF:
                raise ValueError("UUID integer value must be 0-0xffff")
            self._16 = value
            self._128 = None
        elif isinstance(value, str):
            hexs = value.replace("-", "")
            if len(hexs) != 32:
                raise ValueError("UUID string not 'xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx'")
            self._128 = bytes(reversed(bytes.fromhex(hexs)))
            self._16 = self._128[12] | (self._128[13] << 8)
        else:
            raw = bytes(value)
            if len(raw) != 16:
                raise ValueError("Byte buffer must be 16 bytes.")
            self._128 = raw
            self._16 = raw[12] | (raw[13] << 8)

    @property
    def uuid16(self):
        return self._16

    @property
    def uuid128(self):
        if self._128 is None:
            raise AttributeError("not a 128-bit UUID")
        return self._128

    @property
    def size(self):
        return 16 if self._128 is None else 128

    def pack_into(self, buffer, offset=0):
        raw = self._16.to_bytes(2, "little") if self._128 is None else self._128
        buffer[offset:offset + len(raw)] = raw

    def _key(self):
        return (self._16, self._128)

    def __eq__(self, other):
        return isinstance(other, UUID) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def __repr__(self):
        if self._128 is None:
            return "UUID(0x%04x)" % self._16
        h = bytes(reversed(self._128)).hex()
        return "UUID('%s-%s-%s-%s-%s')" % (h[:8], h[8:12], h[12:16], h[16:20], h[20:])


class Address:
    """A BLE address."""

    PUBLIC = 0
    RANDOM_STATIC = 1
    RANDOM_PRIVATE_RESOLVABLE = 2
    RANDOM_PRIVATE_NON_RESOLVABLE = 3

    def __init__(self, address, address_type):
        self._bytes = bytes(address)
        self._type = address_type

    @property
    def address_bytes(self):
        return self._bytes

    @property
    def type(self):
        return self._type

    def __eq__(self, other):
        return isinstance(other, Address) and (self._bytes, self._type) == (other._bytes, other._type)

    def __hash__(self):
        return hash((self._bytes, self._type))


class Attribute:
    """Security modes of characteristics and descriptors."""

    NO_ACCESS = 0
    OPEN = 1
    ENCRYPT_NO_MITM = 2
    ENCRYPT_WITH_MITM = 3
    LESC_ENCRYPT_WITH_MITM = 4
    SIGNED_NO_MITM = 5
    SIGNED_WITH_MITM = 6


class Service:
    """A local (or remote) GATT service; local ones are published by the adapter at once."""

    def __init__(self, uuid, *, secondary=False):
        self._uuid = uuid
        self._secondary = secondary
        self._chars = []
        adapter._services.append(self)

    def deinit(self):
        if self in adapter._services:
            adapter._services.remove(self)

    @property
    def characteristics(self):
        return tuple(self._chars)

    @property
    def remote(self):
        return False

    @property
    def secondary(self):
        return self._secondary

    @property
    def uuid(self):
        return self._uuid


class Characteristic:
    """A local characteristic; created with add_to_service()."""

    BROADCAST = 0x01
    READ = 0x02
    WRITE_NO_RESPONSE = 0x04
    WRITE = 0x08
    NOTIFY = 0x10
    INDICATE = 0x20

    def __init__(self):
        raise NotImplementedError("use Characteristic.add_to_service()")

    @classmethod
    def add_to_service(cls, service, uuid, *, properties=0, read_perm=Attribute.OPEN, write_perm=Attribute.OPEN,
                       max_length=20, fixed_length=False, initial_value=None, user_description=None):
        if not 0 <= max_length <= 512:
            raise ValueError("max_length must be 0-512")
        c = object.__new__(cls)
        c._service = service
        c._uuid = uuid
        c._properties = properties
        c._read_perm = read_perm
        c._write_perm = write_perm
        c._max_length = max_length
        c._fixed = fixed_length
        c._buffers = []
        value = bytes(max_length) if initial_value is None else bytes(initial_value)
        if len(value) > max_length or (fixed_length and len(value) != max_length):
            raise ValueError("initial_value length is wrong")
        c._value = bytearray(value)
        service._chars.append(c)
        return c

    def deinit(self):
        self._buffers = []

    @property
    def properties(self):
        return self._properties

    @property
    def uuid(self):
        return self._uuid

    @property
    def value(self):
        return bytearray(self._value)

    @value.setter
    def value(self, data):
        data = bytes(data)
        if len(data) > self._max_length or (self._fixed and len(data) != self._max_length):
            raise ValueError("Value length > max_length" if len(data) > self._max_length else "Wrong length")
        self._value = bytearray(data)
        if self._properties & (self.NOTIFY | self.INDICATE):
            for central in adapter._centrals:
                central._notified(self, data)

    @property
    def max_length(self):
        return self._max_length

    @property
    def descriptors(self):
        return ()

    @property
    def service(self):
        return self._service

    def set_cccd(self, *, notify=False, indicate=False):
        raise RoleError("local characteristic: the client sets the CCCD")

    def _remote_write(self, data):
        self._value = bytearray(data)
        for b in self._buffers:
            b._feed(data)


class CharacteristicBuffer:
    """Accumulates a characteristic's incoming values in a FIFO buffer of buffer_size bytes."""

    def __init__(self, characteristic, *, timeout=1.0, buffer_size=64):
        if buffer_size < 1:
            raise ValueError("buffer_size must be >= 1")
        self._c = characteristic
        self._size = buffer_size
        self._fifo = bytearray()
        self.dropped = 0
        characteristic._buffers.append(self)

    def _feed(self, data):
        room = self._size - len(self._fifo)
        self._fifo += bytes(data[:max(room, 0)])
        self.dropped += max(len(data) - room, 0)

    def read(self, nbytes=None):
        if not self._fifo:
            return None
        n = len(self._fifo) if nbytes is None else min(nbytes, len(self._fifo))
        out = bytes(self._fifo[:n])
        self._fifo = self._fifo[n:]   # (no slice deletion: also runs on CircuitPython)
        return out

    def readinto(self, buf, nbytes=None):
        data = self.read(len(buf) if nbytes is None else nbytes)
        if not data:
            return None
        buf[:len(data)] = data
        return len(data)

    def readline(self):
        i = self._fifo.find(b"\n")
        return self.read(i + 1 if i >= 0 else None) or b""

    @property
    def in_waiting(self):
        return len(self._fifo)

    def reset_input_buffer(self):
        self._fifo = bytearray()

    def deinit(self):
        if self in self._c._buffers:
            self._c._buffers.remove(self)


class Descriptor:
    """Stores information about a BLE characteristic (not used by the firmware)."""

    def __init__(self):
        raise NotImplementedError


class PacketBuffer:
    """Accumulates a characteristic's incoming packets (not used by the firmware)."""

    def __init__(self, characteristic, *, buffer_size, max_packet_size=None):
        raise NotImplementedError("PacketBuffer is not simulated on the host")


class ScanEntry:
    """An advertisement seen by a scan (the host scans nothing)."""

    def __init__(self):
        raise NotImplementedError


class ScanResults:
    """Iterates over advertising data received while scanning."""

    def __init__(self):
        raise NotImplementedError


class Connection:
    """A connection to a central, as seen by the peripheral."""

    def __init__(self):
        raise NotImplementedError("connections come from a central connecting")

    def disconnect(self):
        self._central.disconnect()

    def pair(self, *, bond=True):
        raise SecurityError("Espressif BLE has no MITM pairing")

    def discover_remote_services(self, service_uuids_whitelist=None):
        return ()

    @property
    def connected(self):
        return self._central.connected

    @property
    def paired(self):
        return False

    @property
    def connection_interval(self):
        return 0.0075

    @connection_interval.setter
    def connection_interval(self, value):
        pass

    @property
    def max_packet_length(self):
        return max(20, self._central.mtu - 3)


class HostCentral:
    """Host hook: a phone connected to the adapter. write()/read() by UUID string, notifications collected."""

    def __init__(self, adapter_, mtu):
        self._adapter = adapter_
        self.mtu = mtu
        self.connected = True
        self.notifications = []     # (uuid string, bytes) in order
        self.connection = object.__new__(Connection)
        self.connection._central = self

    def _find(self, uuid):
        want = UUID(uuid) if isinstance(uuid, str) else uuid
        for s in self._adapter._services:
            for c in s._chars:
                if c.uuid == want:
                    return c
        raise BluetoothError("no characteristic %s" % uuid)

    def _notified(self, c, data):
        # A notification carries at most MTU - 3 bytes: the rest is cut off, as on the air.
        self.notifications.append((repr(c.uuid), bytes(data[:self.mtu - 3])))

    def write(self, uuid, data):
        if not self.connected:
            raise BluetoothError("not connected")
        c = self._find(uuid)
        if not c.properties & (Characteristic.WRITE | Characteristic.WRITE_NO_RESPONSE) or \
                c._write_perm == Attribute.NO_ACCESS:
            raise BluetoothError("write not permitted")
        if len(data) > self.mtu - 3 or len(data) > c.max_length:
            raise BluetoothError("write of %d bytes exceeds the ATT payload" % len(data))
        c._remote_write(bytes(data))

    def read(self, uuid):
        c = self._find(uuid)
        if not c.properties & Characteristic.READ:
            raise BluetoothError("read not permitted")
        return bytes(c._value)

    def notified(self, uuid):
        """Values notified on one characteristic, oldest first."""
        key = repr(UUID(uuid))
        return [d for u, d in self.notifications if u == key]

    def disconnect(self):
        if self.connected:
            self.connected = False
            self._adapter._centrals.remove(self)


class Adapter:
    """The built-in BLE adapter (_bleio.adapter)."""

    def __init__(self, uart, rts, cts):
        raise NotImplementedError("the host has no HCI co-processor")

    @classmethod
    def _builtin(cls):
        a = object.__new__(cls)
        a.enabled = True
        mac = bytes(_hostenv.mac)
        a._address = Address(bytes(reversed(mac[:5] + bytes([(mac[5] + 2) & 255]))), Address.PUBLIC)
        a.name = "CIRCUITPY%02x%02x" % (mac[4], mac[5])
        a._services = []
        a._centrals = []
        a._adv = None
        return a

    @property
    def address(self):
        return self._address

    def start_advertising(self, data, scan_response=None, connectable=True, anonymous=False, timeout=0,
                          interval=0.1, tx_power=0, directed_to=None):
        if not self.enabled:
            raise BluetoothError("adapter is disabled")
        data = bytes(data)
        if len(data) > 31 or (scan_response is not None and len(bytes(scan_response)) > 31):
            raise BluetoothError("Data too large for advertisement packet")
        if self._adv is not None:
            raise BluetoothError("Already advertising.")
        if connectable and self._centrals:
            raise BluetoothError("Already connected: one connection at a time")
        self._adv = (data, bytes(scan_response or b""), connectable)

    def stop_advertising(self):
        self._adv = None

    def start_scan(self, prefixes=b"", *, buffer_size=512, extended=False, timeout=None, interval=0.1,
                   window=0.1, minimum_rssi=-80, active=True):
        return iter(())

    def stop_scan(self):
        pass

    @property
    def advertising(self):
        return self._adv is not None

    @property
    def connected(self):
        return bool(self._centrals)

    @property
    def connections(self):
        return tuple(c.connection for c in self._centrals)

    def connect(self, address, *, timeout):
        raise BluetoothError("the host adapter is a peripheral only")

    def erase_bonding(self):
        pass

    # --- host hooks ---

    def host_advertisement(self):
        """Host hook: (advertising data, scan response) while advertising, else None."""
        return self._adv[:2] if self._adv is not None else None

    def host_connect(self, mtu=23):
        """Host hook: a phone connects (only while connectable advertising runs); advertising stops."""
        if self._adv is None or not self._adv[2]:
            raise BluetoothError("not advertising connectably")
        central = HostCentral(self, mtu)
        self._centrals.append(central)
        self._adv = None
        return central

    def host_reset(self):
        """Host hook: a fresh adapter state (services, centrals, advertising), as after a chip reset."""
        self._services = []
        self._centrals = []
        self._adv = None


def set_adapter(adapter):  # noqa: F811  (the stub's parameter name shadows the module's adapter)
    """Set the adapter to use for BLE (only needed for an HCI co-processor)."""
    globals()["adapter"] = adapter


adapter = Adapter._builtin() if _hostenv.ble else None
