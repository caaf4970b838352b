"""ipaddress as CircuitPython has it (ip_address, IPv4Address): a C module on the device, absent on the unix port."""


class IPv4Address:
    """An IPv4 address from its dotted text, an int or 4 packed bytes."""

    def __init__(self, address):
        if isinstance(address, str):
            parts = address.split(".")
            if len(parts) != 4:
                raise ValueError("Not a valid IP address")
            packed = bytes(int(p) for p in parts)
        elif isinstance(address, int):
            packed = address.to_bytes(4, "big")
        else:
            packed = bytes(address)
        if len(packed) != 4:
            raise ValueError("Not a valid IP address")
        self.packed = packed
        self.version = 4

    def __str__(self):
        return "%d.%d.%d.%d" % tuple(self.packed)

    def __repr__(self):
        return "IPv4Address('%s')" % self

    def __eq__(self, other):
        return isinstance(other, IPv4Address) and other.packed == self.packed

    def __hash__(self):
        return hash(self.packed)


def ip_address(obj):
    """IPv4Address(obj); CircuitPython has no IPv6 addresses here either."""
    return IPv4Address(obj)
