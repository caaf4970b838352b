"""The outage journal: when the device went down, when it came back and why (docs/outages.md)."""

from core.app import LazyRoutes
from services.outages.journal import OutageJournal
from services.outages.service import Outages


def wire(app):
    """Register the journal after the OTA service (a rollback names its reason); noted again before a restart."""

    def last_seen():
        history = app.history
        last = history.store.hr.last if history is not None else None
        return last[1] + 900 if last is not None else 0   # the newest flushed quarter hour: up until its end

    app.outages = app.supervisor.add(Outages(OutageJournal("logs/outages.bin"), app.clock, app.reset_reason,
                                             last_seen=last_seen, ota=app.ota, log=app.log))
    app.lifecycle.before_restart.append(app.outages.note_restart)
    app.routes.append(LazyRoutes("services.outages.routes", ("/api/v1/system/outages",)))
