"""A phone for the _bleio stand-in reachable from outside the host runtime: JSON lines over TCP on --ble-port.

Requests (one JSON object a line, one answer line each): {"op": "adv"} -> {"adv": hex, "scan": hex} or {"adv": null};
{"op": "connect", "mtu": 185}; {"op": "write", "uuid": "...", "hex": "..."}; {"op": "read", "uuid": "..."} ->
{"hex": ...}; {"op": "notified", "uuid": "..."} -> {"hex": [...]}; {"op": "disconnect"}. Errors: {"error": text}.
"""

import json
import socket
import threading


def _handle(req, state):
    import _bleio

    adapter = _bleio.adapter
    op = req.get("op")
    if op == "adv":
        got = adapter.host_advertisement()
        return {"adv": got[0].hex(), "scan": got[1].hex()} if got else {"adv": None}
    if op == "connect":
        state["central"] = adapter.host_connect(mtu=int(req.get("mtu", 23)))
        return {"ok": True}
    central = state.get("central")
    if central is None:
        return {"error": "not connected"}
    if op == "write":
        central.write(req["uuid"], bytes.fromhex(req["hex"]))
        return {"ok": True}
    if op == "read":
        return {"hex": central.read(req["uuid"]).hex()}
    if op == "notified":
        return {"hex": [d.hex() for d in central.notified(req["uuid"])]}
    if op == "disconnect":
        central.disconnect()
        state["central"] = None
        return {"ok": True}
    return {"error": "unknown op"}


def serve(host, port):
    """Listen on host:port in a daemon thread (one client at a time)."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((host, port))
    srv.listen(1)

    def loop():
        while True:
            conn, _addr = srv.accept()
            state = {}
            with conn, conn.makefile("rwb") as f:
                for line in f:
                    try:
                        out = _handle(json.loads(line), state)
                    except Exception as exc:  # the phone sees the stack's refusal, the firmware goes on
                        out = {"error": "%s: %s" % (type(exc).__name__, exc)}
                    f.write((json.dumps(out) + "\n").encode())
                    f.flush()

    threading.Thread(target=loop, name="ble-bridge", daemon=True).start()
