"""Run inside a fresh network namespace (`unshare -n`): our mDNS responder on 224.0.0.251:5353 over loopback, and
python-zeroconf (Home Assistant's library) and aioshelly's discovery looking for it. Prints one JSON document.

`mdns_netns.py` runs the responder module in this process; `mdns_netns.py host` runs the whole firmware as
`python -m host --mdns-port 5353 --bind 0.0.0.0` (joined to the simulated home WiFi, the Shelly emulation on) and
switches the emulation off through the settings API.

Used by tests/test_mdns_zeroconf.py; nothing here touches the machine's real network (the namespace has only lo).
"""

import asyncio
import json
import os
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "host", "cp"), ROOT]

DEV = "024d50000001"
TYPES = ("_http._tcp.local.", "_wattwaechter._tcp.local.", "_shelly._tcp.local.")


def loopback_multicast():
    for cmd in (["ip", "link", "set", "lo", "up"], ["ip", "link", "set", "lo", "multicast", "on"],
                ["ip", "route", "add", "224.0.0.0/4", "dev", "lo"]):
        subprocess.run(cmd, check=True)


class Emulation:
    def __init__(self, on):
        self.on = on


def start_responder(shelly_on, stop):
    import socketpool

    from services.network.mdns_responder import MdnsResponder, service_list

    emu = Emulation(shelly_on)
    r = MdnsResponder(socketpool.SocketPool(None), lambda: bytes((127, 0, 0, 1)), "meterplus-" + DEV,
                      lambda: service_list(DEV, 8080, "0.1.0", emu.on), changed=lambda: emu.on)
    r.start()
    t0 = time.monotonic()

    def loop():
        while not stop.is_set():
            r.poll(int((time.monotonic() - t0) * 1000))
            time.sleep(0.02)
        r.stop()

    th = threading.Thread(target=loop, daemon=True)
    th.start()
    return r, emu, th


async def browse(result, switch_off, port):
    from aioshelly.zeroconf import async_discover_devices
    from zeroconf import ServiceStateChange
    from zeroconf.asyncio import AsyncServiceBrowser, AsyncServiceInfo, AsyncZeroconf

    aiozc = AsyncZeroconf(interfaces=["127.0.0.1"])
    found = {t: [] for t in TYPES}
    removed = []

    def handler(zeroconf, service_type, name, state_change):
        if state_change is ServiceStateChange.Added:
            found[service_type].append(name)
        elif state_change is ServiceStateChange.Removed:
            removed.append(name)

    browsers = [AsyncServiceBrowser(aiozc.zeroconf, t, handlers=[handler]) for t in TYPES]
    deadline = time.monotonic() + 8
    while time.monotonic() < deadline and not all(found.values()):
        await asyncio.sleep(0.1)
    result["found"] = found
    resolved = {}
    for t, names in sorted(found.items()):
        for name in names:
            info = AsyncServiceInfo(t, name)
            ok = await info.async_request(aiozc.zeroconf, 3000)
            while ok and not info.properties and time.monotonic() < deadline + 5:   # TXT still on its way
                await asyncio.sleep(0.2)
                ok = await info.async_request(aiozc.zeroconf, 3000)
            resolved[name] = {
                "ok": bool(ok), "port": info.port, "server": info.server,
                "addresses": info.parsed_addresses(),
                "properties": {k.decode(): (v.decode() if v is not None else None)
                               for k, v in (info.properties or {}).items()},
            }
    result["resolved"] = resolved
    shelly = await async_discover_devices(aiozc, timeout=3.0)
    result["aioshelly"] = sorted((i.name, i.parsed_addresses()[0], i.port) for i in shelly)
    # the Shelly emulation switched off: a goodbye takes its services out of the browsers' view
    switch_off()
    deadline = time.monotonic() + 8
    while time.monotonic() < deadline and len(removed) < 2:
        await asyncio.sleep(0.1)
    result["removed"] = sorted(removed)
    for b in browsers:
        await b.async_cancel()
    await aiozc.async_close()


def main():
    loopback_multicast()
    if sys.argv[1:] == ["host"]:
        return main_host()
    if sys.argv[1:] == ["host-mqtt-shelly"]:
        return main_host(full=True)
    stop = threading.Event()
    r, emu, th = start_responder(True, stop)
    time.sleep(3)    # probed and announced before anyone listens: what the browsers learn, they must ask for
    result = {}

    def switch_off():
        emu.on = False

    try:
        asyncio.run(browse(result, switch_off, 8080))
    finally:
        stop.set()
        th.join(5)
    result["counters"] = r.counters
    result["hostname"] = r.fqdn()
    print(json.dumps(result, sort_keys=True))


def main_host(full=False):
    """full: MQTT on and the Shelly emulation with both UDP ports and SMA (issue 36: the combination whose worst case
    left our responder no socket, so no TXT); it stays on (nothing is switched off)."""
    import tempfile

    from tests.hostproc import HostProcess, free_port

    drive = tempfile.mkdtemp(prefix="mdns-netns-")
    emulation = {"shelly": True, "shellyUdpPort": 0, "shellyUdpPort2": 0}
    settings = {"wifi": {"primary": {"ssid": "HostNetwork", "password": "host-password"}}, "emulation": emulation}
    if full:
        emulation.update({"shellyUdpPort": free_port(), "shellyUdpPort2": free_port(), "sma": True})
        settings["mqtt"] = {"enable": True, "host": "127.0.0.1", "port": free_port()}   # no broker: the socket counts
    h = HostProcess(drive, args=["--mdns-port", "5353", "--bind", "0.0.0.0"], settings=settings).start()
    result = {"http_port": h.port}
    try:
        time.sleep(3)

        def switch_off():
            if not full:
                h.post("/api/v1/settings", {"emulation": {"shelly": False}})

        asyncio.run(browse(result, switch_off, h.port))
        status, info, _ = h.get("/api/v1/system/info")
        result["counters"] = {e["name"]: e["value"] for e in info["mdns"]}
        result["hostname"] = result["counters"]["hostname"]
    finally:
        h.stop()
    print(json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    main()
