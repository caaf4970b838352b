"""The meter feature: the IR head's UART, the framer/decoder, the filter, ctRatio and the meter's health."""

import busio

from drivers.ir_head import IrHead
from services.metering.energy_floor import EnergyFloor
from services.metering.pipeline import MeterPipeline
from services.metering.register import EnergyRegister


def wire(app):
    """Register the IR head and the meter pipeline; the energy floor every output's totals pass through."""
    env = app.env
    # One energy floor for everything that hands out totals: MQTT and GET /history/latest (the REST API).
    app.energy_floor = EnergyFloor()
    # "auto" keeps one 8N1 UART: a D0 (7E1) character then carries its parity in bit 7, checked in software.
    ir_mode = env("METERPLUS_IR_MODE", "auto")
    seven_e1 = ir_mode in ("d0", "pull")
    uart = busio.UART(tx=app.pin(env("METERPLUS_IR_TX", "IO17")), rx=app.pin(env("METERPLUS_IR_RX", "IO18")),
                      baudrate=300 if ir_mode == "pull" else 9600, bits=7 if seven_e1 else 8,
                      parity=busio.UART.Parity.EVEN if seven_e1 else None, timeout=0,
                      receiver_buffer_size=4096)
    app.ir_head = app.supervisor.add(IrHead(uart, ir_mode))
    # The register keeps energy totals continuous through ctRatio changes (rewritten only at a change).
    app.meter = app.supervisor.add(MeterPipeline(app.bus, app.settings, app.ir_head,
                                                 register=EnergyRegister("register.json", app.log)))
