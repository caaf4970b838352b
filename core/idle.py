"""How the main loop waits between two cycles: one door, so the host runtime can put its own wait behind it."""

import time

IDLE_SLEEP_S = 0.005     # yields the CPU between cycles; the UART buffer covers 4 s at 9600 baud


def wait():
    """Between two supervisor cycles on the device: a short sleep (the loop polls every timer it has)."""
    time.sleep(IDLE_SLEEP_S)
