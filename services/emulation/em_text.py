"""The emulated Pro 3EM's em:0 and emdata:0 status as bytes, written digit by digit into one reused buffer.

Built once a reading for the push to Home Assistant (issue 39), the battery's UDP answer and every GetStatus: with a
string per number (to_str's slices and joins) em:0 left ~5 KB of garbage a reading for a 790-byte result; here
the only new object is the result. Field names, order and digits are those of shelly_rpc's answers (a real Pro
3EM's; every measurement with its decimals)."""

_BUF = [bytearray(1024)]   # em:0 is ~800 bytes with realistic values; a meter's huge ones grow it (_built)

_PHASE_KEYS = (
    (b',"a_current":', b',"a_voltage":', b',"a_act_power":', b',"a_aprt_power":', b',"a_pf":', b',"a_freq":'),
    (b',"b_current":', b',"b_voltage":', b',"b_act_power":', b',"b_aprt_power":', b',"b_pf":', b',"b_freq":'),
    (b',"c_current":', b',"c_voltage":', b',"c_act_power":', b',"c_aprt_power":', b',"c_pf":', b',"c_freq":'))
_SCALE = (1, 10, 100, 1000)


def _put(buf, pos, data):
    """data (bytes) at pos; the position after it (IndexError past the buffer's end, as a digit there)."""
    end = pos + len(data)
    if end > len(buf):
        raise IndexError
    buf[pos:end] = data
    return end


def _built(write, view):
    """write(buf, view) -> its length, copied out (a bytearray nobody changes); a buffer too small for a meter's
    values is doubled and kept."""
    while True:
        buf = _BUF[0]
        try:
            return buf[:write(buf, view)]          # a copy: the one new object
        except IndexError:
            _BUF[0] = bytearray(2 * len(buf))


def _digits(buf, pos, n, width):
    """The non-negative int n at pos in at least width digits (zeros in front); the position after it."""
    k = 1
    t = n // 10
    while t:
        k += 1
        t //= 10
    if k < width:
        k = width
    end = pos + k
    if end > len(buf):
        raise IndexError
    while k:
        k -= 1
        buf[pos + k] = 48 + n % 10
        n //= 10
    return end


def _num(buf, pos, m, e, places):
    """The exact decimal m * 10**e with places decimals (rounded half away from zero) at pos."""
    shift = e + places
    if shift >= 0:
        m = m * 10 ** shift
    else:
        d = 10 ** -shift
        q = ((m if m >= 0 else -m) + d // 2) // d
        m = q if m >= 0 else -q
    if m < 0:
        buf[pos] = 45            # "-"
        pos += 1
        m = -m
    scale = _SCALE[places]
    pos = _digits(buf, pos, m // scale, 1)
    buf[pos] = 46                # "."
    return _digits(buf, pos + 1, m % scale, places)


def _value(buf, pos, v, places):
    """(m, e) or None (null) at pos."""
    if v is None:
        return _put(buf, pos, b"null")
    return _num(buf, pos, v[0], v[1], places)


def _add(total, v):
    """total + v on exact decimals; None stays None."""
    if total is None or v is None:
        return None
    e = total[1] if total[1] < v[1] else v[1]
    return (total[0] * 10 ** (total[1] - e) + v[0] * 10 ** (v[1] - e), e)


def em(view):
    """EM.GetStatus id 0 of a MeterView with power: per phase current, voltage, active and apparent power, pf,
    frequency; totals. Apparent power is |active| (a meter reads no reactive part), pf 1.00 (0.00 at no power)."""
    return _built(_em, view)


def emdata(view):
    """EMData.GetStatus id 0: energies in Wh; the meter's totals on phase a when it sends none per phase."""
    return _built(_emdata, view)


def _em(buf, view):
    pos = _put(buf, 0, b'{"id":0')
    current = (0, 0)
    apparent = (0, 0)
    for i in range(3):
        keys = _PHASE_KEYS[i]
        power = view.phases[i]
        c = view.current[i]
        if c is None:
            c = (0, 0)
        current = _add(current, c)
        pos = _num(buf, _put(buf, pos, keys[0]), c[0], c[1], 3)
        pos = _value(buf, _put(buf, pos, keys[1]), view.voltage[i], 1)
        pos = _value(buf, _put(buf, pos, keys[2]), power, 1)
        pos = _put(buf, pos, keys[3])
        if power is None:
            apparent = None
            pos = _put(buf, pos, b"null")
        else:
            apparent = _add(apparent, (power[0] if power[0] >= 0 else -power[0], power[1]))
            pos = _num(buf, pos, power[0] if power[0] >= 0 else -power[0], power[1], 1)
        pos = _put(buf, _put(buf, pos, keys[4]), b"1.00" if power is not None and power[0] else b"0.00")
        pos = _value(buf, _put(buf, pos, keys[5]), view.frequency, 1)
    pos = _value(buf, _put(buf, pos, b',"n_current":null,"total_current":'), current, 3)
    pos = _value(buf, _put(buf, pos, b',"total_act_power":'), view.power, 3)
    pos = _value(buf, _put(buf, pos, b',"total_aprt_power":'), apparent, 3)
    return _put(buf, pos, b',"user_calibrated_phase":[]}')


def _emdata(buf, view):
    imp = view.import_wh or (0, 0)
    exp = view.export_wh or (0, 0)
    pos = _num(buf, _put(buf, 0, b'{"id":0,"a_total_act_energy":'), imp[0], imp[1], 2)
    pos = _num(buf, _put(buf, pos, b',"a_total_act_ret_energy":'), exp[0], exp[1], 2)
    pos = _put(buf, pos, b',"b_total_act_energy":0.00,"b_total_act_ret_energy":0.00,"c_total_act_energy":0.00,'
               b'"c_total_act_ret_energy":0.00,"total_act":')
    pos = _num(buf, pos, imp[0], imp[1], 2)
    pos = _num(buf, _put(buf, pos, b',"total_act_ret":'), exp[0], exp[1], 2)
    return _put(buf, pos, b"}")


_TS = bytearray(40)


def ts_prefix(unix_ms):
    """b'<ts>,"em:0":' of a NotifyStatus: Unix seconds with two decimals as a Pro 3EM writes them (exact, from ms)."""
    pos = _digits(_TS, 0, unix_ms // 1000, 1)
    _TS[pos] = 46                # "."
    pos = _put(_TS, _digits(_TS, pos + 1, unix_ms % 1000 // 10, 2), b',"em:0":')
    return _TS[:pos]
