"""The history feature: quarter hours and days on the flash, and their routes."""

from core.app import LazyRoutes
from services.history.service import History
from services.history.store import HistoryStore


def wire(app):
    """Register the history; it flushes with the others at a restart."""
    # history/ of its own: the file's entry, rewritten at every flush, shares no directory sector with other files.
    store = HistoryStore("history/history.bin", legacy="history.bin", log=app.log)  # legacy: before 2026-11
    app.history = app.supervisor.add(History(app.bus, app.clock, app.settings, store, log=app.log))
    app.flushables.append(app.history)
    app.routes.append(LazyRoutes("services.history.routes", ("/api/v1/history/",)))
