"""Running median over the last N exact decimals of one value (N odd, 1 = off), without allocation per sample."""


class Median:
    """Window of up to size mantissas at one exponent; a new exponent restarts the window."""

    def __init__(self, size):
        self.size = size
        self._win = [0] * size
        self._tmp = [0] * size
        self._n = 0
        self._pos = 0
        self._exp = None

    def reset(self):
        self._n = 0
        self._pos = 0
        self._exp = None

    def add(self, m, e):
        """Add a sample; return the median (m, e) of the samples held (lower middle while filling)."""
        if self.size <= 1:
            return m, e
        if e != self._exp:
            self.reset()
            self._exp = e
        self._win[self._pos] = m
        self._pos = (self._pos + 1) % self.size
        if self._n < self.size:
            self._n += 1
        n = self._n
        t = self._tmp
        w = self._win
        # insertion sort of at most 9 values into the scratch list
        for i in range(n):
            v = w[i]
            j = i
            while j and t[j - 1] > v:
                t[j] = t[j - 1]
                j -= 1
            t[j] = v
        return t[(n - 1) // 2], e
