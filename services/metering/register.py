"""Published energy totals that stay continuous through ctRatio changes: raw delta x the ratio in force."""

from core.durable_file import stored
from core.json_store import read_json_file, write_atomic
from meter.decimal import sub

# Why a register and not raw x ctRatio: a total published as raw x ctRatio jumps by raw x (new - old) at a change.
# Raised, that jump is booked as consumption by every consumer of deltas (history, Home Assistant's Energy
# dashboard, SunSpec readers); lowered, the total falls and every total_increasing consumer reads a meter reset.
# So each energy code counts on from where it stood: total = base + (raw - raw_base) x ratio. A device whose
# ratio never changed has no bases, and its totals are exactly raw x ratio. See docs/history.md "ctRatio".


def scale(m, e, tenths):
    """(m, e) x tenths / 10, exact and in the shape the pipeline always used (no digit added for whole ratios)."""
    if tenths % 10:
        return m * tenths, e - 1
    return m * (tenths // 10), e


def _add(m1, e1, m2, e2):
    return sub(m1, e1, -m2, e2)


class EnergyRegister:
    """path: JSON file on the drive (rewritten only when a ratio changes or a meter is replaced) or None for RAM
    only; log: core.log.Log or None. Per energy code: [ratio tenths, base m, base e, raw base m, raw base e].
    Changes set `dirty`; the owner calls save() (the pipeline does at its next poll, and retries a refused write)."""

    def __init__(self, path=None, log=None):
        self.path = path
        self.log = log
        self.default = None   # ratio (tenths) of every code without an entry; its bases are zero
        self.codes = {}
        self.dirty = False
        self.load_errors = 0
        self.write_errors = 0

    def open(self, tenths):
        """Read the file; a missing one is written with the ratio in force now, so a change made while the device
        is off (settings.json edited over USB) is seen at the next start instead of jumping the totals."""
        doc = None
        if self.path is not None:
            try:
                doc = read_json_file(self.path)
            except (OSError, ValueError) as exc:
                self._warn("energy register %s unreadable, totals restart at raw x ctRatio: %s", self.path, exc)
                self.load_errors += 1
        if doc is None and self.path is not None and stored(self.path):
            doc = False  # there, but neither it nor a copy parses: damaged, not missing
        if doc is not None and not self._take(doc):
            self._warn("energy register %s damaged, totals restart at raw x ctRatio", self.path)
            self.load_errors += 1
            doc = None
        if doc is None:
            self.default = tenths
            self.codes = {}
            self.dirty = True
            self.save()

    def _take(self, doc):
        """Adopt a stored document; False (nothing adopted) when any part of it is not what save() writes."""
        if not isinstance(doc, dict):
            return False
        default = doc.get("ct")
        codes = doc.get("codes")
        if not _ratio(default) or not isinstance(codes, dict):
            return False
        out = {}
        for code in codes:
            v = codes[code]
            if not isinstance(v, list) or len(v) != 5 or not _ratio(v[0]):
                return False
            for x in v[1:]:
                if isinstance(x, bool) or not isinstance(x, int):
                    return False
            out[code] = v
        self.default = default
        self.codes = out
        return True

    def total(self, code, m, e, tenths):
        """Published total of one energy code for a raw (filtered) value under the ratio in force (tenths)."""
        if self.default is None:
            self.default = tenths  # not opened (a pipeline without start(): tests, RAM only)
        v = self.codes.get(code)
        if v is None:
            if tenths == self.default:
                return scale(m, e, tenths)
            v = [self.default, 0, 0, 0, 0]
        elif sub(m, e, v[3], v[4])[0] < 0:
            # Below its raw base: a reset or replaced counter the pipeline took as its own. Its bases do not fit it.
            self.codes[code] = [tenths, 0, 0, 0, 0]
            self.dirty = True
            return scale(m, e, tenths)
        elif v[0] == tenths:
            dm, de = sub(m, e, v[3], v[4])
            dm, de = scale(dm, de, tenths)
            return _add(v[1], v[2], dm, de)
        # The ratio changed before this code was seen again since the start: it counts on from here.
        bm, be = self._at(v, m, e)
        self.codes[code] = [tenths, bm, be, m, e]
        self.dirty = True
        return bm, be

    def _at(self, v, m, e):
        """Total of raw (m, e) under the entry v's own ratio and bases."""
        dm, de = sub(m, e, v[3], v[4])
        dm, de = scale(dm, de, v[0])
        return _add(v[1], v[2], dm, de)

    def change(self, old, tenths, last_raw):
        """The ratio went from old to tenths: each code with a last raw value (m, e) counts on from the total it had
        there, so the energy since that reading is raw delta x the new ratio. Codes not seen since the start follow
        at their next reading (total())."""
        if self.default is None:
            self.default = old  # not opened (RAM only): every code so far was counted at the old ratio
        for code in last_raw:
            m, e = last_raw[code]
            v = self.codes.get(code)
            if v is None:
                v = [self.default, 0, 0, 0, 0]
            if v[0] == tenths:
                continue
            bm, be = self._at(v, m, e)
            self.codes[code] = [tenths, bm, be, m, e]
            self.dirty = True

    def reset(self, tenths):
        """Another meter or a counter reset: totals are raw x ratio again (the old bases would not fit it)."""
        if self.default is None or self.codes or self.default != tenths:
            self.codes = {}
            self.default = tenths
            self.dirty = True

    def save(self):
        """Write the register when it changed; a refused write (drive owned by USB) is retried at the next save."""
        if not self.dirty:
            return True
        if self.path is None:
            self.dirty = False
            return True
        try:
            write_atomic(self.path, {"ct": self.default, "codes": self.codes})
        except OSError as exc:
            self.write_errors += 1
            self._warn("energy register %s not written: %s", self.path, exc)
            return False
        self.dirty = False
        return True

    def _warn(self, msg, *args):
        if self.log is not None:
            self.log.log("warning", msg, *args)


def _ratio(v):
    return not isinstance(v, bool) and isinstance(v, int) and 10 <= v <= 100000
