"""A tiny UDP NTP server on 127.0.0.1 for the host runtime: answers from a (speed-scaled) clock, or stays silent."""

import socket
import struct
import threading
import time

NTP_DELTA = 2208988800  # seconds from 1900-01-01 (NTP era 0) to 1970-01-01


def to_ntp(unix_s):
    """64-bit NTP timestamp (seconds.fraction since 1900, era wrapped) of a float Unix time."""
    secs = int(unix_s // 1)
    frac = int((unix_s - secs) * (1 << 32)) & 0xFFFFFFFF
    return ((secs + NTP_DELTA) & 0xFFFFFFFF) << 32 | frac


def scaled_clock(speed, epoch0=None):
    """Unix seconds that start at epoch0 (default: now) and run speed times faster than the computer's clock."""
    m0 = time.monotonic()
    e0 = time.time() if epoch0 is None else float(epoch0)
    return lambda: e0 + (time.monotonic() - m0) * speed


def hostenv_clock(epoch0=None):
    """Unix seconds in lockstep with the host runtime's simulated ticks (follows _hostenv.set_speed too)."""
    import _hostenv  # type: ignore[import-not-found]  # host/cp is on sys.path when the runtime runs

    s0 = _hostenv.sim_seconds()
    e0 = time.time() if epoch0 is None else float(epoch0)
    return lambda: e0 + (_hostenv.sim_seconds() - s0)


def reply(request, now_s, recv_s=None, stratum=2):
    """The 48-byte server answer to a client request (mode 3), or None for anything else."""
    if len(request) < 48 or request[0] & 7 != 3:
        return None
    vn = (request[0] >> 3) & 7
    ref = to_ntp(now_s - 16)
    rx = to_ntp(now_s if recv_s is None else recv_s)
    return struct.pack(
        ">BBBbII4sQ8sQQ",
        vn << 3 | 4, stratum, request[2], -20, 0, 0, b"LOCL",
        ref, request[40:48], rx, to_ntp(now_s),
    )


def start_ntp_server(speed=1.0, epoch0=None, answer=True, clock=None, port=0):
    """Serve NTP on 127.0.0.1 in a thread; return (host, port, stop_fn).

    clock: a function giving Unix seconds (default scaled_clock(speed, epoch0)); answer=False receives and
    drops every request so a client sees a dead server.
    """
    clock = clock or scaled_clock(speed, epoch0)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", port))
    sock.settimeout(0.1)
    stopping = threading.Event()
    stats = {"requests": 0, "answers": 0}

    def serve():
        while not stopping.is_set():
            try:
                data, addr = sock.recvfrom(512)
            except socket.timeout:
                continue
            except OSError:
                break
            stats["requests"] += 1
            if not answer:
                continue
            t = clock()
            out = reply(data, t, t)
            if out is not None:
                try:
                    sock.sendto(out, addr)
                    stats["answers"] += 1
                except OSError:
                    pass

    thread = threading.Thread(target=serve, name="ntp-stand-in", daemon=True)
    thread.start()

    def stop():
        stopping.set()
        thread.join(2)
        sock.close()

    stop.stats = stats
    host, bound = sock.getsockname()
    return host, bound, stop


if __name__ == "__main__":
    import sys

    h, p, _stop = start_ntp_server(float(sys.argv[1]) if len(sys.argv) > 1 else 1.0)
    print("NTP stand-in on %s:%d" % (h, p))
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        _stop()
