"""SMA Energy Meter datagrams (Speedwire EMETER, protocol 0x6069) from a MeterView, with integers only.

Byte layout, big-endian, after SMA's "SMA Energy Meter Protocol" (EMETER-Protokoll-TI-en-10.pdf) and the Energy
Meter 2.0's datagrams as libspeedwire (github.com/RalfOGit/libspeedwire, SpeedwireEmeterProtocol.hpp, ObisData.cpp)
and pysma-plus 0.5.4 (pysmaplus/device_em.py) read them:

     0  53 4D 41 00                 "SMA\\0"
     4  00 04 02 A0  00 00 00 01    tag 0x02A0 (group), 4 bytes long: group 1
    12  LL LL 00 10                 tag 0x0010 (data), LL = bytes from offset 16 to the end of the version channel
    16  60 69                       protocol id: EMETER
    18  SUSy-ID (u16), serial number (u32), ticker (u32: milliseconds, wraps at 2**32)
    28  channels: 00 bb tt 00 (OBIS b.t.0: measurand b, type t) and then t bytes: t=4 u32 now, t=8 u64 counter
     .  90 00 00 00  02 0B 05 52    channel 144: software version 2.11.5.R
     .  00 00 00 00                 end of data (a tag of length 0)

Channels, in a real meter's order: 1.4.0 1.8.0 2.4.0 2.8.0 (import and export: power in 0.1 W, energy in Ws), 14.4.0
(frequency, mHz), then for L1, L2, L3: 21/41/61.4.0 import and 22/42/62.4.0 export power, 31/51/71.4.0 current (mA),
32/52/72.4.0 voltage (mV). A signed power becomes import (its positive part) and export (its negative part), as a
real meter sends them; every value is rounded half away from zero from the exact decimal.

What the meter does not give is left out, never sent as 0: receivers look channels up by their OBIS number (SMA
devices, pysma-plus, evcc's sunny library, OpenDTU-OnBattery) and would take a 0 as measured; a 0 kWh counter reads
as a meter reset. So there is no reactive or apparent power, no power factor, and no per-phase energy (21.8.0 ...):
no receiver we know reads those (pysma-plus names none, OpenDTU-OnBattery skips every counter, evcc reads 1.8.0).
The eight active power channels are always there: OpenDTU-OnBattery takes a value only once it has all eight.
Version 2.11.5.R: sma2mqtt 0.0.13 drops every datagram that does not end with it; nothing else checks the version.

A stale meter (no MeterView: None) gets no datagram at all: the caller sends nothing, so every receiver runs into
its own timeout and falls back to its safe state instead of regulating on an old value.
"""

import struct

from micropython import const

from meter.decimal import rescale

MAX_SIZE = const(184)   # 28 header + 20 totals + 8 frequency + 3 * 32 phases + 8 version + 4 end
_DATA_AT = const(12)
_CHANNELS_AT = const(28)
_U32 = 0xFFFFFFFF         # no const(): beyond the device's small ints
_U64 = (1 << 64) - 1
_HEAD = b"SMA\x00\x00\x04\x02\xa0\x00\x00\x00\x01"
_VERSION = b"\x90\x00\x00\x00\x02\x0b\x05\x52"
_END = b"\x00\x00\x00\x00"


def _u32(code, m, e, exp):
    """m * 10**e in steps of 10**exp as a u32; ValueError naming code when the field cannot hold it."""
    v = rescale(m, e, exp)[0]
    if not 0 <= v <= _U32:
        raise ValueError("%s out of range: %d * 10**%d" % (code, m, e))
    return v


def _put4(buf, at, index, value):
    struct.pack_into(">BBBBI", buf, at, 0, index, 4, 0, value)
    return at + 8


def _split(code, p):
    """(import, export) in 0.1 W of a signed power (m, e) in W: its positive and its negative part."""
    m, e = p
    if m < 0:
        return 0, _u32(code, -m, e, -1)
    return _u32(code, m, e, -1), 0


def _counter(buf, at, index, code, wh):
    """An energy total in Wh as a u64 counter in Ws."""
    m, e = wh
    v = rescale(m * 3600, e, 0)[0]
    if not 0 <= v <= _U64:
        raise ValueError("%s out of range: %d * 10**%d Wh" % (code, m, e))
    struct.pack_into(">BBBBII", buf, at, 0, index, 8, 0, v >> 32, v & _U32)
    return at + 12


def pack_into(buf, serial, susy_id, ticker_ms, view):
    """Write the datagram for view (a MeterView, not None) into buf (MAX_SIZE bytes or more); return its length.

    ticker_ms is taken modulo 2**32. Raises ValueError, with buf's contents undefined, when serial or susy_id is
    out of range, the view has no power, or a value does not fit its field (a negative counter, more than 2**64 Ws).
    """
    if not 0 <= serial <= _U32 or not 0 <= susy_id <= 0xFFFF:
        raise ValueError("serial or SUSy-ID out of range")
    power = view.power
    if power is None:
        raise ValueError("no power")
    imp, exp = _split("power", power)
    buf[0:_DATA_AT] = _HEAD
    at = _put4(buf, _CHANNELS_AT, 1, imp)
    if view.import_wh is not None:
        at = _counter(buf, at, 1, "1.8.0", view.import_wh)
    at = _put4(buf, at, 2, exp)
    if view.export_wh is not None:
        at = _counter(buf, at, 2, "2.8.0", view.export_wh)
    if view.frequency is not None:
        at = _put4(buf, at, 14, _u32("14.7.0", view.frequency[0], view.frequency[1], -3))
    phases = view.phases or (power, (0, 0), (0, 0))
    volts = view.voltage or (None, None, None)
    amps = view.current or (None, None, None)
    for i in range(3):
        index = 21 + 20 * i
        imp, exp = _split("phase power", phases[i])
        at = _put4(buf, at, index, imp)
        at = _put4(buf, at, index + 1, exp)
        a = amps[i]
        if a is not None:   # the EMETER's current is an RMS magnitude: a sign (direction) is in the power pair
            at = _put4(buf, at, index + 10, _u32("current", abs(a[0]), a[1], -3))
        v = volts[i]
        if v is not None:
            at = _put4(buf, at, index + 11, _u32("voltage", v[0], v[1], -3))
    buf[at:at + 8] = _VERSION
    at += 8
    struct.pack_into(">HHHHII", buf, _DATA_AT, at - 16, 0x0010, 0x6069, susy_id, serial, ticker_ms & _U32)
    buf[at:at + 4] = _END
    return at + 4


def datagram(serial, susy_id, ticker_ms, view):
    """The datagram for view as bytes (see pack_into); a None view (stale meter) has none: the caller sends nothing."""
    buf = bytearray(MAX_SIZE)
    return bytes(buf[:pack_into(buf, serial, susy_id, ticker_ms, view)])
