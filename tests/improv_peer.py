"""The protocol layer of py-improv-ble-client (PyPI), an Improv implementation nobody here wrote.

Its package __init__ and errors module import bleak (a BLE stack this machine does not need): the protocol module
is loaded on its own, with the one name it takes from errors.
"""

import importlib.metadata
import importlib.util
import os
import sys
import types


def load():
    """improv_ble_client.protocol as a module."""
    if "improv_ble_client.protocol" in sys.modules:
        return sys.modules["improv_ble_client.protocol"]
    path = str(importlib.metadata.distribution("py-improv-ble-client").locate_file("improv_ble_client/protocol.py"))
    pkg = types.ModuleType("improv_ble_client")
    pkg.__path__ = [os.path.dirname(path)]
    errors = types.ModuleType("improv_ble_client.errors")

    class InvalidCommand(Exception):
        """Raised by the protocol module for a malformed frame."""

    errors.InvalidCommand = InvalidCommand
    sys.modules["improv_ble_client"] = pkg
    sys.modules["improv_ble_client.errors"] = errors
    spec = importlib.util.spec_from_file_location("improv_ble_client.protocol", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["improv_ble_client.protocol"] = mod
    spec.loader.exec_module(mod)
    return mod


def ad_structures(data):
    """{AD type: [payload, ...]} of an advertising packet."""
    out = {}
    i = 0
    while i < len(data):
        n = data[i]
        if n == 0:
            break
        out.setdefault(data[i + 1], []).append(bytes(data[i + 2:i + 1 + n]))
        i += 1 + n
    return out
