"""One way to open an episode session on a server, whatever its transport.

The runner, training and the validators all open sessions here: WebSocket ``/ws`` when the
server has it, else the HTTP fallback with the server's dialect.
"""

from __future__ import annotations

import httpx

from taskhub.env._client import (
    DEFAULT_CONNECT_TIMEOUT_S,
    DEFAULT_MAX_FRAME_BYTES,
    DEFAULT_TIMEOUT_S,
    EnvClient,
    EnvSession,
    Transport,
)
from taskhub.env._http import OPENENV_HTTP, HttpDialect, HttpEnvSession


def open_session(
    url: str,
    transport: Transport,
    *,
    http: httpx.AsyncClient,
    timeout: float = DEFAULT_TIMEOUT_S,
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S,
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
    headers: dict[str, str] | None = None,
    dialect: HttpDialect = OPENENV_HTTP,
) -> EnvSession:
    """Return an unopened episode session on ``url`` over ``transport``.

    A WebSocket session connects on its first request (or ``await session.connect()``); an
    HTTP session has nothing to open. Close it with ``await session.close()``.

    Args:
        url: The server's base URL.
        transport: ``ws`` or ``http`` (as ``probe_transport`` found).
        http: HTTP client for the HTTP transport.
        timeout: Deadline of each request, seconds.
        connect_timeout: Deadline of the WebSocket handshake, seconds.
        max_frame_bytes: Largest frame or reply accepted.
        headers: WebSocket handshake headers (a token for private Spaces).
        dialect: Routes and body shape of an HTTP-only server.
    """
    if transport == "http":
        return HttpEnvSession(
            url, http=http, timeout=timeout, max_frame_bytes=max_frame_bytes, dialect=dialect
        )
    return EnvClient(
        url,
        timeout=timeout,
        connect_timeout=connect_timeout,
        max_frame_bytes=max_frame_bytes,
        headers=headers,
    )
