"""aio-wattwaechter 1.3.0 (the published client of this API) against the host runtime: every method for an
endpoint of the spec, with authentication off and on, through a token rotation, and across a 429."""

import asyncio
import datetime
import os
import subprocess
import time

import pytest
import requests
from aio_wattwaechter import (
    LedStatus,
    Wattwaechter,
    WattwaechterAuthenticationError,
)

from core.version import VERSION
from tests.test_api_harness import start_host

pytestmark = pytest.mark.slow


def run(coro):
    return asyncio.run(coro)


def client(h, token=None, **kw):
    return Wattwaechter("127.0.0.1:%d" % h.port, token=token, **kw)


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    h = start_host(tmp_path_factory, "ww")
    yield h
    h.stop()


@pytest.fixture(scope="module")
def pem(tmp_path_factory):
    d = tmp_path_factory.mktemp("ca")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "30", "-subj", "/CN=Test CA"],
                   cwd=str(d), check=True, capture_output=True)
    with open(os.path.join(str(d), "ca.crt")) as f:
        return f.read()


def test_every_method_with_auth_off(host, pem):
    # The simulated meter's first reading comes about a second after start-up: wait for it, so that meter_data()
    # below has one however long the calls before it take (a 204 here, then a reading there, was possible).
    # The 204 -> None path is tests/test_history_api.py's.
    host.wait_for(lambda: requests.get(host.url + "/api/v1/history/latest", timeout=10).status_code == 200,
                  timeout=30)
    today = datetime.date.today().isoformat()

    async def go():
        async with client(host) as c:
            alive = await c.alive()
            assert alive.alive is True and alive.version == VERSION

            info = await c.system_info()
            assert info.device_id == "024d50000001" and info.firmware_version == VERSION
            assert info.get_value("wifi", "mac_address") == "02:4D:50:00:00:01"
            assert int(info.get_value("heap", "free")) == 2_000_000

            led = await c.led()
            assert isinstance(led.status, LedStatus) and led.enabled is True
            assert led.active_statuses[led.status.value] is True

            await c.wifi_scan(refresh=True)
            for _ in range(50):
                scan = await c.wifi_scan()
                if not scan.scanning:
                    break
                await asyncio.sleep(0.1)
            assert [(n.ssid, n.rssi) for n in scan.networks] == [("HostNetwork", -48), ("Neighbour", -77)]
            assert scan.count == 2

            zones = await c.timezones()
            berlin = [z for z in zones if z.name == "Europe/Berlin"]
            assert len(zones) > 400 and berlin and berlin[0].utc_offset_min in (60, 120)

            data = await c.meter_data()
            assert data is not None and data.power is not None

            hr = await c.history_high_res(today)
            assert hr.start == today and hr.days == 1
            lr = await c.history_low_res(today, 3)
            assert lr.start == today

            raw = await c.logs_rawdump()
            assert raw is None or (isinstance(raw, bytes) and raw)
            persistent = await c.logs_persistent()
            assert persistent.startswith("time,uptime_s,level,message")
            assert "Meter Plus up" in await c.logs_ram()

            ota = await c.ota_check()
            assert ota.ok is True and ota.data.update_available is False and ota.data.version == VERSION
            assert await c.ota_start() is False

            s = await c.settings()
            assert s.device_name == "Meter Plus" and s.timezone == "Europe/Berlin" and s.led_enable is True
            assert s.api_auth_required is False and s.mqtt.port == 1883 and s.mqtt.use_tls is False
            assert s.language.active == "de" and [e.code for e in s.language.installed] == ["de", "en"]
            assert s.ntp_server == "pool.ntp.org" and s.wifi_primary.enable is True

            applied = await c.update_settings({"device_name": "Home Assistant", "ledEnable": False,
                                               "mqtt": {"sendInterval": 30}})
            assert applied == {"device_name": "Home Assistant", "ledEnable": False, "mqtt": {"sendInterval": 30}}
            s = await c.settings()
            assert s.device_name == "Home Assistant" and s.led_enable is False and s.mqtt.sendInterval == 30
            assert (await c.led()).enabled is False
            await c.update_settings({"ledEnable": True})

            gen = await c.generate_tokens()
            assert gen.success is True and gen.expires_in == 60 and len(gen.token_write) == 64
            assert await c.confirm_tokens(gen.token_write) is True

            st = await c.mqtt_ca_status()
            assert st.has_custom_cert is False and st.custom_size == 0
            up = await c.mqtt_ca_upload(pem)
            assert up.success is True
            st = await c.mqtt_ca_status()
            assert st.has_custom_cert is True and st.custom_size > 0
            assert (await c.mqtt_ca_delete()).success is True
            assert (await c.mqtt_ca_status()).has_custom_cert is False

            mb = await c.modbus_status()
            assert mb.enabled is False and mb.registers
            mq = await c.mqtt_status()
            assert mq.enabled is False

            assert await c.cloud_pair("WW-12345678") is True
            assert await c.cloud_unpair() is True

            assert await c.reboot() is True

    run(go())
    host.wait_for(lambda: "restarting the firmware" in host.log(), timeout=20)
    host.wait_alive(30)


def test_auth_on_and_token_rotation(tmp_path_factory):
    h = start_host(tmp_path_factory, "ww_auth")

    async def go():
        async with client(h) as c:
            gen = await c.generate_tokens()  # authentication off: the first pair needs no token
            assert await c.confirm_tokens(gen.token_write) is True
            await c.update_settings({"api_auth_required": True})
        read, write = gen.token_read, gen.token_write

        async with client(h) as anon:
            assert (await anon.alive()).alive is True  # open
            assert (await anon.wifi_scan()).count >= 0  # open
            with pytest.raises(WattwaechterAuthenticationError):
                await anon.settings()
            with pytest.raises(WattwaechterAuthenticationError):
                await anon.system_info()
        async with client(h, token=read) as r:
            s = await r.settings()
            assert s.api_auth_required is True
            assert (await r.system_info()).device_id == "024d50000001"
            await r.meter_data()
            await r.modbus_status()
            with pytest.raises(WattwaechterAuthenticationError):
                await r.update_settings({"ledEnable": False})
            with pytest.raises(WattwaechterAuthenticationError):
                await r.generate_tokens()
            with pytest.raises(WattwaechterAuthenticationError):
                await r.reboot()
        async with client(h, token=write) as w:
            assert (await w.update_settings({"device_name": "Locked"})) == {"device_name": "Locked"}
            new = await w.generate_tokens()
            assert (await w.settings()).device_name == "Locked"  # the old pair works until confirm
            assert await w.confirm_tokens(new.token_write) is True
            with pytest.raises(WattwaechterAuthenticationError):
                await w.settings()  # old WRITE token is gone
        async with client(h, token=read) as old_read:
            with pytest.raises(WattwaechterAuthenticationError):
                await old_read.settings()
        async with client(h, token=new.token_read) as nr:
            assert (await nr.settings()).device_name == "Locked"
        async with client(h, token=new.token_write) as nw:
            assert (await nw.ota_start()) is False
            await nw.update_settings({"api_auth_required": False})
        async with client(h) as anon:
            assert (await anon.settings()).api_auth_required is False

    try:
        run(go())
    finally:
        h.stop()


def test_retry_after_429_is_honoured(tmp_path_factory):
    h = start_host(tmp_path_factory, "ww_rate", rate_limit=25)

    async def go():
        async with client(h, max_retries=3, request_timeout=30) as c:
            for _ in range(25):
                await c.alive()
            t0 = time.monotonic()
            s = await c.settings()  # 429 first, then the client waits Retry-After (10 s) and gets it
            waited = time.monotonic() - t0
            assert s.device_name == "Meter Plus"
            return waited

    try:
        time.sleep(10.5)  # the start-up probes leave the window
        waited = run(go())
        assert waited >= 9.5
    finally:
        h.stop()
