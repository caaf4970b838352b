"""The emulated Shelly Pro 3EM on the host runtime, read by clients nobody here wrote (issue 21 point 1):
aioshelly (Home Assistant's Shelly library) over HTTP and its WebSocket RPC, the Marstek UDP request of the public
emulators' tests, and plain HTTP pollers; values equal /history/latest's, a stale meter is refused, authentication
does not lock batteries out, and the WebSocket holds no HTTP slot."""

import asyncio
import hashlib
import json
import socket
import time
from decimal import Decimal

import aiohttp
import pytest
from aioshelly.common import ConnectionOptions, get_info
from aioshelly.rpc_device import RpcDevice

from tests.hostproc import HostProcess, http_request

pytestmark = pytest.mark.slow
TOKEN = "e" * 64
MARSTEK = b'{"id":1,"method":"EM.GetStatus","params":{"id":0}}'     # amis ShellySmartmeterEmulation.cpp L90-93
ASTRAMETER = b'{"id": 1, "src": "cli", "method": "EM.GetStatus", "params": {"id": 0}}'   # its shelly_udp_test.py


def _free_udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.fixture(scope="module")
def device(tmp_path_factory):
    ports = (_free_udp(), _free_udp())
    h = HostProcess(tmp_path_factory.mktemp("shelly") / "drive",
                    settings={"emulation": {"shelly": True, "shellyUdpPort": ports[0], "shellyUdpPort2": ports[1]}})
    h.udp_ports = ports
    h.start()
    h.wait_for(lambda: h.get("/api/v1/history/latest")[0] == 200)      # the first telegram is in
    yield h
    h.stop()


def _udp(port, data, timeout=2.0):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(timeout)
    try:
        s.sendto(data, ("127.0.0.1", port))
        return s.recvfrom(4096)[0]
    except socket.timeout:
        return None
    finally:
        s.close()


def _same_reading(device, read):
    """read() taken between two equal /history/latest answers (the simulated meter sends every second)."""
    for _ in range(60):
        before = device.get("/api/v1/history/latest")
        got = read()
        after = device.get("/api/v1/history/latest")
        if before[0] == after[0] == 200 and before[1] == after[1]:
            return before[1], got
    pytest.fail("no answer between two equal readings")


def _w(latest, code):
    return Decimal(str(latest[code]["value"]))


def test_aioshelly_reads_the_device_info_and_the_em_status(device):
    async def session():
        async with aiohttp.ClientSession() as s:
            info = await get_info(s, "127.0.0.1", port=device.port)
            dev = await RpcDevice.create(s, None, ConnectionOptions("127.0.0.1", port=device.port))
            await dev.initialize()
            try:
                first = dev.status["em:0"]

                async def pair():
                    return await dev.call_rpc("EM.GetStatus", {"id": 0}), await dev.call_rpc("EMData.GetStatus",
                                                                                            {"id": 0})
                found = None
                for _ in range(60):
                    before = device.get("/api/v1/history/latest")
                    em, data = await pair()
                    after = device.get("/api/v1/history/latest")
                    if before[0] == after[0] == 200 and before[1] == after[1]:
                        found = before[1], em, data
                        break
                return info, dev.initialized, dev.model, dev.gen, dev.name, first, found
            finally:
                await dev.shutdown()

    info, initialized, model, gen, name, first, found = asyncio.run(session())
    assert info["gen"] == 2 and info["app"] == "Pro3EM" and info["auth_en"] is False
    assert initialized and model == "SPEM-003CEBEU" and gen == 2 and name == "Meter Plus"
    assert "total_act_power" in first
    assert found is not None, "no RPC answer between two equal readings"
    latest, em, data = found
    assert Decimal(str(em["total_act_power"])) == _w(latest, "16.7.0")
    assert Decimal(str(em["a_act_power"])) == _w(latest, "36.7.0")
    assert Decimal(str(em["c_voltage"])) == _w(latest, "72.7.0")
    assert Decimal(str(data["total_act"])) == _w(latest, "1.8.0") * 1000        # kWh on the API, Wh in a Shelly
    assert Decimal(str(data["total_act_ret"])) == _w(latest, "2.8.0") * 1000


def test_the_marstek_udp_requests_get_the_long_answer_on_both_ports(device):
    for port in device.udp_ports:
        for request in (MARSTEK, ASTRAMETER):
            latest, raw = _same_reading(device, lambda p=port, r=request: _udp(p, r))
            assert raw is not None and len(raw) >= 250                    # AstraMeter issue #200
            doc = json.loads(raw)
            assert list(doc) == ["id", "src", "dst", "result"] and doc["id"] == 1
            assert doc["dst"] == ("cli" if b"cli" in request else "unknown")
            assert Decimal(str(doc["result"]["total_act_power"])) == _w(latest, "16.7.0")
            text = raw.decode()
            for key in ("a_act_power", "b_act_power", "c_act_power", "total_act_power"):
                value = text.split('"%s":' % key)[1].split(",")[0]
                assert "." in value, (key, value)                         # Marstek misreads "100"


def test_http_pollers_get_the_bare_result_and_json_rpc_the_frame(device):
    latest, (status, body, _) = _same_reading(device, lambda: device.get("/rpc/EM.GetStatus?id=0"))
    assert status == 200 and Decimal(str(body["total_act_power"])) == _w(latest, "16.7.0")
    status, body, _ = device.post("/rpc", {"id": 42, "src": "evcc", "method": "EMData.GetStatus",
                                           "params": {"id": 0}})
    assert status == 200 and body["id"] == 42 and body["dst"] == "evcc" and "total_act" in body["result"]
    assert device.get("/shelly")[1]["mac"] == device.get("/rpc/Shelly.GetDeviceInfo")[1]["mac"]


@pytest.mark.parametrize("path, status, code", [
    ("/rpc/Shelly.Reboot", 404, 404), ("/rpc/Switch.Set?id=0&on=true", 404, 404),
    ("/rpc/EM.GetStatus?id=3", 404, 404), ("/rpc/EM.GetStatus?id=%22x%22", 400, -103),
])
def test_nothing_but_readings_over_http(device, path, status, code):
    got = device.get(path)
    assert got[0] == status and got[1]["code"] == code


def test_bad_json_rpc_is_an_error_frame_and_changes_nothing(device):
    before = device.get("/api/v1/settings")[1]
    for body in (b"{", b"[1,2]", b'{"id":1,"method":"Sys.SetConfig","params":{"config":{"device":{"name":"x"}}}}'):
        status, answer, _ = http_request(device.url + "/rpc", data=body, method="POST",
                                         headers={"Content-Type": "text/plain"})
        assert status == 200 and "error" in json.loads(answer)
    assert device.get("/api/v1/settings")[1] == before


async def _answer(ws, req_id):
    """The answer to request req_id, past the NotifyStatus frames pushed meanwhile (a new reading each second)."""
    while True:
        doc = json.loads((await ws.receive(timeout=10)).data)
        if doc.get("id") == req_id:
            return doc
        assert doc.get("method") == "NotifyStatus", doc


def test_aioshelly_in_websocket_mode_gets_notifications_equal_to_getstatus(device):
    """Issue 39: aioshelly's RpcDevice (Home Assistant's client) holds the WebSocket and learns new values only from
    NotifyStatus. For 12 s: a notification for (nearly) every reading, and after each one the client asks
    Shelly.GetStatus on the same WebSocket: em:0 and emdata:0 equal the client's status merged from the
    notifications (or, when the next reading came in between, the next notification's), and the values move."""

    def dump(doc):
        return json.dumps(doc, sort_keys=True)

    async def session():
        async with aiohttp.ClientSession() as s:
            dev = await RpcDevice.create(s, None, ConnectionOptions("127.0.0.1", port=device.port))
            notes, asks = [], []

            async def ask(i):
                status = await dev.call_rpc("Shelly.GetStatus")
                asks.append((i, dump(status["em:0"]), dump(status["emdata:0"])))

            def on_update(d, kind):
                if kind.name == "STATUS":
                    notes.append((dump(d.status["em:0"]), dump(d.status["emdata:0"])))
                    tasks.append(asyncio.ensure_future(ask(len(notes) - 1)))

            tasks = []
            dev.subscribe_updates(on_update)
            await dev.initialize()
            try:
                await asyncio.sleep(12)
                await asyncio.gather(*tasks)
                return notes, asks, dump(dev.status["em:0"])
            finally:
                await dev.shutdown()

    notes, asks, last = asyncio.run(session())
    assert len(notes) >= 8, "%d notifications in 12 s from a meter that sends every second" % len(notes)
    for i, em, data in asks:
        after = notes[i + 1:i + 2]
        assert (em, data) == notes[i] or [(em, data)] == after, (i, em, data, notes[i], after)
    assert len({em for em, _ in notes}) > 1                      # it follows: not one frozen value
    assert last == notes[-1][0]


def test_the_websocket_holds_no_http_slot(device):
    async def hold():
        async with aiohttp.ClientSession() as s:
            ws = await s.ws_connect(device.url + "/rpc")
            await ws.send_str(json.dumps({"id": 1, "src": "t", "method": "Shelly.GetDeviceInfo"}))
            first = await _answer(ws, 1)
            # With the WebSocket open, two requests at once still find both slots free.
            answers = await asyncio.gather(*[s.get(device.url + "/api/v1/system/alive") for _ in range(2)])
            codes = [a.status for a in answers]
            await ws.send_str(json.dumps({"id": 2, "src": "t", "method": "EM.GetStatus", "params": {"id": 0}}))
            second = await _answer(ws, 2)
            # (device.get waits out a 429: the tests before spent the API's budget; the emulation's is its own)
            status, info, _ = await asyncio.to_thread(device.get, "/api/v1/system/info")
            assert status == 200, info
            await ws.close()
            return first, codes, second, info

    first, codes, second, info = asyncio.run(hold())
    assert first.get("result", {}).get("app") == "Pro3EM", first
    assert codes == [200, 200] and "total_act_power" in second.get("result", {}), (codes, second)
    http = {row["name"]: row["value"] for row in info["http"]}
    assert http["open_connections"] == 0        # (counted between polls): the WebSocket holds no slot
    emulation = {row["name"]: row["value"] for row in info["emulation"]}
    assert emulation["shelly"] is True and emulation["shelly_ws.sessions"] == 1      # it is the emulation's
    assert emulation["sma"] is False


def test_with_authentication_on_batteries_still_read_and_the_api_still_asks(tmp_path):
    drive = tmp_path / "drive"
    drive.mkdir()
    digest = hashlib.sha256(TOKEN.encode()).hexdigest()
    other = hashlib.sha256(b"w" * 64).hexdigest()
    (drive / "tokens.json").write_text(json.dumps({"read": digest, "write": other, "required": True}))
    port = _free_udp()
    h = HostProcess(drive, settings={"api_auth_required": True,
                                     "emulation": {"shelly": True, "shellyUdpPort": port, "shellyUdpPort2": 0}})
    h.start()
    try:
        assert h.get("/api/v1/history/latest")[0] == 401
        assert h.get("/shelly")[0] == 200
        h.wait_for(lambda: h.get("/rpc/EM.GetStatus?id=0")[0] == 200)
        assert h.post("/rpc", {"id": 1, "method": "Shelly.GetStatus"})[0] == 200
        assert _udp(port, MARSTEK) is not None
    finally:
        h.stop()


def test_switched_off_it_is_gone(tmp_path):
    port = _free_udp()
    h = HostProcess(tmp_path / "drive", settings={"emulation": {"shelly": False, "shellyUdpPort": port,
                                                                "shellyUdpPort2": 0}})
    h.start()
    try:
        assert h.get("/shelly")[0] == 404 and h.get("/rpc/EM.GetStatus?id=0")[0] == 404
        assert _udp(port, MARSTEK, timeout=1.0) is None
        assert h.post("/api/v1/settings", {"emulation": {"shelly": True}})[0] == 200
        h.wait_for(lambda: _udp(port, MARSTEK, timeout=0.5) is not None, timeout=10)
        assert h.post("/api/v1/settings", {"emulation": {"shelly": False}})[0] == 200
        h.wait_for(lambda: h.get("/shelly")[0] == 404, timeout=10)
        time.sleep(0.5)
        assert _udp(port, MARSTEK, timeout=1.0) is None
    finally:
        h.stop()


def test_a_stale_meter_is_refused_not_repeated(device):
    device.control("meter", "off")
    try:
        device.wait_for(lambda: device.get("/rpc/EM.GetStatus?id=0")[0] == 503, timeout=30)
        status, body, _ = device.get("/rpc/EM.GetStatus?id=0")
        assert body["code"] == -114
        assert _udp(device.udp_ports[0], MARSTEK, timeout=1.5) is None          # silence, never an old value
        status, body, _ = device.get("/rpc/Shelly.GetStatus")
        assert status == 200 and body["em:0"]["total_act_power"] is None
    finally:
        device.control("meter", None)
    device.wait_for(lambda: device.get("/rpc/EM.GetStatus?id=0")[0] == 200, timeout=30)


def test_a_stale_meter_ends_the_websocket_and_refuses_a_new_one_until_readings_return(device):
    """Issue 39: a stopped meter must not stay live in Home Assistant: the open session gets em:0 with null values,
    then a close (1013, try again later), and the handshake answers 503 until a fresh reading is in."""

    async def run():
        async with aiohttp.ClientSession() as s:
            ws = await s.ws_connect(device.url + "/rpc")
            await ws.send_str(json.dumps({"id": 1, "src": "ha", "method": "Shelly.GetStatus"}))
            assert (await _answer(ws, 1))["result"]["em:0"]["total_act_power"] is not None
            device.control("meter", "off")
            last = None
            while True:
                msg = await ws.receive(timeout=30)
                if msg.type != aiohttp.WSMsgType.TEXT:
                    break
                last = json.loads(msg.data)
            refused = None
            try:
                await s.ws_connect(device.url + "/rpc")
            except aiohttp.WSServerHandshakeError as err:
                refused = err.status
            return last, msg.type, ws.close_code, refused

    try:
        last, kind, code, refused = asyncio.run(run())
    finally:
        device.control("meter", None)
    assert last["method"] == "NotifyStatus" and last["params"]["em:0"]["total_act_power"] is None
    assert last["params"]["em:0"]["errors"] == ["no_meter_data"]
    assert kind in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED) and code == 1013
    assert refused == 503
    device.wait_for(lambda: device.get("/rpc/EM.GetStatus?id=0")[0] == 200, timeout=30)


@pytest.mark.usefixtures("sma_multicast")   # its firmware multicasts to the group: never beside the group's reader
def test_pysma_plus_reads_the_running_firmware_as_an_sma_energy_meter(tmp_path):
    # The whole firmware with the SMA emulation on, a unicast target on this host (port 9522, the protocol's), each
    # datagram read by pysma-plus's own parser and compared with /history/latest between two equal readings.
    from tests.test_sma_emulation import decode, named

    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    rx.bind(("127.0.0.1", 9522))
    rx.settimeout(3)
    h = HostProcess(tmp_path / "drive", settings={"emulation": {"sma": True, "smaTargets": "127.0.0.1"}})
    h.start()
    try:
        h.wait_for(lambda: h.get("/api/v1/history/latest")[0] == 200)

        def newest():
            rx.settimeout(0)
            try:
                while True:
                    rx.recvfrom(2048)                       # drop what queued up: the next one is fresh
            except BlockingIOError:
                pass
            rx.settimeout(3)
            data = rx.recvfrom(2048)[0]
            return time.monotonic(), data

        # A datagram leaves ~10 ms after its telegram and the next telegram is ~1 s away: /history/latest asked
        # right after a datagram arrives shows the reading it carried (a few tries, for a telegram in between).
        for _ in range(10):
            _t, data = newest()
            latest = h.get("/api/v1/history/latest")[1]
            got = decode(data)
            values = named(got)
            net = Decimal(str(values["metering_power_absorbed"])) - Decimal(str(values["metering_power_supplied"]))
            if net == _w(latest, "16.7.0"):
                break
        power = _w(latest, "16.7.0")
        assert Decimal(str(values["metering_power_absorbed"])) == max(power, 0)
        assert Decimal(str(values["metering_power_supplied"])) == max(-power, 0)
        assert Decimal(str(values["metering_total_absorbed"])) == _w(latest, "1.8.0")     # kWh
        assert Decimal(str(values["metering_total_yield"])) == _w(latest, "2.8.0")
        assert Decimal(str(values["metering_voltage_l1"])) == _w(latest, "32.7.0")
        esp = {row["name"]: row["value"] for row in h.get("/api/v1/system/info")[1]["esp"]}
        assert got["serial"] == (int(str(esp["esp_id"])[-8:], 16) or 1) and got["susyid"] == 349
    finally:
        h.stop()
        rx.close()
