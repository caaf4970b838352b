"""Stand-in for board on the ESP32-S3-DevKitC-1 N8R8: the pins the firmware names."""

from microcontroller import Pin

board_id = "espressif_esp32s3_devkitc_1_n8r8"

for _n in range(49):
    globals()["IO%d" % _n] = Pin("IO%d" % _n)
NEOPIXEL = globals()["IO48"]
BUTTON = globals()["IO0"]
TX = globals()["IO43"]
RX = globals()["IO44"]
