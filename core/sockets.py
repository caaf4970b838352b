"""Socket helpers shared by the network services: quiet close, error numbers, a non-blocking TCP connect."""

import errno

from micropython import const

# errno values: the errno module's (CPython, and the names CircuitPython has) and newlib's, which the ESP32's
# lwIP sockets raise on the device (ESP-IDF uses newlib's sys/errno.h).
EAGAIN = errno.EAGAIN
ETIMEDOUT = (const(110), const(116))
EINPROGRESS = (const(115), const(119))
EALREADY = (const(114), const(120))
EISCONN = (const(106), const(127))
ENOTCONN = (const(107), const(128))


def errno_of(exc):
    """The error number of an OSError (CircuitPython puts it in args[0]), 0 when it has none."""
    if exc.args and isinstance(exc.args[0], int):
        return exc.args[0]
    return 0


def connect_step(sock, addr):
    """Advance a non-blocking TCP connect of sock to addr: True once connected, False while it goes on; raises
    OSError when it failed (lwIP reports a refused or unreachable peer only as "not connected")."""
    try:
        # CircuitPython: a non-blocking connect raises ETIMEDOUT at once and keeps connecting; calling it again
        # raises EALREADY while that goes on, EISCONN once connected. CPython: EINPROGRESS, then EALREADY, then
        # returns (or EISCONN).
        sock.connect(addr)
    except OSError as exc:
        err = errno_of(exc)
        if err == EAGAIN or err in ETIMEDOUT or err in EINPROGRESS or err in EALREADY:
            return False
        if err not in EISCONN:
            raise
    return True


def close_quietly(sock):
    """Close sock if there is one (a peer that already went away is no error); returns None to clear the field."""
    if sock is not None:
        try:
            sock.close()
        except OSError:
            pass
    return None
