"""Fakes for snippets run in the MicroPython VM (tools/mpvm.py stages this file as vm_fakes): a non-blocking UDP
socket pool with the CircuitPython socketpool calls the services use, and a settings reader."""
import errno


class Sock:
    """A non-blocking UDP socket: inbox holds (datagram, (address, port)) pairs, oldest first; sent counts answers
    (a count, not a list: a benchmark's heap figures must not grow with it)."""

    def __init__(self):
        self.inbox = []
        self.sent = 0

    def setblocking(self, flag):
        pass

    def bind(self, addr):
        pass

    def recvfrom_into(self, buf):
        if not self.inbox:
            raise OSError(errno.EAGAIN)
        data, addr = self.inbox.pop(0)
        buf[:len(data)] = data
        return len(data), addr

    def sendto(self, data, addr):
        self.sent += 1
        return len(data)

    def close(self):
        pass


class Pool:
    """socketpool.SocketPool's constants and socket(); made keeps every socket handed out."""

    AF_INET = SOCK_DGRAM = 2

    def __init__(self):
        self.made = []

    def socket(self, family, kind):
        s = Sock()
        self.made.append(s)
        return s


class Settings:
    """The settings store's get() over a dict."""

    def __init__(self, d):
        self.d = d

    def get(self, key, default=None):
        return self.d.get(key, default)
