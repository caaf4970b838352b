"""Property tests of core/settings.py: any JSON patch either applies whole or changes nothing, never crashes,
and whatever is accepted is valid again when the document is reloaded."""

import json

from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from core.settings import Settings, SettingsError
from core.settings_check import SCHEMA, check

ZONES = {"Europe/Berlin", "UTC"}
json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-10 ** 6, 10 ** 6),
                      st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=70))
json_value = st.recursive(json_leaf, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                             st.dictionaries(st.text(max_size=8), inner, max_size=3)),
                          max_leaves=8)
keys = st.sampled_from(sorted(SCHEMA) + ["wifi", "wifi.primary", "mqtt", "bogus", "language.installed",
                                         "mqtt.password_set"])


def nest(flat):
    """{"a.b": v} as {"a": {"b": v}} where possible (both spellings are accepted)."""
    out = {}
    for key, value in flat.items():
        node = out
        parts = key.split(".")
        for p in parts[:-1]:
            nxt = node.setdefault(p, {})
            if not isinstance(nxt, dict):
                break
            node = nxt
        else:
            node[parts[-1]] = value
    return out


@hsettings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(keys, json_value, max_size=5), st.booleans())
def test_any_patch_all_or_nothing(flat, nested):
    s = Settings(None, zone_ok=lambda z: z in ZONES)
    before = json.dumps(s.doc, sort_keys=True)
    patch = nest(flat) if nested else flat
    try:
        changed = s.update(patch)
    except SettingsError as exc:
        assert exc.fields and all(isinstance(v, str) for v in exc.fields.values())
        assert json.dumps(s.doc, sort_keys=True) == before
        return
    for key in changed:
        value = s.get(key)
        assert check(key, value, lambda z: z in ZONES)[1] is None, (key, value)
    json.dumps(s.doc)  # still serialisable (no NaN sneaked in is checked by the rules above)


@hsettings(max_examples=200, deadline=None)
@given(st.floats(min_value=0, max_value=20000, allow_nan=False))
def test_ct_ratio_accepts_exactly_the_tenth_steps(x):
    norm, err = check("ctRatio", x, None)
    on_step = abs(x * 10 - round(x * 10)) <= 1e-6
    assert (err is None) == (1 <= x <= 10000 and on_step)
    if err is None:
        assert abs(norm - x) < 1e-6
