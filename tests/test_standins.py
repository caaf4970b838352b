"""The host stand-ins against circuitpython-stubs: no invented API, same parameter order, device errno behaviour."""

import ast
import errno
import importlib
import inspect
import os
import socket
import time

import pytest

STUBS = os.path.join(os.path.dirname(os.path.dirname(inspect.getfile(pytest))), "")
# Names the host adds for tests and the runner; they do not exist on the device and firmware never uses them.
HOST_HOOKS = {
    "busio": {"UART.overruns", "UART.written"},
    "digitalio": {"set_level"},
    "microcontroller": {"ResetReason.__init__"},
    "socketpool": {"open_count", "drop_all", "MAX_SOCKETS", "ETIMEDOUT_DEVICE", "ENOTCONN_DEVICE", "EALREADY_DEVICE",
                   "EISCONN_DEVICE"},
    "wifi": {"Radio.lose_connection", "Radio.restore_connection", "Radio.connect_calls", "Radio.ap_ssid",
             "Radio.ap_password", "Radio.ap_authmode"},
    "storage": {"calls", "mounted_readonly", "usb_drive_enabled"},
    "watchdog": {"WatchDogTimer.feeds", "EXIT_WATCHDOG"},
    "supervisor": set(),
    "rtc": {"set_time_source"},
    "mdns": {"records", "serve", "answer"},
    "_bleio": {"HostCentral", "Adapter.host_advertisement", "Adapter.host_connect", "Adapter.host_reset"},
}
MODULES = sorted(HOST_HOOKS)


def stub_tree(module):
    """Top-level names and class members declared in the module's .pyi stub."""
    import site

    for base in site.getsitepackages():
        path = os.path.join(base, module + "-stubs", "__init__.pyi")
        if os.path.exists(path):
            break
    else:
        pytest.fail("no stub for %s" % module)
    tree = ast.parse(open(path).read())
    names, members, sigs = set(), {}, {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            names.add(node.name)
            members[node.name] = set()
            for sub in node.body:
                if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    members[node.name].add(sub.name)
                    sigs[node.name + "." + sub.name] = [a.arg for a in sub.args.args]
                elif isinstance(sub, ast.AnnAssign) and isinstance(sub.target, ast.Name):
                    members[node.name].add(sub.target.id)
                elif isinstance(sub, ast.Assign):
                    members[node.name].update(t.id for t in sub.targets if isinstance(t, ast.Name))
                elif isinstance(sub, ast.ClassDef):
                    members[node.name].add(sub.name)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
            sigs[node.name] = [a.arg for a in node.args.args]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names, members, sigs


def public(obj):
    return {n for n in vars(obj) if not n.startswith("_")}


@pytest.mark.parametrize("name", MODULES)
def test_no_invented_api(name):
    mod = importlib.import_module(name)
    names, members, _sigs = stub_tree(name)
    hooks = HOST_HOOKS[name]
    for attr in sorted(public(mod)):
        value = getattr(mod, attr)
        if inspect.ismodule(value) or attr in hooks:
            continue
        if getattr(value, "__module__", name) not in (name, None) and not isinstance(value, (int, str, float)):
            continue  # imported helper, not part of the module's API
        assert attr in names, "%s.%s is not in circuitpython-stubs" % (name, attr)
        if inspect.isclass(value) and attr in members:
            for m in sorted(public(value)):
                if "%s.%s" % (attr, m) in hooks:
                    continue
                assert m in members[attr], "%s.%s.%s is not in circuitpython-stubs" % (name, attr, m)


@pytest.mark.parametrize("name", MODULES)
def test_positional_parameters_match_the_stubs(name):
    mod = importlib.import_module(name)
    _names, _members, sigs = stub_tree(name)
    checked = 0
    for qual, stub_args in sigs.items():
        parts = qual.split(".")
        obj = mod
        for p in parts:
            obj = getattr(obj, p, None)
            if obj is None:
                break
        if obj is None or not callable(obj) or inspect.isclass(obj):
            continue
        ours = [p.name for p in inspect.signature(obj).parameters.values()
                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        theirs = [a for a in stub_args if a not in ("self", "cls")]  # a bound classmethod drops cls
        if ours and ours[0] == "self":
            ours = ours[1:]
        assert ours[: len(theirs)] == theirs, "%s: stub %s, stand-in %s" % (qual, theirs, ours)
        checked += 1
    assert checked or name in ("_bleio", "mdns", "board", "storage", "supervisor", "rtc", "digitalio", "busio", "wifi",
                               "microcontroller", "watchdog", "socketpool")


def test_uart_keyword_order_is_tx_then_rx():
    import busio

    params = list(inspect.signature(busio.UART).parameters)
    assert params[:2] == ["tx", "rx"]
    with pytest.raises(ValueError):
        busio.UART(None, None)
    with pytest.raises(ValueError):
        busio.UART(tx=None, rx=1, timeout=101)


class _Radio:
    pass


def _pair(pool):
    srv = pool.socket(pool.AF_INET, pool.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv._sock.getsockname()[1]
    cli = socket.create_connection(("127.0.0.1", port))
    conn, _addr = srv.accept()
    return srv, cli, conn


def test_socket_has_no_recv_and_nonblocking_raises_eagain():
    import socketpool

    pool = socketpool.SocketPool(_Radio())
    srv, cli, conn = _pair(pool)
    try:
        assert not hasattr(conn, "recv")
        conn.setblocking(False)
        with pytest.raises(OSError) as exc:
            conn.recv_into(bytearray(8))
        assert exc.value.errno == errno.EAGAIN
        srv.setblocking(False)
        with pytest.raises(OSError) as exc:
            srv.accept()
        assert exc.value.errno == errno.EAGAIN
    finally:
        cli.close()
        conn.close()
        srv.close()


def test_timeout_is_oserror_116_not_timeouterror():
    import socketpool

    pool = socketpool.SocketPool(_Radio())
    srv, cli, conn = _pair(pool)
    try:
        conn.settimeout(0.05)
        with pytest.raises(OSError) as exc:
            conn.recv_into(bytearray(8))
        assert exc.value.errno == 116
        assert not isinstance(exc.value, TimeoutError)
    finally:
        cli.close()
        conn.close()
        srv.close()


def test_closed_peer_on_nonblocking_socket_raises_enotconn():
    import socketpool

    pool = socketpool.SocketPool(_Radio())
    srv, cli, conn = _pair(pool)
    try:
        cli.close()
        conn.setblocking(False)
        deadline = time.monotonic() + 2
        while True:
            try:
                conn.recv_into(bytearray(8))
            except OSError as exc:
                if exc.errno == errno.EAGAIN and time.monotonic() < deadline:
                    continue
                assert exc.errno == 128
                break
    finally:
        conn.close()
        srv.close()


def test_eight_sockets_in_the_whole_system():
    import socketpool

    pool = socketpool.SocketPool(_Radio())
    base = socketpool.open_count()
    made = []
    try:
        for _ in range(socketpool.MAX_SOCKETS - base):
            made.append(pool.socket())
        with pytest.raises(RuntimeError, match="Out of sockets"):
            pool.socket()
    finally:
        for s in made:
            s.close()
    assert socketpool.open_count() == base


def test_uart_buffer_is_bounded_like_hardware():
    import _hostenv
    import busio

    class Source:
        def read_available(self, now, uart):
            return b"x" * 100

    old = _hostenv.meter_source
    _hostenv.meter_source = Source()
    try:
        u = busio.UART(tx=None, rx=1, baudrate=9600, timeout=0, receiver_buffer_size=64)
        assert u.in_waiting == 64
        assert u.overruns == 36
        assert u.read(10) == b"x" * 10
    finally:
        _hostenv.meter_source = old


def test_ticks_start_one_minute_below_the_wrap_like_the_device():
    import _hostenv
    import supervisor

    # CircuitPython starts ticks_ms at 2**29 - 65 s so that wrap bugs show within a minute of boot.
    expected = (int(_hostenv.sim_seconds() * 1000) + (1 << 29) - 65_000) % (1 << 29)
    assert abs(supervisor.ticks_ms() - expected) < 1000


def test_nvm_is_8k_and_persists(tmp_path):
    import _hostenv
    import microcontroller

    old = _hostenv.state_dir
    _hostenv.state_dir = str(tmp_path)
    try:
        assert len(microcontroller.nvm) == 8192
        microcontroller.nvm[0:3] = b"abc"
        assert bytes(microcontroller.nvm[0:3]) == b"abc"
        assert (tmp_path / ".nvm.bin").stat().st_size == 8192
    finally:
        _hostenv.state_dir = old


def test_nonblocking_connect_reports_like_lwip():
    """As CircuitPython's espressif Socket.connect with timeout 0: ETIMEDOUT at once, EALREADY while it goes on,
    EISCONN when connected, ENOTCONN when it failed."""
    import socketpool
    import wifi

    pool = socketpool.SocketPool(wifi.radio)
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    dead = closed.getsockname()
    closed.close()
    for addr, final in ((srv.getsockname(), 127), (dead, 128)):
        s = pool.socket(pool.AF_INET, pool.SOCK_STREAM)
        s.setblocking(False)
        codes = []
        for _ in range(50):
            try:
                s.connect(addr)
                codes.append(0)
            except OSError as exc:
                codes.append(exc.errno)
            if codes[-1] == final:
                break
            time.sleep(0.01)
        s.close()
        assert codes[0] in (0, 116) and codes[-1] == final and set(codes[1:-1]) <= {120}
    srv.close()
