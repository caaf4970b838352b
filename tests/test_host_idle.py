"""The host runtime's loop: it sleeps until a socket or the meter has something (an idle host barely runs), and its
simulated clock never leaps past the firmware at --speed (a stopped or slow PC slows the simulation, readings stay
fresh). host/idle_wait.py, host/cp/_hostenv.py (clamp, cycle), core/idle.py."""

import signal
import socket
import threading
import time

import pytest

import _hostenv
import socketpool
from host.idle_wait import HostIdle
from tests.hostproc import HostProcess, free_port


def _info_value(info, section, name):
    for entry in info[section]:
        if entry["name"] == name:
            return entry["value"]
    raise KeyError(name)


# ---------------------------------------------------------------- the wait, in this process


@pytest.fixture
def listener():
    """A listening socketpool stand-in socket on 127.0.0.1 (closed after the test)."""
    pool = socketpool.SocketPool(None)
    sock = pool.socket()
    sock.bind(("127.0.0.1", free_port()))
    sock.listen(4)
    sock.setblocking(False)
    yield sock, sock._sock.getsockname()[1]
    sock.close()


@pytest.fixture
def no_meter():
    saved = _hostenv.meter_source
    _hostenv.meter_source = None
    yield
    _hostenv.meter_source = saved


def _waiter(cap):
    w = HostIdle()
    w.CAP_S = cap
    return w


def test_the_wait_ends_when_a_socket_becomes_readable(listener, no_meter):
    sock, port = listener
    w = _waiter(cap=60.0)      # nothing else would end this wait for a minute
    peer = socket.socket()
    timer = threading.Timer(0.2, peer.connect, (("127.0.0.1", port),))
    timer.start()
    try:
        t0 = time.monotonic()
        w.wait()
        assert time.monotonic() - t0 < 30
        assert w.describe()["socket_wakes"] == 1 and w.describe()["sleeps"] == 1
    finally:
        timer.join()
        peer.close()


def test_no_wait_after_a_cycle_that_moved_data(listener, no_meter):
    sock, port = listener
    w = _waiter(cap=60.0)
    peer = socket.create_connection(("127.0.0.1", port))
    try:
        conn, _addr = sock.accept()          # the firmware's cycle accepted a client
        conn.close()
        w.wait()
        assert w.describe()["sleeps"] == 0   # straight into the next cycle
    finally:
        peer.close()


def test_a_ready_socket_the_firmware_leaves_alone_wakes_the_loop_once(listener, no_meter):
    sock, port = listener
    w = _waiter(cap=60.0)
    peer = socket.create_connection(("127.0.0.1", port))
    try:
        w.wait()                             # woken by the newcomer
        t0 = time.monotonic()
        for _ in range(5):                   # the firmware does not accept it yet (its own rate, a full table)
            w.wait()
        assert time.monotonic() - t0 < 30    # polled again at a short pace, never the full cap
        assert w.describe()["socket_wakes"] == 1 and w.describe()["sleeps"] == 6
        conn, _addr = sock.accept()          # once the firmware took it, a new arrival wakes the loop again
        conn.close()
    finally:
        peer.close()


def test_the_wait_ends_when_the_simulated_meter_has_a_telegram(no_meter):
    from host.meter_source import SimMeter

    meter = SimMeter()
    _hostenv.meter_source = meter
    w = _waiter(cap=60.0)
    got = meter.read_available(_hostenv.sim_seconds())   # the firmware reads the UART every cycle
    t0 = time.monotonic()
    for _ in range(4):                                   # a wake when it starts sending, one when it is done
        if b"\x1b\x1b\x1b\x1b\x1a" in got:
            break
        due = meter.next_due_s()
        w.wait()
        assert _hostenv.sim_seconds() >= due - 0.01       # slept until the meter's next bytes were due
        got += meter.read_available(_hostenv.sim_seconds())
    assert got.startswith(b"\x1b\x1b\x1b\x1b\x01\x01\x01\x01") and b"\x1b\x1b\x1b\x1b\x1a" in got
    assert time.monotonic() - t0 < 30                    # not the cap


def test_the_wait_ends_when_a_usb_head_sends(no_meter):
    import os
    import pty

    from host.meter_source import SerialSource

    master, slave = pty.openpty()           # a serial port whose other end is this test
    src = SerialSource(os.ttyname(slave))
    _hostenv.meter_source = src
    timer = threading.Timer(0.2, os.write, (master, b"\x1b\x1b\x1b\x1b\x01\x01\x01\x01"))
    try:
        w = _waiter(cap=60.0)
        timer.start()
        t0 = time.monotonic()
        w.wait()
        assert time.monotonic() - t0 < 30 and w.describe()["socket_wakes"] == 1
        time.sleep(0.05)
        assert src.read_available(0) == b"\x1b\x1b\x1b\x1b\x01\x01\x01\x01"
    finally:
        timer.join()
        src.ser.close()
        os.close(master)
        os.close(slave)


# ---------------------------------------------------------------- the bounded simulated clock


@pytest.fixture
def clock():
    """_hostenv's clock, restored after the test (the clamp is the host runtime's: off in this process)."""
    saved = (_hostenv._clock, _hostenv.speed, _hostenv.GRACE_S)
    yield _hostenv
    _hostenv._clock, _hostenv.speed, _hostenv.GRACE_S = saved


def test_a_cycle_never_spans_more_than_the_step_even_when_the_process_stalls(clock):
    clock.set_speed(900.0)
    clock.clamp(2.0)
    clock.cycle()
    s0 = clock.sim_seconds()
    time.sleep(0.3)                      # 270 simulated seconds at 900x: a stalled (or stopped) process
    s1 = clock.sim_seconds()
    assert 0 < s1 - s0 <= 2.0
    assert clock.cycle() > 0             # behind the nominal clock: the loop will not wait
    s2 = clock.sim_seconds()
    assert s2 >= s1                      # never backwards
    time.sleep(0.3)
    assert clock.sim_seconds() - s2 <= 2.0


def test_behind_the_nominal_clock_is_forgiven_beyond_the_catch_up_limit(clock, monkeypatch):
    monkeypatch.setattr(clock, "CATCH_UP_S", 0.01)   # 100 simulated s at 10000x
    clock.set_speed(10000.0)
    clock.clamp(0.5)
    clock.cycle()
    time.sleep(0.1)                      # 1000 simulated s nominal, 0.5 given: 999.5 behind, 100 of it kept
    behind = clock.cycle()
    assert behind == clock.CATCH_UP_S * 10000.0
    time.sleep(0.05)                     # however long the next cycle waits (a loaded machine), the limit holds
    assert clock.cycle() == clock.CATCH_UP_S * 10000.0


def test_at_speed_1_the_clamp_never_binds(clock):
    clock.set_speed(1.0)
    clock.clamp(2.0)
    clock.cycle()
    s0 = clock.sim_seconds()
    time.sleep(0.3)
    assert clock.sim_seconds() - s0 >= 0.3 - 1e-3   # the real clock
    assert clock.cycle() == 0


def test_without_cycles_simulated_time_runs_on_at_real_time(clock):
    """A firmware stage that waits on ticks outside the loop (the start, an orderly stop's MQTT linger) must not
    wait forever on a clock that only cycles move."""
    clock.GRACE_S = 0.1
    clock.set_speed(900.0)
    clock.clamp(0.5)
    clock.cycle()
    s0 = clock.sim_seconds()
    time.sleep(0.4)
    advanced = clock.sim_seconds() - s0
    assert 0.5 + 0.2 <= advanced <= 0.5 + 0.4 + 0.1


def test_unclamped_the_clock_runs_at_its_speed(clock):
    clock.set_speed(1000.0)
    clock.clamp(None)
    s0 = clock.sim_seconds()
    time.sleep(0.05)
    assert clock.sim_seconds() - s0 >= 50 - 1


# ---------------------------------------------------------------- the whole firmware


@pytest.fixture
def fast_host(tmp_path):
    h = HostProcess(tmp_path / "drive", args=["--speed", "900"]).start()
    yield h
    h.proc.send_signal(signal.SIGCONT)
    h.stop()


def _fresh(h):
    status, body, _h = h.get("/api/v1/history/latest")
    return body if status == 200 and body else None


@pytest.mark.slow
def test_a_stopped_host_at_speed_900_answers_with_a_fresh_reading_right_after(fast_host):
    """SIGSTOP for 1 s is 900 simulated seconds: the clock used to leap them at the next cycle, and /latest
    answered 204 (the reading 15 simulated minutes old). Now a cycle spans at most the step."""
    h = fast_host
    h.wait_for(lambda: _fresh(h), timeout=60)
    for _ in range(3):
        h.proc.send_signal(signal.SIGSTOP)
        time.sleep(1.0)
        h.proc.send_signal(signal.SIGCONT)
        status, body, _hd = h.get("/api/v1/history/latest")
        assert status == 200 and body["1.8.0"]["value"] > 0, h.log()[-2000:]


@pytest.mark.slow
def test_an_idle_host_sleeps_between_cycles(tmp_path):
    """Factory state, no client: the device's loop runs ~200 cycles a second (5 ms sleeps); the host's sleeps until a
    socket, the meter's next telegram or its cap, so it runs far fewer (timers are polled every CAP_S at least)."""
    h = HostProcess(tmp_path / "drive").start()
    try:
        time.sleep(2)
        info0 = h.get("/api/v1/system/info")[1]
        t0 = time.monotonic()
        time.sleep(10)
        info1 = h.get("/api/v1/system/info")[1]
        rate = (_info_value(info1, "supervisor", "cycles") - _info_value(info0, "supervisor", "cycles")) \
            / (time.monotonic() - t0)
        assert 0 < rate < 50, rate
        # and it still answers at once: a request wakes the loop
        assert h.get("/api/v1/system/alive")[0] == 200
    finally:
        h.stop()
