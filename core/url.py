"""http(s) URLs for the update and cloud clients: split, validate, resolve a relative reference."""

MAX_URL = 200
_HOST_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-"


def split_url(url):
    """(scheme, host, port, path) of an http:// or https:// URL; ValueError with the reason otherwise."""
    if not isinstance(url, str):
        raise ValueError("must be a string")
    if len(url) > MAX_URL:
        raise ValueError("at most %d characters" % MAX_URL)
    for ch in url:
        if ord(ch) <= 32 or ord(ch) > 126:
            raise ValueError("spaces, control and non-ASCII characters are not allowed")
    if url.startswith("http://"):
        scheme, rest, port = "http", url[7:], 80
    elif url.startswith("https://"):
        scheme, rest, port = "https", url[8:], 443
    else:
        raise ValueError("must start with http:// or https://")
    slash = rest.find("/")
    hostport, path = (rest, "/") if slash < 0 else (rest[:slash], rest[slash:])
    if "@" in hostport or "?" in hostport or "#" in hostport:
        raise ValueError("user names, queries or fragments in the host part are not supported")
    host = hostport
    if ":" in hostport:
        host, _sep, port_text = hostport.partition(":")
        if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
            raise ValueError("port must be 1 to 65535")
        port = int(port_text)
    if not host or len(host) > 253 or host[0] in ".-" or host[-1] in ".-":
        raise ValueError("must name a host")
    for ch in host:
        if ch not in _HOST_CHARS:
            raise ValueError("host may hold letters, digits, dots and dashes only")
    if "#" in path:
        path = path[:path.find("#")]
    return scheme, host, port, path


def resolve(base_url, ref):
    """ref (absolute http(s) URL or a path relative to base_url's folder) as an absolute URL."""
    if ref.startswith("http://") or ref.startswith("https://"):
        return ref
    if ref.startswith("/"):
        scheme, host, port, _path = split_url(base_url)
        default = 80 if scheme == "http" else 443
        return "%s://%s%s%s" % (scheme, host, "" if port == default else ":%d" % port, ref)
    q = base_url.find("?")
    base = base_url if q < 0 else base_url[:q]
    return base[:base.rfind("/") + 1] + ref
