"""Boot: make CIRCUITPY writable for the firmware unless the button is held at reset (then USB keeps it)."""

import board
import digitalio
import storage


def code_may_write(button_pressed):
    """The firmware owns the drive except when the user holds the button to recover it over USB."""
    return not button_pressed


def main():
    pin = digitalio.DigitalInOut(getattr(board, "BUTTON", board.IO0))
    pin.switch_to_input(pull=digitalio.Pull.UP)
    pressed = not pin.value  # the BOOT button pulls the pin low
    pin.deinit()
    # readonly=False means the code may write and USB sees the drive read-only.
    storage.remount("/", readonly=not code_may_write(pressed))


main()
