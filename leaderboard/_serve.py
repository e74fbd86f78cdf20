"""``taskhub leaderboard serve``: a plain static file server for a quick local look."""

from __future__ import annotations

import functools
import http.server
from pathlib import Path

from taskhub import ConfigError


def make_server(site: Path, *, host: str = "127.0.0.1", port: int = 8000) -> http.server.HTTPServer:
    """Return a server of the files under ``site`` (not started; call ``serve_forever``).

    Args:
        site: A folder built by ``build_site``.
        host: Interface to bind (loopback by default).
        port: Port to listen on (0 picks a free one: read ``server.server_address``).

    Raises:
        ConfigError: ``site`` has no ``index.html``.
    """
    site = Path(site)
    if not (site / "index.html").is_file():
        raise ConfigError(f"{site} is not a site: it has no index.html")
    handler = functools.partial(_QuietHandler, directory=str(site))
    return http.server.ThreadingHTTPServer((host, port), handler)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    """Serves files without logging every request to stderr."""

    def log_message(self, format: str, *args: object) -> None:
        """Drop the per-request line."""
