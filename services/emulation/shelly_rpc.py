"""Shelly Pro 3EM (Gen2 RPC) answers from a MeterView: device info, EM/EMData status, JSON-RPC frames.

Every answer is written by hand in a fixed key order with exact decimals (no float, no dict order): the same bytes
on CircuitPython as here. Field names and order follow a real Pro 3EM; every number of a measurement carries a
decimal point (Marstek batteries misread "100" as something else than "100.0"; docs/emulation.md cites it).
"""

import json

from services.emulation import em_text

MODEL = "SPEM-003CEBEU"
APP = "Pro3EM"
FW_VER = "1.4.4"                              # the Pro 3EM firmware whose answers these copy
FW_ID = "20241011-114455/1.4.4-g6d2a586"
UNAVAILABLE = -114                            # Shelly's "resource unavailable" (a stale meter)
NOT_FOUND = 404                               # Shelly answers an unknown method with code 404
BAD_ARGUMENT = -103

# Methods a battery, Home Assistant (aioshelly) or a user may call; everything else is 404, nothing changes state.
METHODS = ("Shelly.GetDeviceInfo", "Shelly.GetStatus", "Shelly.GetConfig", "Shelly.GetComponents",
           "Shelly.GetMethods", "EM.GetStatus", "EM.GetConfig", "EMData.GetStatus", "Sys.GetStatus",
           "Sys.GetConfig")


class RpcError(Exception):
    """A JSON-RPC error: code and message as a Shelly sends them."""

    def __init__(self, code, message):
        Exception.__init__(self, message)
        self.code = code
        self.message = message


class Identity:
    """Who the emulated Shelly is: id shellypro3em-<mac>, the MAC in capitals, a name, the firmware we run."""

    def __init__(self, mac_hex, name=None, version="0.1.0"):
        self.mac = mac_hex.upper()
        self.id = "shellypro3em-" + mac_hex.lower()
        self.name = name
        self.version = version


def _str(s):
    return "null" if s is None else json.dumps(s)


def device_info(ident):
    """GET /shelly and Shelly.GetDeviceInfo: the Pro 3EM's own fields in its order (auth off: no digest needed)."""
    return ('{"name":%s,"id":"%s","mac":"%s","slot":1,"model":"%s","gen":2,"fw_id":"%s","ver":"%s","app":"%s",'
            '"auth_en":false,"auth_domain":null,"profile":"triphase"}'
            % (_str(ident.name), ident.id, ident.mac, MODEL, FW_ID, FW_VER, APP))


def em_status(view):
    """EM.GetStatus id 0: per phase current, voltage, active and apparent power, pf, frequency; totals (em_text).

    Apparent power is |active| (a meter reads no reactive part) and pf 1: the fields a client reads must be there."""
    return _encoded(em_text.em, view).decode()


def emdata_status(view):
    """EMData.GetStatus id 0: energies in Wh; the meter's totals on phase a when it sends none per phase."""
    return _encoded(em_text.emdata, view).decode()


def _em_config():
    return ('{"id":0,"name":null,"blink_mode_selector":"active_energy","phase_selector":"all",'
            '"monitor_phase_sequence":true,"ct_type":"120A"}')


def _sys_config(ident):
    return ('{"device":{"name":%s,"mac":"%s","fw_id":"%s","discoverable":true,"eco_mode":false,'
            '"profile":"triphase"},"location":{"tz":null,"lat":null,"lon":null},"debug":{"websocket":'
            '{"enable":false}},"ui_data":{},"rpc_udp":{"dst_addr":null,"listen_port":null},'
            '"sntp":{"server":"time.google.com"},"cfg_rev":1}' % (_str(ident.name), ident.mac, FW_ID))


def _sys_status(ident, uptime_s):
    return ('{"mac":"%s","restart_required":false,"time":null,"unixtime":null,"uptime":%d,"ram_size":262144,'
            '"ram_free":100000,"fs_size":524288,"fs_free":200000,"cfg_rev":1,"kvs_rev":0,"schedule_rev":0,'
            '"webhook_rev":0,"available_updates":{}}' % (ident.mac, uptime_s))


def _null_em():
    return ('{"id":0,"errors":["no_meter_data"],"a_current":null,"a_voltage":null,"a_act_power":null,'
            '"b_current":null,"b_voltage":null,"b_act_power":null,"c_current":null,"c_voltage":null,'
            '"c_act_power":null,"total_current":null,"total_act_power":null}')


def null_emdata():
    """EMData's status while the meter is stale or silent: the error, no totals (a client keeps the last ones)."""
    return '{"id":0,"errors":["no_meter_data"]}'


def notify_head(src, dst):
    """The start of every NotifyStatus a session gets: the device's id and the client's src (its requests' src)."""
    return '{"src":"%s","dst":%s,"method":"NotifyStatus","params":{"ts":' % (src, json.dumps(dst))


def notify_parts(unix_ms, view, with_data):
    """The rest of a NotifyStatus after notify_head, as bytes to send one after the other: ts (unix_ms as a Pro 3EM
    writes it), em:0 and (with_data) emdata:0, the texts Shelly.GetStatus answers with for the same reading, built
    once per reading and sent as they are (no copy of them per session); view None = a stale meter's null forms."""
    if view is None:
        return (em_text.ts_prefix(unix_ms), _null_em().encode(), b',"emdata:0":', null_emdata().encode(), b"}}")
    em = _encoded(em_text.em, view)
    if not with_data:
        return (em_text.ts_prefix(unix_ms), em, b"}}")
    return (em_text.ts_prefix(unix_ms), em, b',"emdata:0":', _encoded(em_text.emdata, view), b"}}")


_bytes = {}  # type: dict  # em_text function -> [ts_ms, power, import, export, text] of the reading built last


def _encoded(build, view):
    """build(view) (em_text.em or .emdata), built once per reading and kept as bytes (a hit allocates nothing)."""
    hit = _bytes.get(build)
    if hit is None:
        hit = _bytes[build] = [None, None, None, None, None]
    elif hit[0] == view.ts_ms and hit[1] == view.power and hit[2] == view.import_wh and hit[3] == view.export_wh:
        return hit[4]
    hit[4] = None                 # a failed build (out of memory) must not leave the old text under the new key
    hit[0] = view.ts_ms           # one by one: a 4-target assignment builds a tuple
    hit[1] = view.power
    hit[2] = view.import_wh
    hit[3] = view.export_wh
    hit[4] = build(view)
    return hit[4]


def _id_param(params):
    """The component id a method names (only 0 exists); RpcError otherwise."""
    cid = 0 if params is None else params.get("id", 0)
    if isinstance(cid, bool) or not isinstance(cid, int):
        raise RpcError(BAD_ARGUMENT, "Argument 'id', value type is invalid!")
    if cid != 0:
        raise RpcError(NOT_FOUND, "Component not found: %d" % cid)


_built = {}  # type: dict  # function -> (the reading's key, its text): built once per reading, not per question


def once_per_reading(build, view):
    """build(view), reused while the view shows the same reading: a battery over UDP, Home Assistant over the
    WebSocket and HTTP clients ask every second for the same reading (each answer is ~40 ms on an ESP32-S3)."""
    key = (view.ts_ms, view.power, view.import_wh, view.export_wh)
    hit = _built.get(build)
    if hit is not None and hit[0] == key:
        return hit[1]
    text = build(view)
    _built[build] = (key, text)
    return text


def result(method, params, view, ident, uptime_s=0):
    """The JSON text of a method's result; RpcError for an unknown method, a bad id or (power values) a stale meter.

    view None = the meter is stale or silent: EM.GetStatus and EMData.GetStatus refuse with UNAVAILABLE rather
    than repeat an old value; Shelly.GetStatus (Home Assistant) shows the meter with null values instead."""
    if params is not None and not isinstance(params, dict):
        raise RpcError(BAD_ARGUMENT, "Invalid params")
    if method == "Shelly.GetDeviceInfo":
        return device_info(ident)
    if method in ("EM.GetStatus", "EMData.GetStatus", "EM.GetConfig"):
        _id_param(params)
        if method == "EM.GetConfig":
            return _em_config()
        if view is None or view.power is None:
            raise RpcError(UNAVAILABLE, "No fresh meter reading")
        return once_per_reading(em_status if method == "EM.GetStatus" else emdata_status, view)
    if method == "Shelly.GetStatus":
        live = view is not None and view.power is not None
        em = once_per_reading(em_status, view) if live else _null_em()
        data = once_per_reading(emdata_status, view) if live else null_emdata()
        return ('{"ble":{},"cloud":{"connected":false},"em:0":%s,"emdata:0":%s,"eth":{"ip":null},'
                '"modbus":{},"mqtt":{"connected":false},"sys":%s,"wifi":{"sta_ip":null,"status":"got ip"},'
                '"ws":{"connected":false}}' % (em, data, _sys_status(ident, uptime_s)))
    if method == "Shelly.GetConfig":
        return ('{"ble":{"enable":false},"cloud":{"enable":false},"em:0":%s,"emdata:0":{},"mqtt":{"enable":false},'
                '"sys":%s,"wifi":{"sta":{"ssid":null,"enable":true}},"ws":{"enable":false}}'
                % (_em_config(), _sys_config(ident)))
    if method == "Shelly.GetComponents":
        return '{"components":[],"cfg_rev":1,"offset":0,"total":0}'
    if method == "Shelly.GetMethods":
        return '{"methods":[%s]}' % ",".join('"%s"' % m for m in METHODS)
    if method == "Sys.GetStatus":
        return _sys_status(ident, uptime_s)
    if method == "Sys.GetConfig":
        return _sys_config(ident)
    raise RpcError(NOT_FOUND, "No handler for %s" % method)


def frame(req_id, src, dst, body=None, error=None):
    """A JSON-RPC answer frame {"id", "src", "dst", "result" | "error"} as a Shelly sends it."""
    head = '{"id":%s,"src":"%s"' % (json.dumps(req_id), src)
    if dst is not None:
        head += ',"dst":%s' % json.dumps(dst)
    if error is not None:
        return head + ',"error":{"code":%d,"message":%s}}' % (error.code, json.dumps(error.message))
    return head + ',"result":' + body + "}"


def request_fields(doc):
    """(id, src, method, params) of a decoded JSON-RPC request; RpcError for one that is not."""
    if not isinstance(doc, dict):
        raise RpcError(BAD_ARGUMENT, "Request must be a JSON object")
    method = doc.get("method")
    if not isinstance(method, str) or not method or len(method) > 64:
        raise RpcError(BAD_ARGUMENT, "Missing or invalid method")
    req_id = doc.get("id")
    if req_id is not None and (isinstance(req_id, bool) or not isinstance(req_id, (int, str))):
        req_id = None
    src = doc.get("src")
    return req_id, (src if isinstance(src, str) and len(src) <= 64 else None), method, doc.get("params")


def answer_datagram(data, view, ident, uptime_s=0):
    """The answer to one JSON-RPC datagram (bytes) or None: a battery gets silence, never an old value, when the
    meter is stale, and a datagram that is not JSON-RPC gets none either (it may not even be meant for us)."""
    try:
        doc = json.loads(data)
    except Exception:   # ValueError, UnicodeError, a recursion error from deep nesting (RuntimeError)
        return None
    try:
        req_id, src, method, params = request_fields(doc)
        body = result(method, params, view, ident, uptime_s)
    except RpcError:
        return None
    return frame(req_id, ident.id, src or "unknown", body).encode()
