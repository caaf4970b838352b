"""Stand-in for neopixel.NeoPixel: records what is shown and can draw it in the terminal."""

import sys

GRB = "GRB"
RGB = "RGB"
show_in_terminal = False
instances = []


class NeoPixel:
    """NeoPixel(pin, n, *, bpp=3, brightness=1.0, auto_write=True, pixel_order=None)."""

    def __init__(self, pin, n, *, bpp=3, brightness=1.0, auto_write=True, pixel_order=None):
        self.n = n
        self.brightness = brightness
        self.auto_write = auto_write
        self._pixels = [(0, 0, 0)] * n
        self.shown = [(0, 0, 0)] * n  # what the LEDs display after the last show()
        self.show_count = 0
        instances.append(self)

    def __len__(self):
        return self.n

    def __setitem__(self, index, color):
        if isinstance(color, int):
            color = ((color >> 16) & 255, (color >> 8) & 255, color & 255)
        if len(color) != 3 or any(not 0 <= c <= 255 for c in color):
            raise ValueError("color must be (r, g, b) with 0..255")
        self._pixels[index] = tuple(int(c) for c in color)
        if self.auto_write:
            self.show()

    def __getitem__(self, index):
        return self._pixels[index]

    def fill(self, color):
        for i in range(self.n):
            self._pixels[i] = tuple(color)
        if self.auto_write:
            self.show()

    def show(self):
        b = self.brightness
        self.shown = [tuple(int(c * b) for c in p) for p in self._pixels]
        self.show_count += 1
        if show_in_terminal and sys.stdout.isatty():
            r, g, bl = self.shown[0]
            sys.stdout.write("\x1b[s\x1b[1;1H\x1b[48;2;%d;%d;%dm  LED  \x1b[0m\x1b[u" % (r, g, bl))
            sys.stdout.flush()

    def deinit(self):
        pass
