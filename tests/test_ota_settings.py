"""The update source setting ota.url: a documented default, http(s) URLs only, empty turns checks off."""

import json

import pytest

from core.settings import DEFAULTS, Settings, SettingsError


def test_default_is_a_reserved_name_that_never_resolves():
    assert DEFAULTS["ota"]["url"].startswith("http://") and ".invalid/" in DEFAULTS["ota"]["url"]
    assert Settings(None).get("ota.url") == DEFAULTS["ota"]["url"]


@pytest.mark.parametrize("url", ["http://192.168.1.5:8000/ota/manifest.json", "https://updates.example.org/m.json",
                                 ""])
def test_good_urls(url):
    s = Settings(None)
    s.update({"ota": {"url": url}})
    assert s.get("ota.url") == url


@pytest.mark.parametrize("url", ["ftp://h/m.json", "http://", "http://h:70000/m", "http://a b/m", 5, None,
                                 "http://h/" + "x" * 300])
def test_bad_urls_are_rejected_and_nothing_changes(url):
    s = Settings(None)
    before = json.dumps(s.doc, sort_keys=True)
    with pytest.raises(SettingsError) as e:
        s.update({"ota": {"url": url}})
    assert "ota.url" in e.value.fields
    assert json.dumps(s.doc, sort_keys=True) == before
