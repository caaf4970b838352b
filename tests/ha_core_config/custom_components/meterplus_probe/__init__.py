"""Test-only: lets tests/test_ha_core_upgrade.py have the recorder compile the 5-minute statistics of a period now
(Home Assistant does it itself 10 s after each 5-minute boundary; a test cannot wait for that)."""

from datetime import datetime

from homeassistant.components.recorder import get_instance
from homeassistant.components.recorder.tasks import StatisticsTask
from homeassistant.core import HomeAssistant, ServiceCall

DOMAIN = "meterplus_probe"


async def async_setup(hass: HomeAssistant, config) -> bool:
    async def compile_statistics(call: ServiceCall) -> None:
        start = datetime.fromisoformat(call.data["start"])
        instance = get_instance(hass)
        instance.queue_task(StatisticsTask(start, False))
        await instance.async_block_till_done()

    hass.services.async_register(DOMAIN, "compile_statistics", compile_statistics)
    return True
