"""Sessions on a set of env servers, never more on one than it accepts.

``CAPACITY_REACHED`` is back-pressure: the limit it reveals is learnt and probed one session
higher every ``CAPACITY_PROBE_EVERY`` sessions served, since a shared server's capacity comes
back when its other clients leave.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx

from taskhub._errors import EnvCapacityError
from taskhub._schema import EnvInfo
from taskhub.env._client import EnvSession
from taskhub.env._http import OPENENV_HTTP
from taskhub.env._session import open_session

logger = logging.getLogger(__name__)

#: Sessions served at a limit learnt from ``CAPACITY_REACHED`` before one more is tried: a
#: shared server's capacity comes back when its other clients leave.
CAPACITY_PROBE_EVERY = 16


@dataclass
class _Endpoint:
    url: str
    limit: int | None
    ceiling: int | None
    """The user's limit: probing never goes above it."""
    active: int = 0
    learnt: bool = False
    """Whether ``limit`` was learnt from a refusal (and may be probed upward again)."""
    served: int = 0
    """Sessions served since ``limit`` last changed."""


class SessionPool:
    """Opens episode sessions on a set of env servers without exceeding what each accepts."""

    def __init__(
        self,
        info: EnvInfo,
        *,
        http: httpx.AsyncClient,
        limit: int | None,
        timeout: float,
        max_frame_bytes: int,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Prepare sessions on every server of ``info``.

        Args:
            info: The env servers.
            http: HTTP client for the HTTP transport.
            limit: Sessions per server at most. Below it (or with None), the limit is learnt
                from ``CAPACITY_REACHED`` and probed one session higher every
                ``CAPACITY_PROBE_EVERY`` sessions served. HTTP servers always get 1: they keep
                one env for every client.
            timeout: Deadline of each env request.
            max_frame_bytes: Largest frame accepted.
            headers: Handshake headers (Space tokens).
        """
        self.info = info
        if info.transport == "http":
            limit = 1
        self.endpoints = [_Endpoint(url, limit, limit) for url in info.urls]
        self._http = http
        self._timeout = timeout
        self._max_frame_bytes = max_frame_bytes
        self._headers = headers or {}
        self._changed = asyncio.Condition()

    def _free(self) -> _Endpoint | None:
        open_ = [e for e in self.endpoints if e.limit is None or e.active < e.limit]
        return min(open_, key=lambda e: e.active) if open_ else None

    @asynccontextmanager
    async def session(self) -> AsyncIterator[tuple[EnvSession, _Endpoint]]:
        """Open a session on the least busy server that has room (waiting for one)."""
        async with self._changed:
            await self._changed.wait_for(lambda: self._free() is not None)
            endpoint = self._free()
            assert endpoint is not None
            endpoint.active += 1
        session = open_session(
            endpoint.url,
            self.info.transport,
            http=self._http,
            timeout=self._timeout,
            max_frame_bytes=self._max_frame_bytes,
            headers=self._headers,
            dialect=self.info.http_dialect or OPENENV_HTTP,
        )
        refused = False
        try:
            yield session, endpoint
        except EnvCapacityError:
            refused = True
            raise
        finally:
            try:
                await session.close()
            finally:
                async with self._changed:
                    endpoint.active -= 1
                    if not refused:
                        self._served(endpoint)
                    self._changed.notify_all()

    def _served(self, endpoint: _Endpoint) -> None:
        """Count a served session; after enough at a learnt limit, allow one more."""
        if not endpoint.learnt or endpoint.limit is None:
            return
        endpoint.served += 1
        below_ceiling = endpoint.ceiling is None or endpoint.limit < endpoint.ceiling
        if endpoint.served >= CAPACITY_PROBE_EVERY and below_ceiling:
            endpoint.limit += 1
            endpoint.served = 0
            logger.info("%s: trying %d sessions again", endpoint.url, endpoint.limit)

    async def at_capacity(self, endpoint: _Endpoint) -> None:
        """Lower a server's limit to the sessions it holds besides the refused one."""
        async with self._changed:
            accepted = max(1, endpoint.active - 1)
            if endpoint.limit is None or accepted < endpoint.limit:
                logger.info("%s is at capacity: at most %d sessions", endpoint.url, accepted)
                endpoint.limit = accepted
                endpoint.learnt = True
                endpoint.served = 0
