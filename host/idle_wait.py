"""The host runtime's wait between two loop cycles (it replaces core.idle.wait): sleep in select() until a socket or
the simulated meter has something, or at most CAP_S; no wait at all while the firmware is busy or behind."""

import select
import time

import _hostenv
import socketpool


class HostIdle:
    """wait() ends each loop cycle on the host. Where the device sleeps 5 ms and polls again (its timers are polled),
    the host sleeps until the next thing due: a socket becomes readable (or writable after a full send buffer), the
    simulated meter's next telegram has arrived, CAP_S passed (the firmware's own timers), or a quarter of the
    watchdog's timeout. It does not wait at all after a cycle in which a socket moved data, nor while the simulated
    clock is behind (--speed: see _hostenv.cycle()); for AWAKE_S after something came in (a request, a download)
    or a cycle that took BUSY_CPU_S it keeps the device's pace (DEVICE_SLEEP_S), so work spread over polls without
    socket traffic (a signature check, a file hash) is not slowed down; a periodic send (MQTT, a multicast) does
    not keep the loop awake. A socket that was ready at the last wait and that the firmware has not touched since
    (it has its reasons: the API asks its listener every 10 ms, a full slot table) wakes nobody again: the loop
    polls again after LEFT_ALONE_S instead.

    watchdog: microcontroller.watchdog (timeout in real seconds, mode) or None; clock: the _hostenv module."""

    CAP_S = 0.1              # longest sleep: timers fire up to this late (bench_host_idle: CPU against the cap)
    DEVICE_SLEEP_S = 0.005   # the device's own pause between cycles (core/idle.py)
    LEFT_ALONE_S = 0.002     # a ready socket the firmware leaves for now (the API asks its listener every 10 ms)
    AWAKE_S = 1.0            # device pace for this long after the last activity
    METER_LATE_S = 0.2       # device pace for this long while a telegram that arrived waits to be read
    BUSY_CPU_S = 0.003       # a cycle that took this much CPU did work, as activity does

    def __init__(self, watchdog=None, clock=_hostenv):
        self.watchdog = watchdog
        self.clock = clock
        self.cycles = 0          # waits, i.e. loop cycles
        self.sleeps = 0          # waits that slept in select()
        self.socket_wakes = 0    # sleeps ended early by a ready socket or the meter's port
        self.behind_cycles = 0   # cycles that started behind the nominal simulated clock
        self._activity = socketpool._activity
        self._inbound = socketpool._inbound
        self._awake_until = 0.0
        self._behind = False
        self._ready = {}         # socket -> (reads, writes) when the last select() found it ready
        self._serial_ready = False
        self._due = None         # the meter's due time at the last wait
        self._cpu = time.thread_time()

    def timeout(self, now):
        """Seconds (real) to sleep now, before looking at the sockets."""
        if self._behind:
            return 0.0
        t = self.DEVICE_SLEEP_S if now < self._awake_until else self.CAP_S
        source = _hostenv.meter_source
        due = getattr(source, "next_due_s", None)
        due = due() if due is not None else None
        if due is not None:
            left = (due - self.clock.sim_seconds()) / self.clock.speed
            if left > 0 or due != self._due:
                t = min(t, max(0.0, left))
            elif left > -self.METER_LATE_S:    # arrived, not read yet: the IR head polls every 50 ms (simulated)
                t = min(t, self.DEVICE_SLEEP_S)
            # else: nobody reads the UART (the meter feature off or failed): it wakes no one
        self._due = due
        wd = self.watchdog
        if wd is not None and wd.mode is not None and wd.timeout > 0:
            t = min(t, wd.timeout / 4.0)
        return t

    def wait(self):
        """End a loop cycle: sleep while there is nothing to do, then start the next cycle of the simulated clock."""
        self.cycles += 1
        now = time.monotonic()
        cpu = time.thread_time()
        moved = socketpool._activity != self._activity
        came_in = socketpool._inbound != self._inbound
        self._activity, self._inbound = socketpool._activity, socketpool._inbound
        if came_in or cpu - self._cpu >= self.BUSY_CPU_S:
            self._awake_until = now + self.AWAKE_S
        t = 0.0 if moved else self.timeout(now)
        if t > 0:
            self._select(t)
        self._cpu = time.thread_time()
        behind = self.clock.cycle() > 1e-3
        if behind:
            self.behind_cycles += 1
        self._behind = behind

    def _select(self, t):
        rlist, wlist, owners, left_alone = [], [], {}, {}
        ready = self._ready
        for sock in list(socketpool._open):
            fd = sock._fd
            if fd < 0:
                continue
            seen = ready.get(sock)
            if seen is not None and seen == (sock._reads, sock._writes):
                left_alone[sock] = seen           # ready, and left alone by the firmware: poll again soon
                t = min(t, self.LEFT_ALONE_S)
                continue
            owners[fd] = sock
            rlist.append(fd)
            if sock._want_write or sock._connecting == "pending":
                wlist.append(fd)
        serial = None
        fileno = getattr(_hostenv.meter_source, "fileno", None)
        if fileno is not None:
            if self._serial_ready:    # bytes trickle in at 960/s: after a wake, read them at the device's pace
                t = min(t, self.DEVICE_SLEEP_S)
            else:
                serial = fileno()
                rlist.append(serial)
        self.sleeps += 1
        try:
            r, w, _x = select.select(rlist, wlist, [], t)
        except (OSError, ValueError):     # a socket closed meanwhile (a thread of the ssl stand-in, a reset)
            time.sleep(min(t, self.DEVICE_SLEEP_S))
            r, w = [], []
        self._serial_ready = serial is not None and serial in r
        for fd in set(r) | set(w):
            sock = owners.get(fd)
            if sock is not None:
                left_alone[sock] = (sock._reads, sock._writes)
        self._ready = left_alone
        if r or w:
            self.socket_wakes += 1

    def describe(self):
        """Counters for benches and tests."""
        return {"cycles": self.cycles, "sleeps": self.sleeps, "socket_wakes": self.socket_wakes,
                "behind_cycles": self.behind_cycles}
