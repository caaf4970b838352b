"""The clock feature: NTP and the time zone, setting the RTC after each sync."""

import rtc

from core.clock import Clock


def wire(app):
    """Register the clock (the host runtime's NTP stand-in replaces the public servers and their backups)."""
    ntp = app.env("METERPLUS_NTP_OVERRIDE", None)
    app.clock = app.supervisor.add(Clock(app.pool, app.settings, bus=app.bus, rtc=rtc.RTC(), server=ntp,
                                         backups=() if ntp else None))
    app.clock.budget = app.sockets
    if app.mqtt is not None:       # wired before the clock (code.py: the first reading's way out comes first)
        app.mqtt.clock = app.clock
