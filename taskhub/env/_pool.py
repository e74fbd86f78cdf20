"""Sessions on a set of env servers, reused across episodes, never more on one than it accepts.

A WebSocket session serves many episodes one after another (reset again on the same
connection), so a session whose episode ended well is parked and the next episode on that
server resets it instead of paying a new handshake. A session that failed (a non-recoverable
error, a timeout, an env error, a cancelled episode) is closed, never parked. Parked sessions
hold server slots: they are closed after ``DEFAULT_IDLE_TIMEOUT_S`` unused, and all of them
when the pool closes, so other clients of a shared server get their slots back.

``CAPACITY_REACHED`` is back-pressure: the limit it reveals is learnt and probed one session
higher every ``CAPACITY_PROBE_EVERY`` episodes served, since a shared server's capacity comes
back when its other clients leave.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from taskhub._errors import AgentFormatError, EnvCapacityError, ModelError
from taskhub._schema import EnvInfo
from taskhub.env._client import EnvClient, EnvSession
from taskhub.env._http import OPENENV_HTTP
from taskhub.env._session import open_session

logger = logging.getLogger(__name__)

#: Episodes served at a limit learnt from ``CAPACITY_REACHED`` before one more session is
#: tried: a shared server's capacity comes back when its other clients leave.
CAPACITY_PROBE_EVERY = 16
#: Seconds a parked session may stay unused before it is closed (it holds a server slot).
DEFAULT_IDLE_TIMEOUT_S = 5.0

# Failures that leave the env side of a session sound: the next episode's reset starts over.
_SESSION_SOUND_AFTER = (AgentFormatError, ModelError)


@dataclass
class _Endpoint:
    url: str
    limit: int | None
    ceiling: int | None
    """The user's limit: probing never goes above it."""
    in_use: int = 0
    """Sessions serving an episode now."""
    idle: list[tuple[EnvClient, float]] = field(default_factory=list)
    """Open sessions parked for the next episode, and since when (``time.monotonic``); the
    most recently parked last."""
    learnt: bool = False
    """Whether ``limit`` was learnt from a refusal (and may be probed upward again)."""
    served: int = 0
    """Episodes served since ``limit`` last changed."""

    @property
    def open(self) -> int:
        """Sessions this pool holds on the server (serving or parked)."""
        return self.in_use + len(self.idle)

    def has_room(self) -> bool:
        return bool(self.idle) or self.limit is None or self.open < self.limit


@dataclass
class PooledSession:
    """A session handed out by ``SessionPool.session()``.

    Attributes:
        session: The session; reset it to start the episode.
        url: The server it is open on.
        reused: Whether it served an earlier episode (and so is already connected).
    """

    session: EnvSession
    url: str
    reused: bool
    _endpoint: _Endpoint


class SessionPool:
    """Episode sessions on a set of env servers, reused, never more than each server accepts.

    Use it as an async context manager (parked sessions close on exit)::

        async with SessionPool(info, http=http, limit=None) as pool:
            async with pool.session() as pooled:
                first = await pooled.session.reset(seed=1)
    """

    def __init__(
        self,
        info: EnvInfo,
        *,
        http: httpx.AsyncClient,
        limit: int | None,
        timeout: float,
        max_frame_bytes: int,
        headers: dict[str, str] | None = None,
        reuse: bool = True,
        idle_timeout: float = DEFAULT_IDLE_TIMEOUT_S,
    ) -> None:
        """Prepare sessions on every server of ``info``.

        Args:
            info: The env servers.
            http: HTTP client for the HTTP transport.
            limit: Sessions per server at most. Below it (or with None), the limit is learnt
                from ``CAPACITY_REACHED`` and probed one session higher every
                ``CAPACITY_PROBE_EVERY`` episodes served. HTTP servers always get 1: they keep
                one env for every client.
            timeout: Deadline of each env request.
            max_frame_bytes: Largest frame accepted.
            headers: Handshake headers (Space tokens).
            reuse: Reset an idle open session for the next episode (WebSocket only); False
                opens a new session for every episode.
            idle_timeout: Seconds a parked session may stay unused before it is closed.
        """
        self.info = info
        if info.transport == "http":
            limit = 1
        self.endpoints = [_Endpoint(url, limit, limit) for url in info.urls]
        self.reuse = reuse and info.transport == "ws"
        self.idle_timeout = idle_timeout
        self._http = http
        self._timeout = timeout
        self._max_frame_bytes = max_frame_bytes
        self._headers = headers or {}
        # Every change of the endpoints' counts happens between two awaits (one event loop):
        # waiters only need waking when one may let them in.
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._reaper: asyncio.TimerHandle | None = None
        self._closing: set[asyncio.Task[None]] = set()
        self._closed = False

    async def __aenter__(self) -> SessionPool:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def _pick(self) -> _Endpoint | None:
        candidates = [e for e in self.endpoints if e.has_room()]
        return min(candidates, key=lambda e: e.in_use) if candidates else None

    def session(
        self, prefer: EnvSession | None = None, *, reset: dict[str, Any] | None = None
    ) -> _Lease:
        """Hand out a session on the least busy server that has room, waiting for one.

        Use it as ``async with pool.session() as pooled``. An idle session of that server is
        reused when there is one, else a new one is opened (it connects on its first request).
        ``prefer``, when it is parked, is handed out first (the session that already sent this
        episode's reset), then a parked session that sent ``reset`` (this episode's reset
        payload) ahead; other callers take those last.
        On exit the session is parked for the next episode when the block ended normally or
        with an agent or model error, and closed otherwise. A ``CAPACITY_REACHED`` raised in
        the block lowers the server's learnt limit.

        Raises:
            RuntimeError: The pool is closed.
        """
        return _Lease(self, prefer, reset)

    async def _acquire(
        self, prefer: EnvSession | None = None, reset: dict[str, Any] | None = None
    ) -> PooledSession:
        while True:
            if self._closed:
                raise RuntimeError("the SessionPool is closed")
            endpoint = self._parked_on(prefer, reset) or self._pick()
            if endpoint is not None:
                break
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                if not waiter.done():
                    self._waiters.remove(waiter)
        endpoint.in_use += 1
        dead: list[EnvClient] = []
        try:
            while endpoint.idle:
                client, _ = endpoint.idle.pop(_take(endpoint.idle, prefer, reset))
                if client.is_open:
                    return PooledSession(client, endpoint.url, True, endpoint)
                dead.append(client)  # the server closed it while it was parked
        finally:
            for client in dead:
                await client.close()
        session = open_session(
            endpoint.url,
            self.info.transport,
            http=self._http,
            timeout=self._timeout,
            max_frame_bytes=self._max_frame_bytes,
            headers=self._headers,
            dialect=self.info.http_dialect or OPENENV_HTTP,
        )
        return PooledSession(session, endpoint.url, False, endpoint)

    def _parked_on(
        self, client: EnvSession | None, reset: dict[str, Any] | None = None
    ) -> _Endpoint | None:
        """The server ``client`` is parked on, if it is parked.

        Else the server of a parked session that sent ``reset`` ahead, if any.
        """
        if client is not None:
            for endpoint in self.endpoints:
                if _index_of(endpoint.idle, client) is not None:
                    return endpoint
        if reset is not None:
            for endpoint in self.endpoints:
                if _index_sent(endpoint.idle, reset) is not None:
                    return endpoint
        return None

    async def adopt(self, client: EnvClient | None) -> bool:
        """Park ``client`` for the next episode: an open session opened elsewhere (the probe's).

        It is closed instead when the pool would not park a session of its own like it: no
        reuse, no room on its server, another frame limit or other headers, or closed.

        Returns:
            Whether it was parked.
        """
        if client is None:
            return False
        endpoint = next((e for e in self.endpoints if e.url == client.base_url), None)
        like_ours = (
            client.max_frame_bytes == self._max_frame_bytes and client.headers == self._headers
        )
        if endpoint is None or not like_ours or not self._park(endpoint, client):
            await asyncio.shield(client.close())
            return False
        client.timeout = self._timeout
        self._wake()
        return True

    def _wake(self) -> None:
        """Let every waiter look again for a server with room."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)

    async def _release(self, pooled: PooledSession, *, keep: bool, served: bool = True) -> None:
        endpoint, session = pooled._endpoint, pooled.session
        endpoint.in_use -= 1
        park = keep and isinstance(session, EnvClient) and self._park(endpoint, session)
        if served:
            self._served(endpoint)
        self._wake()
        if not park:
            await asyncio.shield(session.close())

    def _park(self, endpoint: _Endpoint, client: EnvClient) -> bool:
        """Park ``client``, not counted on ``endpoint`` yet, for the next episode.

        Returns:
            False, parking nothing, when the pool keeps no sessions (no reuse, closed), the
            session is closed, or its server has no room: the caller closes it.
        """
        if not (self.reuse and not self._closed and client.is_open):
            return False
        # a limit lowered while the session served (a refusal elsewhere) sheds it
        if endpoint.limit is not None and endpoint.open >= endpoint.limit:
            return False
        endpoint.idle.append((client, time.monotonic()))
        if self._reaper is None:
            self._schedule_reaper(self.idle_timeout)
        return True

    def _schedule_reaper(self, delay: float) -> None:
        self._reaper = asyncio.get_running_loop().call_later(delay, self._reap)

    def _reap(self) -> None:
        """Close the sessions parked for longer than ``idle_timeout``; come back for the rest."""
        self._reaper = None
        now = time.monotonic()
        oldest = now
        for endpoint in self.endpoints:
            kept = []
            for client, since in endpoint.idle:
                if now - since >= self.idle_timeout:
                    self._close_later(client)
                else:
                    kept.append((client, since))
                    oldest = min(oldest, since)
            endpoint.idle = kept
        if any(e.idle for e in self.endpoints):
            self._schedule_reaper(max(0.0, oldest + self.idle_timeout - now))

    def close_idle(self, keep: int = 0) -> None:
        """Close parked sessions, the longest parked first, until ``keep`` are left.

        A session that sent a reset ahead goes last: an episode of its worker waits for it.

        For a caller with fewer episodes left to start than sessions parked: their servers get
        the slots back while the last episodes play. The closes run in the background, and
        ``aclose`` waits for them.
        """
        parked = [
            (since, endpoint, client)
            for endpoint in self.endpoints
            for client, since in endpoint.idle
        ]
        # a session that sent a reset ahead is its worker's next episode's: closed last
        parked.sort(key=lambda entry: (entry[2].reset_ahead is not None, entry[0]))
        for since, endpoint, client in parked[: max(0, len(parked) - keep)]:
            endpoint.idle.remove((client, since))
            self._close_later(client)

    def _close_later(self, client: EnvClient) -> None:
        task = asyncio.get_running_loop().create_task(client.close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    def _served(self, endpoint: _Endpoint) -> None:
        """Count a served episode; after enough at a learnt limit, allow one more session."""
        if not endpoint.learnt or endpoint.limit is None:
            return
        endpoint.served += 1
        below_ceiling = endpoint.ceiling is None or endpoint.limit < endpoint.ceiling
        if endpoint.served >= CAPACITY_PROBE_EVERY and below_ceiling:
            endpoint.limit += 1
            endpoint.served = 0
            logger.info("%s: trying %d sessions again", endpoint.url, endpoint.limit)

    def _at_capacity(self, endpoint: _Endpoint) -> None:
        """Lower a server's limit to the sessions it holds besides the refused one."""
        accepted = max(1, endpoint.open - 1)
        if endpoint.limit is None or accepted < endpoint.limit:
            logger.info("%s is at capacity: at most %d sessions", endpoint.url, accepted)
            endpoint.limit = accepted
            endpoint.learnt = True
            endpoint.served = 0

    @property
    def idle_sessions(self) -> int:
        """Open sessions parked for the next episode, over every server."""
        return sum(len(e.idle) for e in self.endpoints)

    async def aclose(self) -> None:
        """Close every parked session; sessions in use close when their episode ends."""
        self._closed = True
        if self._reaper is not None:
            self._reaper.cancel()
            self._reaper = None
        parked = [client for e in self.endpoints for client, _ in e.idle]
        for endpoint in self.endpoints:
            endpoint.idle = []
        self._wake()
        closing = [client.close() for client in parked]
        await asyncio.gather(*closing, *self._closing, return_exceptions=True)


def _take(
    idle: list[tuple[EnvClient, float]],
    prefer: EnvSession | None,
    reset: dict[str, Any] | None = None,
) -> int:
    """The index of the parked session to hand out.

    ``prefer``; else the most recently parked one that sent ``reset`` ahead; else the most
    recently parked one that sent no reset ahead (that reset is another episode's); else the
    most recently parked.
    """
    index = _index_of(idle, prefer) if prefer is not None else None
    if index is None and reset is not None:
        index = _index_sent(idle, reset)
    if index is None:
        index = _index_sent(idle, None)
    return -1 if index is None else index


def _index_of(idle: list[tuple[EnvClient, float]], client: EnvSession) -> int | None:
    """The index of ``client`` among the parked sessions, None when it is not parked."""
    for index in range(len(idle) - 1, -1, -1):
        if idle[index][0] is client:
            return index
    return None


def _index_sent(idle: list[tuple[EnvClient, float]], reset: dict[str, Any] | None) -> int | None:
    """The index of the most recently parked session that sent ``reset`` ahead.

    ``reset`` None: one that sent none. None when there is no such session.
    """
    for index in range(len(idle) - 1, -1, -1):
        if idle[index][0].reset_ahead == reset:
            return index
    return None


class _Lease:
    """One ``SessionPool.session()`` block (a class: it runs once per episode)."""

    __slots__ = ("pool", "pooled", "prefer", "reset")

    def __init__(
        self, pool: SessionPool, prefer: EnvSession | None, reset: dict[str, Any] | None
    ) -> None:
        self.pool = pool
        self.prefer = prefer
        self.reset = reset
        self.pooled: PooledSession | None = None

    async def __aenter__(self) -> PooledSession:
        self.pooled = await self.pool._acquire(self.prefer, self.reset)
        return self.pooled

    async def __aexit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        pool, pooled = self.pool, self.pooled
        assert pooled is not None
        if kind is None:
            await pool._release(pooled, keep=True)
        elif issubclass(kind, EnvCapacityError):
            pool._at_capacity(pooled._endpoint)
            await pool._release(pooled, keep=False, served=False)
        else:
            await pool._release(pooled, keep=issubclass(kind, _SESSION_SOUND_AFTER))
