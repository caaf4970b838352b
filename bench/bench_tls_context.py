"""What the host's TLS stand-in costs the firmware per outgoing connection (issue 26): ssl.create_default_context(),
load_verify_locations(cadata=...) as services/mqtt does at each connect, and wrap_socket() of a socketpool socket
(no handshake: the part that is the stand-in's, not TLS itself). Before the fix each connection loaded CPython's
whole default bundle twice (~20 ms each on an idle PC, ~1 s at load 11); now trust anchors load once per process.

    .venv/bin/python -m bench.bench_tls_context [--n 50]

Milliseconds of this PC (the device builds its own mbedTLS context; this is a host-runtime figure only).
"""

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "host", "cp"), ROOT]

import socketpool  # noqa: E402
import wifi  # noqa: E402

from tests.mqtt_peers import device_ssl, make_ca  # noqa: E402


def per_connection_ms(n, cadata):
    ssl = device_ssl()
    pool = socketpool.SocketPool(wifi.radio)
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        ctx = ssl.create_default_context()
        if cadata:
            ctx.load_verify_locations(cadata=cadata)
        sock = ctx.wrap_socket(pool.socket(pool.AF_INET, pool.SOCK_STREAM), server_hostname="localhost")
        times.append((time.perf_counter() - t0) * 1000)
        sock.close()
    times.sort()
    return times[len(times) // 2], times[-1]


def main(argv=()):
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=50)
    a = p.parse_args(list(argv))
    import tempfile

    ca = open(make_ca(tempfile.mkdtemp(prefix="bench-tls-"))["ca.crt"]).read()
    bundle = per_connection_ms(a.n, None)
    pinned = per_connection_ms(a.n, ca)
    print("built-in bundle (OTA, cloud): median %.2f ms, worst %.2f ms per connection" % bundle)
    print("cadata (MQTT with a CA):      median %.2f ms, worst %.2f ms per connection" % pinned)
    return "tls_context: per connection median %.2f ms (bundle) / %.2f ms (cadata), n=%d" % (bundle[0], pinned[0], a.n)


if __name__ == "__main__":
    print(main(sys.argv[1:]))
