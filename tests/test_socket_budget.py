"""The socket budget (core/sockbudget.py): HTTP keeps its listener and two clients; the settings refuse what cannot
fit; every feature's socket asks first (issue 26, finding 1)."""

import pytest

from core import sockbudget
from core.settings import Settings, SettingsError


def _every_feature(ports=(1010, 2220), ap=True):
    return {"mqtt": {"enable": True, "host": "broker.lan"}, "modbus": {"enable": True},
            "emulation": {"shelly": True, "shellyUdpPort": ports[0], "shellyUdpPort2": ports[1], "sma": True},
            "accessPoint": {"enable": ap}}


def test_a_combination_that_leaves_http_short_is_refused_naming_what_to_turn_off():
    s = Settings()
    before = s.public()
    with pytest.raises(SettingsError) as err:
        s.update(_every_feature())
    fields = err.value.fields
    assert list(fields) == ["accessPoint.enable"]                  # the last of the request's, in a fixed order
    msg = fields["accessPoint.enable"]
    assert "socket budget" in msg and "HTTP API keeps 3" in msg and "turn off accessPoint.enable" in msg
    assert "emulation.shellyUdpPort2 (set 0)" in msg and "5 of the 8" in msg   # SMA sends through the Shelly UDP socket
    assert s.public() == before                                    # nothing of it applied


def test_turning_one_more_on_names_that_one():
    s = Settings()
    s.update({"mqtt": {"enable": True, "host": "b.lan"}, "modbus": {"enable": True},
              "emulation": {"shelly": True, "shellyUdpPort": 1010, "shellyUdpPort2": 0}})
    with pytest.raises(SettingsError) as err:
        s.update({"emulation": {"shellyUdpPort2": 2220}, "accessPoint": {"enable": True}})
    assert list(err.value.fields) == ["accessPoint.enable"]       # the last of the request's, in a fixed order
    assert s.get("accessPoint.enable") is False and s.get("emulation.shellyUdpPort2") == 0


def test_sma_holds_a_socket_of_its_own_only_without_a_shelly_udp_port():
    alone = {"emulation.sma": True}.get
    assert [k for k, _n, _w in sockbudget.standing(alone)] == ["emulation.sma"]
    shared = {"emulation.sma": True, "emulation.shelly": True, "emulation.shellyUdpPort": 1010}.get
    assert [k for k, _n, _w in sockbudget.standing(shared)] == ["emulation.shellyUdpPort"]
    no_port = {"emulation.sma": True, "emulation.shelly": True, "emulation.shellyUdpPort": 0}.get
    assert [k for k, _n, _w in sockbudget.standing(no_port)] == ["emulation.sma"]


def test_what_fits_is_taken_and_unrelated_changes_are_not_refused():
    s = Settings()
    s.update(_every_feature(ports=(1010, 0), ap=False))            # HTTP 3 + 3 standing (SMA shares) + 2 floating
    assert s.get("emulation.sma") is True
    s.doc["accessPoint"]["enable"] = True                          # a stored document over the budget (older firmware)
    assert s.update({"device_name": "Keller"}) == ["device_name"]  # other changes still go through


def test_the_arithmetic():
    get = {"modbus.enable": True, "emulation.shelly": True, "emulation.shellyUdpPort": 1010,
           "emulation.shellyUdpPort2": 1010}.get                    # one port twice is one socket
    assert [k for k, _n, _w in sockbudget.standing(get)] == ["modbus.enable", "emulation.shellyUdpPort"]
    assert sockbudget.worst_case(get) == 3 + 1 + 2 + 2 + 1       # HTTP, NTP, standing, Modbus clients, WebSocket
    assert sockbudget.problem(get) is None


class _Holder:
    def __init__(self, n):
        self.n = n

    def sockets_held(self):
        return self.n


class _App:
    pass


def test_the_runtime_budget_leaves_http_its_three():
    app = _App()
    app.http = _Holder(1)                       # listener only: two client sockets still to be kept free
    app.modbus = _Holder(1)
    app.mqtt = _Holder(1)
    app.shelly_udp = _Holder(1)
    app.sma = _Holder(1)
    budget = sockbudget.SocketBudget(app)
    assert budget.may_take()                    # 5 held + 1 + HTTP's 2 = 8
    app.modbus.n = 2
    assert not budget.may_take() and budget.refused == 1
    app.http.n = 2                              # a WebSocket being handed over no longer counts as HTTP's
    app.modbus.n = 1
    assert budget.held() == 6
    assert budget.may_take()                   # 6 held + the session, HTTP 2: one free left for its second client
    app.modbus.n = 2
    assert not budget.may_take()
    assert budget.describe() == {"held": 7, "total": 8, "refused": 2, "reclaimed": 0, "lent": 0}


class _Lender(_Holder):
    """Our mDNS responder as the budget sees it: one socket it lends to an NTP round."""

    def lendable(self):
        return self.n == 1

    def lend(self):
        self.n = 0


def test_an_ntp_round_borrows_the_mdns_responders_socket_when_none_other_is_free():
    """Issue 36 finding 6: the responder need not fit beside an NTP round, it lends its socket for the round; only a
    round that borrows (the clock's) gets it, never a Modbus client or a WebSocket session."""
    app = _App()
    app.http = _Holder(3)
    app.mqtt = _Holder(1)
    app.shelly_udp = _Holder(2)
    app.mdns = _Lender(1)
    app.shelly_ws = _Holder(1)                  # Home Assistant's session: 8 held
    budget = sockbudget.SocketBudget(app)
    assert not budget.may_take() and app.mdns.n == 1          # a Modbus client, a session: refused, nothing lent
    assert budget.may_take(borrow=True) and app.mdns.n == 0    # the NTP round: the responder's socket
    assert budget.describe()["lent"] == 1 and budget.refused == 1
    app.clock = _Holder(1)                                     # the round holds it now
    assert not budget.may_take(borrow=True) and budget.refused == 2   # nothing more to lend


def test_the_responder_fits_where_only_an_ntp_round_was_in_its_way():
    mqtt_shelly = {"mqtt.enable": True, "emulation.shelly": True, "emulation.shellyUdpPort": 1010,
                   "emulation.shellyUdpPort2": 2220, "emulation.sma": True}.get
    assert sockbudget.worst_case(mqtt_shelly) == 8 and sockbudget.responder_fits(mqtt_shelly)
    modbus_shelly = {"modbus.enable": True, "emulation.shelly": True, "emulation.shellyUdpPort": 1010}.get
    assert sockbudget.worst_case(modbus_shelly) == 9 and not sockbudget.responder_fits(modbus_shelly)


def test_which_combinations_cost_the_txt_records_as_the_readme_says():
    """README "mDNS": Modbus with a Shelly UDP port; Modbus with two more of MQTT, SMA, the Shelly emulation without a
    UDP port and the always-on access point; MQTT with both Shelly UDP ports and the always-on access point."""
    import itertools

    def costs(mqtt, modbus, shelly, ports, sma, ap):
        if modbus and shelly and ports:
            return True
        if modbus and (mqtt + sma + (shelly and not ports) + ap) >= 2:
            return True
        return bool(mqtt and shelly and ports == 2 and ap)

    seen = 0
    for mqtt, modbus, shelly, ports, sma, ap in itertools.product((0, 1), (0, 1), (0, 1), (0, 1, 2), (0, 1), (0, 1)):
        if ports and not shelly:
            continue
        doc = {"mqtt.enable": bool(mqtt), "modbus.enable": bool(modbus), "emulation.shelly": bool(shelly),
               "emulation.sma": bool(sma), "accessPoint.enable": bool(ap),
               "emulation.shellyUdpPort": 1010 if ports >= 1 else 0,
               "emulation.shellyUdpPort2": 2220 if ports == 2 else 0}
        if sockbudget.problem(doc.get) is not None:
            continue                               # not allowed by the settings at all
        seen += 1
        assert sockbudget.responder_fits(doc.get) is not costs(mqtt, modbus, shelly, ports, sma, ap), doc
    assert seen == 62
