"""The HTTP request budgets' sliding window, shared between known clients (each a floor) and strangers (one pool)."""

from adafruit_ticks import ticks_diff
from micropython import const

from core.elapsed import fresh

# A row of the address table (a list reused in place: a new address allocates nothing).
_WHO = const(0)       # address, None for a free row
_HEARD = const(1)     # ticks of its last request (allowed or not)
_HELD = const(2)      # its stamps in the window
_REFUSED = const(3)   # ticks of its last refusal, or None
_SINCE = const(4)     # ticks its polite run began (no gap over seen_ms, never over polite asks in a window)
_LEVEL = const(5)     # STRANGER, LENT, EARNED or TOKEN (below)
_EPOCH = const(6)     # ticks its current ask count began
_ASKS = const(7)      # its requests (allowed or not) since _EPOCH
_NEED = const(8)      # its requests in the previous count: what it showed it needs in a window

# What an address is to a budget (a row's level; allow's known): a stranger; known to another budget of the caller's
# (lent: it loses the floor here when it floods here, and gets it back with its next request while the other budget
# still knows it); known here (earned: it asked politely for earn_ms; lost when it floods); vouched for by a valid
# token (lost only with silence). Only EARNED and TOKEN count for known(), so budgets that lend each other their
# known addresses cannot keep one known between them after it lost its place where it earned it.
STRANGER = const(0)
LENT = const(1)
EARNED = const(2)
TOKEN = const(3)


class RateLimiter:
    """Sliding window: at most limit requests in any window_ms, device-wide (a FIFO ring of the accepted requests'
    ticks and who sent them), split between the known clients and the strangers.

    Known clients are the addresses that asked politely for earn_ms (no gap longer than seen_ms, never more than
    polite requests in a window: Home Assistant, a battery, the owner's page, asking for a minute) or that the
    caller vouches for (known=True: a valid token). Every other address is a stranger, and all strangers together
    are one group: the pool. The groups about (known clients heard within seen_ms, the pool if a stranger was)
    split the window evenly: each known client is sure of limit // groups requests per window, and so is the pool
    as a whole, however many addresses it has. So forty flooding addresses weigh what one does, and never take the
    answers of the few known clients. What a group takes beyond its floor may not eat into what the others showed
    they need and have not used yet; one below its floor that finds the window full takes the place of the oldest
    stamp of the group most above its own (_reclaim). A group alone has all of the window.

    The address table is fixed (rows lists, reused in place). A stranger takes a free row or the row of the least
    valuable stranger (one not heard within seen_ms, else the one whose polite run is youngest: a flooder's run
    restarts with every window it floods, so flooders take each other's rows and a polite stranger keeps its own
    and earns its place); a known row is never given to a stranger, and a stranger without a row is counted in the
    pool all the same. A known row is forgotten after keep_ms of silence, and loses its place (a stranger again)
    when it asks more than polite times in a window; a vouched-for row only by silence.

    A stamp leaves the ring as soon as it is window_ms old or appears to lie in the future, and every other stamp
    is dropped or refreshed well within keep_ms; prune() runs in every poll, so no stamp lives long enough for the
    tick wrap (ticks_diff is only meaningful within +-2**28 ms) to make it look recent again.
    """

    rows = 16           # addresses remembered: a home LAN's clients and a few strangers
    seen_ms = 60000     # a client that asked this recently is "about" (Home Assistant polls every 5-30 s)
    earn_ms = 60000     # asking politely this long makes an address known
    keep_ms = 3600000   # a known address is remembered this long after its last request
    known_max = 6       # earned rows at most (tokens aside): the first to earn a place keep it, so addresses that
    #                     ask politely for a minute and then flood cannot thin the floors of the clients known before

    def __init__(self, limit=25, window_ms=10000):
        self.limit = limit
        self.window_ms = window_ms
        self.polite = limit      # more requests than this in a window (all of it) end a polite run
        self._times = [0] * limit
        self._who = [None] * limit
        self._head = 0    # index of the oldest stamp
        self._count = 0
        self._pool = 0            # stamps of strangers in the window
        self._pool_heard = None   # ticks of the last request of a stranger
        self._pool_refused = None
        self._pool_epoch = None
        self._pool_asks = 0
        self._pool_need = 0
        self._rows = [[None, 0, 0, None, 0, 0, 0, 0, 0] for _ in range(self.rows)]

    # --- the window ----------------------------------------------------------------------------------------------

    def prune(self, now):
        """Drop the stamps that left the window (or look like the future: stale beyond the wrap), and the rows and
        marks that aged out."""
        while self._count:
            if fresh(self._times[self._head], now, self.window_ms):
                break
            self._drop_stamp(self._head)
            self._head = (self._head + 1) % self.limit
            self._count -= 1
        for r in self._rows:
            if r[_WHO] is None:
                continue
            if not fresh(r[_HEARD], now, self.keep_ms if r[_LEVEL] else self.seen_ms) and r[_HELD] <= 0:
                r[_WHO] = None
                continue
            if r[_REFUSED] is not None and not fresh(r[_REFUSED], now, self.window_ms):
                r[_REFUSED] = None
            if not fresh(r[_EPOCH], now, self.window_ms):
                self._roll(r, now)
        if self._pool_heard is not None and not fresh(self._pool_heard, now, self.seen_ms):
            self._pool_heard = None
        if self._pool_refused is not None and not fresh(self._pool_refused, now, self.window_ms):
            self._pool_refused = None
        if self._pool_epoch is not None and not fresh(self._pool_epoch, now, self.window_ms):
            self._pool_epoch = None
            self._pool_need = self._pool_asks
            self._pool_asks = 0

    def _roll(self, r, now):
        """Start r's next ask count (the one before is what it needs in a window)."""
        r[_NEED] = r[_ASKS] if fresh(r[_EPOCH], now, 2 * self.window_ms) else 0
        r[_ASKS] = 0
        r[_EPOCH] = now

    def _drop_stamp(self, at):
        """The stamp at ring index at leaves: its owner's count (and the pool's, for a stranger's) goes down."""
        r = self._row(self._who[at])
        if r is not None and r[_HELD] > 0:
            r[_HELD] -= 1
        if (r is None or not r[_LEVEL]) and self._pool > 0:
            self._pool -= 1
        self._who[at] = None

    def held(self, who):
        """Requests of who in the current window."""
        n = 0
        for i in range(self._count):
            if self._who[(self._head + i) % self.limit] == who:
                n += 1
        return n

    def used(self):
        """Requests recorded in the current window."""
        return self._count

    # --- the table -----------------------------------------------------------------------------------------------

    def _row(self, who):
        if who is None:
            return None
        for r in self._rows:
            if r[_WHO] == who:
                return r
        return None

    def known(self, who):
        """True for an address this budget knows by itself (earned here, or a token); allocates nothing."""
        r = self._row(who)
        return r is not None and r[_LEVEL] >= EARNED

    def _place(self, who, now, vouched):
        """A row for who (a free one or a stranger's; for an address vouched for also a lower level's, then a token
        row not about), or None: who is then a stranger without a row."""
        best = None
        b_level = b_about = b_run = 0
        for r in self._rows:
            if r[_WHO] is None:
                best = r
                break
            level = r[_LEVEL]
            if level and not vouched:
                continue
            about = 1 if fresh(r[_HEARD], now, self.seen_ms) else 0
            if level == TOKEN and about:
                continue
            # the first to give way: the lowest level, then not about, then the youngest polite run
            run = ticks_diff(now, r[_SINCE])
            if run < 0:
                run = 1 << 28
            if best is None or level < b_level or (level == b_level and (about < b_about or
                                                                         (about == b_about and run < b_run))):
                best, b_level, b_about, b_run = r, level, about, run
        if best is None:
            return None
        if best[_WHO] is not None and best[_LEVEL]:
            self._pool += best[_HELD]      # its stamps become a stranger's
        best[_WHO] = who
        best[_HEARD] = now
        best[_HELD] = self.held(who)       # its stamps still in the window, if it had a row before
        best[_REFUSED] = None
        best[_SINCE] = now
        best[_LEVEL] = STRANGER
        best[_EPOCH] = now
        best[_ASKS] = 0
        best[_NEED] = 0
        return best

    def _promote(self, r, level):
        """r becomes known: its stamps and its asks leave the pool (which is no longer about if they were all)."""
        if not r[_LEVEL]:
            self._pool -= r[_HELD]
            self._pool_asks -= min(self._pool_asks, r[_ASKS])
            self._pool_need -= min(self._pool_need, r[_NEED])
            if self._pool <= 0 and self._pool_asks <= 0 and self._pool_need <= 0:
                self._pool_heard = None
        r[_LEVEL] = level

    def _note(self, r, now, known):
        """r asks now: its polite run, its ask count, its level."""
        if not fresh(r[_HEARD], now, self.seen_ms):
            r[_SINCE] = now            # a gap: the run begins again (a known row stays known, for keep_ms)
        r[_HEARD] = now
        if not fresh(r[_EPOCH], now, self.window_ms):
            self._roll(r, now)
        r[_ASKS] += 1
        if r[_ASKS] > self.polite:
            r[_SINCE] = now
            if r[_LEVEL] != TOKEN and r[_LEVEL] != STRANGER:   # flooding: a stranger again
                r[_LEVEL] = STRANGER
                self._pool += r[_HELD]
        elif r[_LEVEL] < EARNED and ticks_diff(now, r[_SINCE]) >= self.earn_ms:
            r[_SINCE] = now            # with every earned place taken, it may try again after another earn_ms
            n = 0
            for e in self._rows:
                if e[_WHO] is not None and e[_LEVEL] == EARNED:
                    n += 1
            if n < self.known_max:
                self._promote(r, EARNED)
        if known > r[_LEVEL]:
            self._promote(r, known)

    # --- the decision --------------------------------------------------------------------------------------------

    def allow(self, now, who=None, known=STRANGER):
        """Record and allow a request of address who (known: what the caller knows of it, TOKEN for a valid token,
        LENT when another budget knows it), or refuse it (a refused request is not recorded)."""
        self.prune(now)
        r = None
        if who is not None:
            r = self._row(who)
            if r is None:
                r = self._place(who, now, known > STRANGER)
            if r is not None:
                self._note(r, now, known)
        mine = r if r is not None and r[_LEVEL] else None     # None: the pool
        if mine is None:
            self._pool_heard = now
            if self._pool_epoch is None:
                self._pool_epoch = now
            self._pool_asks += 1
        if not self._may(mine, now):
            if r is not None:
                r[_REFUSED] = now
            if mine is None:
                self._pool_refused = now
            return False
        at = (self._head + self._count) % self.limit
        self._times[at] = now
        self._who[at] = who
        self._count += 1
        if r is not None:
            r[_HELD] += 1
        if mine is None:
            self._pool += 1
        return True

    def _may(self, mine, now):
        """Whether mine (a known row, or None for the pool) may take one more stamp: below its floor (taking the
        place of the heaviest group's oldest stamp in a full window), or beyond it as far as what the other groups
        showed they need and have not used leaves room."""
        groups = 1 if self._pool_heard is not None else 0
        for r in self._rows:
            if r[_WHO] is not None and r[_LEVEL] and (r is mine or fresh(r[_HEARD], now, self.seen_ms)):
                groups += 1
        if groups <= 1:
            return self._count < self.limit
        share = self.limit // groups
        have = mine[_HELD] if mine is not None else self._pool
        if self._count >= self.limit:
            return have < share and self._reclaim(mine, now, share)
        if have < share:
            return True
        unused = 0
        for r in self._rows:
            if r is not mine and r[_WHO] is not None and r[_LEVEL] and fresh(r[_HEARD], now, self.seen_ms):
                # What it showed it needs in a window and has not used, at least its next request while it asks
                # at all: a steady pace counts one more or less in a window that does not align with the count.
                need = max(r[_NEED], r[_ASKS])
                held = r[_HELD]
                if need > 0 and held < share:
                    unused += min(share, need) - held if held < need else 1
        if mine is not None and self._pool_heard is not None:
            need = min(share, max(self._pool_need, self._pool_asks))
            if self._pool < need:
                unused += need - self._pool
        return self._count + 1 + unused <= self.limit

    def _reclaim(self, mine, now, share):
        """The window is full and mine is below its floor: the group most above its own floor gives up its oldest
        stamp. False when nobody is above. The window then counts one request fewer than were served: bounded by
        the floors, so at most limit more per window however the clients come and go."""
        worst = None
        most = share
        if mine is not None and self._pool > most:
            most = self._pool           # the pool's stamps (worst stays None)
        for r in self._rows:
            if r is not mine and r[_WHO] is not None and r[_LEVEL] and r[_HELD] > most:
                worst, most = r, r[_HELD]
        if worst is None and (mine is None or self._pool <= share):
            return False
        for i in range(self._count):
            at = (self._head + i) % self.limit
            who = self._who[at]
            if worst is not None:
                if who != worst[_WHO]:
                    continue
            elif self.known(who):
                continue
            self._drop_stamp(at)
            for j in range(i, self._count - 1):     # close the gap: the ring stays oldest-first
                a = (self._head + j) % self.limit
                b = (a + 1) % self.limit
                self._times[a] = self._times[b]
                self._who[a] = self._who[b]
            self._who[(self._head + self._count - 1) % self.limit] = None
            self._count -= 1
            return True
        return False

    def flooding(self, who, now, known_elsewhere=False):
        """True when who was refused within the window, or is a stranger here (and nowhere known) while the pool
        was refused within the window (allocates nothing)."""
        r = self._row(who)
        if r is not None and r[_REFUSED] is not None and fresh(r[_REFUSED], now, self.window_ms):
            return True
        if known_elsewhere or (r is not None and r[_LEVEL]):
            return False
        return self._pool_refused is not None and fresh(self._pool_refused, now, self.window_ms)
