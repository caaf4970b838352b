"""What a browser may ask of the device: the Host rule (DNS rebinding) and the same-origin rule for changes (CSRF)."""

_SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
_HEX = "0123456789abcdefABCDEF"


def device_names(device_id):
    """The names the device answers to besides IP literals: its mDNS name, with and without .local, and localhost."""
    base = "meterplus-%s" % device_id.lower()
    return (base + ".local", base, "localhost")


def _split_port(host):
    """(name, port text or None) of a Host value; name keeps the brackets of an IPv6 literal."""
    if host.startswith("["):
        end = host.find("]")
        if end < 0:
            return host, None
        rest = host[end + 1:]
        if not rest:
            return host, None
        if rest[0] != ":":
            return None, None
        return host[:end + 1], rest[1:]
    idx = host.find(":")
    if idx < 0:
        return host, None
    return host[:idx], host[idx + 1:]


def _is_ipv4(name):
    parts = name.split(".")
    if len(parts) != 4:
        return False
    for p in parts:
        if not p or len(p) > 3 or not p.isdigit() or int(p) > 255:
            return False
    return True


def _is_ipv6_literal(name):
    """A bracketed IPv6 literal such as [fe80::1] (v4-mapped tails allowed; zone ids are not sent by browsers)."""
    if len(name) < 4 or name[0] != "[" or name[-1] != "]":
        return False
    inner = name[1:-1]
    if inner.count(":") < 2:
        return False
    for ch in inner:
        if ch != ":" and ch != "." and ch not in _HEX:
            return False
    return True


def host_allowed(host, names):
    """True for an IP literal or one of names (case-insensitive), each with an optional numeric port.

    A DNS-rebinding page reaches the device under the attacker's own host name, and the browser sends that name
    as Host; an IP literal or the device's own name cannot be such a name.
    """
    if host is None:
        return True  # HTTP/1.0 without Host: no browser sends that, so it cannot be a rebinding page
    name, port = _split_port(host.strip())
    if not name or (port is not None and (not port.isdigit() or len(port) > 5)):
        return False
    if _is_ipv4(name) or _is_ipv6_literal(name):
        return True
    name = name.lower()
    if name.endswith("."):
        name = name[:-1]  # the absolute form of a name ("meterplus-x.local.") is the same name
    return name in names


def _default_port(scheme):
    return "443" if scheme == "https" else "80"


def _authority(value, scheme):
    """host[:port] lower-cased, the scheme's default port dropped, so Origin and Host compare as equals."""
    value = value.strip().lower()
    name, port = _split_port(value)
    if name is None:
        return None
    if port is None or port == _default_port(scheme):
        return name
    return name + ":" + port


def cross_site(method, headers):
    """None when the request may change state, else why not: a browser sent it from another origin.

    Only browsers send Origin and Sec-Fetch-Site, and a page cannot forge them; scripts and Home Assistant send
    neither, so they pass. Safe methods pass: they change nothing (and a cross-site page cannot read the answer).
    """
    if method in _SAFE_METHODS:
        return None
    return foreign(headers)


def foreign(headers):
    """None when no browser page of another origin sent this request, else why (cross_site() without the method
    rule). A WebSocket upgrade is a GET, yet it opens a channel a page can read: ws://device/rpc checks this."""
    sites = headers.get_list("Sec-Fetch-Site")
    origins = headers.get_list("Origin")
    hosts = headers.get_list("Host")
    if len(sites) > 1 or len(origins) > 1 or len(hosts) > 1:
        return "repeated Origin, Sec-Fetch-Site or Host header"
    if sites and sites[0].strip().lower() not in ("same-origin", "none"):
        return "Sec-Fetch-Site: %s" % sites[0].strip()
    if not origins:
        return None
    origin = origins[0].strip()
    sep = origin.find("://")
    if sep < 0 or not hosts:
        return "Origin %s" % origin
    scheme = origin[:sep].lower()
    rest = origin[sep + 3:]
    if "/" in rest or _authority(rest, scheme) != _authority(hosts[0], scheme):
        return "Origin %s" % origin
    return None
