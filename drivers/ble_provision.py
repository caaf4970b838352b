"""BLE transport of Improv Wi-Fi (adafruit_ble): the GATT service, the advertisement with service data 0x4677."""

from adafruit_ble import BLERadio
from adafruit_ble.advertising.standard import ProvideServicesAdvertisement, ServiceData
from adafruit_ble.characteristics import Characteristic
from adafruit_ble.characteristics.stream import StreamIn
from adafruit_ble.services import Service
from adafruit_ble.uuid import StandardUUID, VendorUUID

from core import improv

_READ_NOTIFY = Characteristic.READ | Characteristic.NOTIFY


def _improv_uuid(last):
    return VendorUUID(improv.SERVICE_UUID[:-1] + str(last))


class ImprovService(Service):
    """The Improv service and its five characteristics (UUIDs of the Improv Wi-Fi specification)."""

    uuid = _improv_uuid(0)
    capabilities = Characteristic(uuid=_improv_uuid(5), properties=Characteristic.READ, max_length=1,
                                  fixed_length=True)
    state = Characteristic(uuid=_improv_uuid(1), properties=_READ_NOTIFY, max_length=1, fixed_length=True,
                           initial_value=bytes((improv.AUTHORIZATION_REQUIRED,)))
    error = Characteristic(uuid=_improv_uuid(2), properties=_READ_NOTIFY, max_length=1, fixed_length=True)
    # Writes land in a FIFO (CharacteristicBuffer): a frame split over several writes is reassembled from it.
    rpc_command = StreamIn(uuid=_improv_uuid(3), properties=Characteristic.WRITE | Characteristic.WRITE_NO_RESPONSE,
                           buffer_size=improv.MAX_FRAME)   # max_length too: at most 512 on the device
    rpc_result = Characteristic(uuid=_improv_uuid(4), properties=_READ_NOTIFY, max_length=improv.MAX_FRAME)


class _ServiceDataKey:
    """ServiceData() is keyed by an object with a uuid: the 16-bit 0x4677 of the Improv service data."""

    uuid = StandardUUID(improv.SERVICE_DATA_UUID16)


class ImprovAdvertisement(ProvideServicesAdvertisement):
    """Flags, the 128-bit Improv service UUID and service data 0x4677: 3 + 18 + 10 = 31 bytes, a legacy packet."""

    improv_data = ServiceData(_ServiceDataKey)


class BleImprovTransport:
    """adapter: _bleio.adapter (None on boards without BLE is the caller's business); name: the advertised name.

    The session logic (services/network/provisioning.py) reads frames and sets state, error and results here.
    """

    def __init__(self, adapter, name, capabilities):
        self._ble = BLERadio(adapter)
        self._name = name
        self._caps = capabilities
        self._service = None
        self._adv = None
        self._state = improv.AUTHORIZATION_REQUIRED

    def start(self):
        """Publish the GATT service (once: the stack keeps it until the chip resets)."""
        self._ble.name = self._name
        self._service = ImprovService(capabilities=bytes((self._caps,)))
        self._adv = ImprovAdvertisement(self._service)
        self._adv.improv_data = improv.service_data(self._state, self._caps)

    @property
    def connected(self):
        return self._ble.connected

    @property
    def advertising(self):
        return self._ble.advertising

    def advertise(self, on):
        """Advertise (connectable) with the current state in the service data, or stop."""
        if on and not self._ble.advertising and not self._ble.connected:
            self._ble.start_advertising(self._adv)
        elif not on and self._ble.advertising:
            self._ble.stop_advertising()

    def read(self):
        """Bytes written by the phone since the last call, or None."""
        buf = self._service.rpc_command
        n = buf.in_waiting
        return buf.read(n) if n else None

    def discard_input(self):
        self._service.rpc_command.reset_input_buffer()

    def set_state(self, state):
        self._state = state
        self._service.state = bytes((state,))
        self._adv.improv_data = improv.service_data(state, self._caps)
        if self._ble.advertising:   # the scanner sees the new state only in a fresh advertisement
            self._ble.stop_advertising()
            self._ble.start_advertising(self._adv)

    def set_error(self, error):
        self._service.error = bytes((error,))

    def send_result(self, frame):
        """Notify one RPC result frame."""
        self._service.rpc_result = frame

    def disconnect(self):
        for c in self._ble.connections:
            try:
                c.disconnect()
            except Exception:
                pass
