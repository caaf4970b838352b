"""Pytest setup: the repo and the CircuitPython stand-ins (host/cp) are importable, as on the host runtime."""

import os
import sys

ROOT = os.path.dirname(os.path.abspath(__file__))
CP = os.path.join(ROOT, "host", "cp")

# code.py at the repo root would shadow the stdlib module `code` (pdb imports it), so the repo goes
# behind the standard library on sys.path; `python -m pytest` and pytest's rootdir insertion put it first.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != ROOT]
sys.path.append(ROOT)
if CP not in sys.path:
    sys.path.insert(0, CP)
sys.modules.pop("code", None) if getattr(sys.modules.get("code"), "__file__", "").startswith(ROOT) else None



import pytest  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _no_leaked_sockets(request):
    """A test module that leaves stand-in sockets open would shrink the 8-socket budget of every later module:
    close them and fail that module's last test (servers may hold a connection between a module's own tests)."""
    socketpool = sys.modules.get("socketpool")
    before = set(socketpool._open) if socketpool is not None else set()
    yield
    socketpool = sys.modules.get("socketpool")
    if socketpool is None:
        return
    leaked = [s for s in list(socketpool._open) if s not in before]
    for s in leaked:
        s.close()
    if leaked:
        pytest.fail("%s left %d socketpool socket(s) open" % (request.module.__name__, len(leaked)), pytrace=False)


# Shared fixtures of the MQTT tests (here, not in tests/conftest.py: a conftest inside the tests package makes
# pytest put the repo root back in front of the standard library, where code.py shadows the module `code`).
@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    """A CA and a server certificate for 127.0.0.1, made with openssl for this module."""
    from tests.mqtt_peers import make_ca

    return make_ca(str(tmp_path_factory.mktemp("ca")))


@pytest.fixture(scope="module")
def broker(tmp_path_factory, certs):
    """A real mosquitto with a plain and a TLS listener for the whole module (a module may override it)."""
    from tests.mqtt_peers import Broker

    b = Broker(str(tmp_path_factory.mktemp("broker")), tls=certs).start()
    yield b
    b.stop()


@pytest.fixture
def sma_multicast():
    """The SMA group 239.12.255.254:9522 is the whole machine's: a test that multicasts to it or reads it holds this
    lock (use it as a mark: @pytest.mark.usefixtures("sma_multicast")), so two such tests in two xdist workers (or
    two runs) never read each other's datagrams. xdist_group marks cannot do it here: with pytest 9.2, pytest-xdist
    3.8.0's --dist loadgroup ignores them (it rewrites a node id field pytest no longer reads)."""
    import fcntl
    import tempfile

    with open(os.path.join(tempfile.gettempdir(), "meterplus-sma-multicast.lock"), "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)       # released when the file closes, or when the process dies
        yield


@pytest.fixture(autouse=True)
def _alone_under_xdist(request, tmp_path_factory):
    """Under pytest-xdist a test marked alone runs with no other test at the same time: every test holds a shared
    lock of the run while it runs, one marked alone the exclusive one; a gate lock that the alone test holds
    while it waits keeps the other worker from starting new tests meanwhile (no starvation)."""
    workerinput = getattr(request.config, "workerinput", None)
    if workerinput is None:
        yield
        return
    import fcntl

    base = tmp_path_factory.getbasetemp().parent      # the run's folder, shared by its workers
    alone = request.node.get_closest_marker("alone") is not None
    with open(base / "alone.gate", "a") as gate, open(base / "alone.lock", "a") as lock:
        fcntl.flock(gate, fcntl.LOCK_EX)
        fcntl.flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        if not alone:
            fcntl.flock(gate, fcntl.LOCK_UN)
        yield


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (make test) the files marked slow go first, each file kept whole and in its order:
    --dist loadfile hands whole files to the workers in this order, so the long ones start at once and the
    many short ones fill the gaps at the end (on a serial run's file times: 0.8% above the best split of them).
    A serial run keeps pytest's order."""
    if not hasattr(config, "workerinput"):
        return
    slow_files = {item.path for item in items if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: item.path not in slow_files)     # stable: each file's tests stay in order
