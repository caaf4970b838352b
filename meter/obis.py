"""The one OBIS table: short code -> key, units, labels (de/en), kind, HA and SunSpec metadata."""

# Per kind: (edge unit, base unit, SML unit code of the base unit, HA device_class, HA state_class).
# Derived from the kind so the per-code rows stay small (this table lives in RAM on the device).
KINDS = {
    "energy": ("kWh", "Wh", 30, "energy", "total_increasing"),
    "power": ("W", "W", 27, "power", "measurement"),
    "voltage": ("V", "V", 35, "voltage", "measurement"),
    "current": ("A", "A", 33, "current", "measurement"),
    "frequency": ("Hz", "Hz", 44, "frequency", "measurement"),
}

# (short code, key, kind, label_de, label_en, SunSpec model-203 point or None).
# Order is the slot order of the decoders' result arrays: do not reorder casually.
ROWS = (
    ("1.8.0", "import_total", "energy", "Bezug gesamt", "Import total", "TotWhImp"),
    ("2.8.0", "export_total", "energy", "Einspeisung gesamt", "Export total", "TotWhExp"),
    ("16.7.0", "power", "power", "Wirkleistung", "Active power", "W"),
    ("1.8.1", "import_t1", "energy", "Bezug Tarif 1", "Import tariff 1", None),
    ("1.8.2", "import_t2", "energy", "Bezug Tarif 2", "Import tariff 2", None),
    ("2.8.1", "export_t1", "energy", "Einspeisung Tarif 1", "Export tariff 1", None),
    ("2.8.2", "export_t2", "energy", "Einspeisung Tarif 2", "Export tariff 2", None),
    ("1.7.0", "power_import", "power", "Bezugsleistung", "Import power", None),
    ("2.7.0", "power_export", "power", "Einspeiseleistung", "Export power", None),
    ("15.7.0", "power_abs", "power", "Betrag Wirkleistung", "Absolute active power", None),
    ("36.7.0", "power_l1", "power", "Wirkleistung L1", "Active power L1", "WphA"),
    ("56.7.0", "power_l2", "power", "Wirkleistung L2", "Active power L2", "WphB"),
    ("76.7.0", "power_l3", "power", "Wirkleistung L3", "Active power L3", "WphC"),
    ("21.7.0", "power_import_l1", "power", "Bezugsleistung L1", "Import power L1", None),
    ("41.7.0", "power_import_l2", "power", "Bezugsleistung L2", "Import power L2", None),
    ("61.7.0", "power_import_l3", "power", "Bezugsleistung L3", "Import power L3", None),
    ("32.7.0", "voltage_l1", "voltage", "Spannung L1", "Voltage L1", "PhVphA"),
    ("52.7.0", "voltage_l2", "voltage", "Spannung L2", "Voltage L2", "PhVphB"),
    ("72.7.0", "voltage_l3", "voltage", "Spannung L3", "Voltage L3", "PhVphC"),
    ("31.7.0", "current_l1", "current", "Strom L1", "Current L1", "AphA"),
    ("51.7.0", "current_l2", "current", "Strom L2", "Current L2", "AphB"),
    ("71.7.0", "current_l3", "current", "Strom L3", "Current L3", "AphC"),
    ("14.7.0", "frequency", "frequency", "Netzfrequenz", "Grid frequency", "Hz"),
)

N = len(ROWS)
CODES = tuple(r[0] for r in ROWS)
# SML unit code expected per slot (values in another unit are not taken).
SML_UNIT = tuple(KINDS[r[2]][2] for r in ROWS)


def _cde(code):
    c, d, e = code.split(".")
    return (int(c) << 16) | (int(d) << 8) | int(e)


# C.D.E packed into one small int -> slot; the decoders look codes up without building strings.
SLOT = {}
for _i in range(N):
    SLOT[_cde(ROWS[_i][0])] = _i
_BY_CODE = {}
for _i in range(N):
    _BY_CODE[ROWS[_i][0]] = _i
del _i


def slot(code):
    """Slot index of a short code such as "1.8.0", or -1."""
    return _BY_CODE.get(code, -1)


def lookup(code):
    """Full metadata dict of a short code, or None; built on demand, not kept."""
    i = _BY_CODE.get(code, -1)
    if i < 0:
        return None
    r = ROWS[i]
    k = KINDS[r[2]]
    return {
        "code": r[0], "key": r[1], "kind": r[2], "label_de": r[3], "label_en": r[4],
        "unit": k[0], "base_unit": k[1], "sml_unit": k[2],
        "ha_device_class": k[3], "ha_state_class": k[4], "sunspec": r[5],
    }


def kind(code):
    """Kind of a short code ("energy", "power", ...) or None."""
    i = _BY_CODE.get(code, -1)
    return ROWS[i][2] if i >= 0 else None


def unit(code):
    """Edge unit of a short code ("kWh", "W", ...) or None."""
    i = _BY_CODE.get(code, -1)
    return KINDS[ROWS[i][2]][0] if i >= 0 else None


def label(code, lang="en"):
    """Label of a short code in "de" or "en" (anything else falls back to English)."""
    i = _BY_CODE.get(code, -1)
    if i < 0:
        return code
    return ROWS[i][3] if lang == "de" else ROWS[i][4]
