"""python -m host.decode FILE...: find every SML/D0 telegram in capture files and print one JSON line each."""

import binascii
import json
import os
import sys

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_CP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cp")
if _CP not in sys.path:
    sys.path.insert(0, _CP)  # micropython.const for the firmware modules

from meter import obis  # noqa: E402
from meter.d0 import decode_d0  # noqa: E402
from meter.decimal import to_str  # noqa: E402
from meter.framer import SML, Framer  # noqa: E402
from meter.sml import SmlResult, decode_frame, decode_messages  # noqa: E402

_HEX = set(b"0123456789abcdefABCDEF")


def load_capture(data):
    """Bytes of a capture: hex text (whitespace ignored) is decoded, anything else is taken as binary."""
    compact = bytes(c for c in data if c not in b" \t\r\n")
    if compact and len(compact) % 2 == 0 and all(c in _HEX for c in compact):
        return binascii.unhexlify(compact)
    return bytes(data)


def result_dict(res, fmt):
    """The JSON object of one decoded result (values at the edge: kWh, W, V, A, Hz)."""
    values = {}
    for i in range(obis.N):
        if res.has(i):
            code = obis.CODES[i]
            m, e = res.mant[i], res.exp[i]
            kind = obis.ROWS[i][2]
            if kind == "energy":
                e -= 3  # Wh -> kWh, exact
            values[code] = {"value": float(to_str(m, e)),  # host tool output, not a device wire value
                            "unit": obis.KINDS[kind][0]}
    return {"ok": True, "format": fmt, "crc": res.crc, "server_id": res.server_id(), "values": values}


def decode_bytes(data, dzg=False):
    """One dict per telegram (or broken telegram) found in data, in stream order."""
    out = []
    res = SmlResult()
    fr = Framer(size=16384, mode="auto")
    pos = 0
    resyncs = 0

    def drain():
        nonlocal resyncs
        while True:
            fmt = fr.next()
            if fr.resyncs != resyncs:
                for _ in range(fr.resyncs - resyncs):
                    out.append({"ok": False, "error": "broken telegram (no valid end, resynchronised)"})
                resyncs = fr.resyncs
            if not fmt:
                return
            n = fr.telegram_len()
            tele = bytearray(fr.buf[:n])
            if fmt == SML:
                ok = decode_frame(tele, n, res, dzg)
                name = "sml"
            else:
                ok = decode_d0(tele, n, res)
                name = "d0"
            if ok:
                out.append(result_dict(res, name))
            else:
                out.append({"ok": False, "format": name, "error": res.error})

    while pos < len(data):
        pos += fr.feed(data[pos:pos + 4096])
        drain()
    if not out:
        # Published captures are sometimes bare SML messages without the transport layer.
        buf = bytearray(data)
        if decode_messages(buf, 0, len(buf), res, dzg):
            d = result_dict(res, "sml")
            d["crc"] = None
            d["transport"] = False
            out.append(d)
        else:
            out.append({"ok": False, "error": "no telegram found"})
    return out


def main(argv=None):
    args = sys.argv[1:] if argv is None else argv
    dzg = False
    files = []
    for a in args:
        if a == "--dzg":
            dzg = True
        elif a in ("-h", "--help"):
            print("usage: python -m host.decode [--dzg] FILE...  (hex text or binary; one JSON line per telegram)")
            return 0
        else:
            files.append(a)
    if not files:
        sys.stderr.write("usage: python -m host.decode [--dzg] FILE...\n")
        return 2
    good = 0
    for path in files:
        try:
            with open(path, "rb") as f:
                data = load_capture(f.read())
        except OSError as exc:
            print(json.dumps({"ok": False, "file": path, "error": str(exc)}))
            continue
        for d in decode_bytes(data, dzg):
            if d.get("ok"):
                good += 1
            print(json.dumps(d))
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
