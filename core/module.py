"""The contract every driver and service keeps with the supervisor."""

OK = "OK"
WARN = "WARN"
FAILED = "FAILED"


class Module:
    """Base of drivers and services: construct allocates, start() touches hardware, poll() is a bounded slice."""

    name = "module"
    # How often the supervisor polls it: 0 = every cycle (sockets a client waits on); a module whose work is
    # timers or slow hardware says how often is enough, so an idle cycle does not pay for it (issue 25).
    poll_every_ms = 0

    def __init__(self):
        self.state = OK
        self.counters = {}

    def start(self):
        """Acquire hardware or sockets; may raise."""

    def poll(self, now_ms):
        """Do a bounded slice of work; return quickly."""

    def stop(self):
        """Release what start() acquired; must not raise."""

    def busy(self):
        """True while work a peer waits on is in flight (an answer, a connection): code.py's start in stages lets it
        finish before it wires the next feature."""
        return False

    def count(self, key, n=1):
        """Add n to a named counter."""
        self.counters[key] = self.counters.get(key, 0) + n

    def describe(self):
        """Small dict for /system/info."""
        d = {"state": self.state}
        d.update(self.counters)
        return d
