"""The SMA Energy Meter emulation: EMETER datagrams to 239.12.255.254:9522 and unicast targets (off by default)."""

from services.emulation.sma_sender import GROUP, SmaSender


def wire(app):
    """Register the sender; it holds no socket until emulation.sma (METERPLUS_SMA_GROUP moves the group on a host)."""
    app.sma = app.supervisor.add(SmaSender(app.pool, app.bus, app.settings, app.device_id,
                                           energy_floor=app.energy_floor, log=app.log,
                                           group=app.env("METERPLUS_SMA_GROUP", GROUP)))
