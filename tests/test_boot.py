"""boot.py: the firmware may write CIRCUITPY unless the button is held at reset."""

import os
import runpy

import pytest

import digitalio
import storage

BOOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "boot.py")


@pytest.mark.parametrize("held,readonly", [(False, False), (True, True)])
def test_remount_choice(held, readonly, capsys):
    import board

    digitalio.set_level(board.BUTTON, not held)  # pressed pulls the pin low
    storage.calls.clear()
    try:
        runpy.run_path(BOOT, run_name="__main__")
    finally:
        digitalio._levels.clear()
    assert storage.calls == [("/", readonly, False)]
    assert capsys.readouterr().out == ""   # prints nothing that varies between boots


def test_code_may_write():
    ns = runpy.run_path(BOOT, run_name="not_main")
    assert ns["code_may_write"](False) is True
    assert ns["code_may_write"](True) is False
