"""The web feature: the interface's pre-compressed files from web/ (web/files.tsv lists them)."""

from services.web import static as web_static


def wire(app):
    """Serve the web interface."""
    app.routes.append(web_static)
