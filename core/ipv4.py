"""IPv4 dotted quads as 32-bit ints: parsing (ASCII digits only), netmasks, addresses a LAN host cannot have."""


def parse_ipv4(text):
    """The address as a 32-bit int, or None when text is not a dotted quad of ASCII decimal octets."""
    parts = text.split(".")
    if len(parts) != 4:
        return None
    n = 0
    for p in parts:
        if not p or len(p) > 3 or (len(p) > 1 and p[0] == "0"):
            return None
        v = 0
        for ch in p:  # not str.isdigit()/int(): both take Arabic-Indic and other Unicode digits
            if not "0" <= ch <= "9":
                return None
            v = v * 10 + ord(ch) - 48
        if v > 255:
            return None
        n = (n << 8) | v
    return n


def dotted(n):
    """The 32-bit address n as a dotted quad."""
    return "%d.%d.%d.%d" % ((n >> 24) & 255, (n >> 16) & 255, (n >> 8) & 255, n & 255)


def prefix_len(mask):
    """Number of leading one bits of a netmask, or -1 when the ones are not contiguous."""
    inv = (~mask) & 0xFFFFFFFF
    if inv & (inv + 1):
        return -1
    bits = 0
    while mask & 0x80000000:
        bits += 1
        mask = (mask << 1) & 0xFFFFFFFF
    return bits


def host_reason(n):
    """Why n cannot be the address of a host on a LAN (device, gateway, DNS server), or None."""
    first = n >> 24
    if first == 0:
        return "is in 0.0.0.0/8 (\"this network\"), not a host address"
    if first == 127:
        return "is a loopback address"
    if 224 <= first <= 239:
        return "is a multicast address"
    if n == 0xFFFFFFFF:
        return "is the broadcast address"
    if first >= 240:
        return "is in the reserved range 240.0.0.0/4"
    return None
