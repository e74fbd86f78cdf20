"""Async OpenEnv client: one episode session over WebSocket ``/ws``, or the HTTP fallback.

The protocol (OpenEnv 0.3 to 0.10): one JSON object per text frame, strictly request then reply.
Client frames are ``reset``/``step``/``state``/``close``; the server answers ``observation``,
``state`` or ``error`` frames. Servers up to 0.3 send no ``metadata``; 0.4+ send it inside
``data.observation`` and at ``data.metadata``. Both are accepted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol
from urllib.parse import urlsplit, urlunsplit

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import (
    ConnectionClosed,
    InvalidHandshake,
    InvalidStatus,
    InvalidURI,
)
from websockets.protocol import State

from taskhub._errors import (
    EnvCapacityError,
    EnvClosedError,
    EnvConnectError,
    EnvError,
    EnvExecutionError,
    EnvProtocolError,
    EnvTimeout,
)
from taskhub._limits import loads_bounded
from taskhub._schema import WireDialect

logger = logging.getLogger(__name__)

#: Deadline of one request (reset, step, state), seconds.
DEFAULT_TIMEOUT_S = 60.0
#: Deadline of opening a session, seconds.
DEFAULT_CONNECT_TIMEOUT_S = 15.0
#: Largest frame accepted from a server: a bigger one is a protocol error, not a memory spike.
DEFAULT_MAX_FRAME_BYTES = 4 * 1024 * 1024

Transport = Literal["ws", "http"]

# Error codes after which the session stays usable (DESIGN.md, protocol facts).
_RECOVERABLE_CODES = {"INVALID_JSON", "UNKNOWN_TYPE", "VALIDATION_ERROR", "EXECUTION_ERROR"}


@dataclass(frozen=True)
class StepResult:
    """What ``reset()`` or ``step()`` returned.

    Attributes:
        observation: The observation fields (without ``reward``/``done``).
        reward: The reward as a float (OpenEnv allows bool, int or float), or None.
        done: Whether the episode ended.
        metadata: ``data.metadata`` of OpenEnv 0.4+ servers, else None.
    """

    observation: dict[str, Any]
    reward: float | None
    done: bool
    metadata: dict[str, Any] | None = None


class EnvSession(Protocol):
    """One episode session with an env server: the OpenEnv verbs."""

    async def reset(self, **kwargs: Any) -> StepResult:
        """Start an episode; ``kwargs`` go to the env's ``reset()``."""
        ...

    async def step(self, action: dict[str, Any]) -> StepResult:
        """Send one action."""
        ...

    async def state(self) -> dict[str, Any]:
        """Return the env's state."""
        ...

    async def close(self) -> None:
        """End the session."""
        ...


def split_base_url(url: str) -> tuple[str, str]:
    """Return ``(http_base, ws_url)`` for an env given as ``http(s)://`` or ``ws(s)://`` URL.

    ``http://h:p/prefix`` gives ``("http://h:p/prefix", "ws://h:p/prefix/ws")``; a ``ws`` URL
    ending in ``/ws`` gives its HTTP base back.

    Raises:
        ValueError: ``url`` is not an http(s) or ws(s) URL.
    """
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https", "ws", "wss") or not parts.netloc:
        raise ValueError(f"not an http(s):// or ws(s):// URL: {url!r}")
    secure = parts.scheme in ("https", "wss")
    path = parts.path.rstrip("/")
    if parts.scheme in ("ws", "wss") and path.endswith("/ws"):
        path = path[: -len("/ws")]
    http_base = urlunsplit(("https" if secure else "http", parts.netloc, path, "", ""))
    ws_url = urlunsplit(("wss" if secure else "ws", parts.netloc, path + "/ws", "", ""))
    return http_base, ws_url


def _loads(text: str | bytes) -> Any:
    """Parse a frame strictly: NaN and Infinity are not JSON, nesting is bounded."""
    return loads_bounded(text)


def _as_reward(value: Any, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool | int | float):
        reward = float(value)
        if not math.isfinite(reward):
            raise EnvProtocolError(f"{where}: reward is {value!r}, not a finite number")
        return reward
    raise EnvProtocolError(f"{where}: reward must be a number, bool or null, got {value!r:.200}")


def parse_step_payload(data: Any, where: str) -> StepResult:
    """Turn the ``data`` of an observation frame (or an HTTP reply body) into a StepResult.

    Raises:
        EnvProtocolError: The payload does not have the OpenEnv shape.
    """
    if not isinstance(data, dict):
        raise EnvProtocolError(f"{where}: data must be an object, got {data!r:.200}")
    observation = data.get("observation")
    if not isinstance(observation, dict):
        raise EnvProtocolError(
            f"{where}: data.observation must be an object, got {observation!r:.200}"
        )
    done = data.get("done", observation.get("done", False))
    if not isinstance(done, bool):
        raise EnvProtocolError(f"{where}: done must be a bool, got {done!r:.100}")
    reward = _as_reward(data.get("reward", observation.get("reward")), where)
    metadata = data.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise EnvProtocolError(f"{where}: data.metadata must be an object, got {metadata!r:.100}")
    return StepResult(observation=observation, reward=reward, done=done, metadata=metadata)


def wire_dialect(result: StepResult) -> WireDialect:
    """The OpenEnv dialect an observation was sent in: 0.3 sends no ``metadata`` anywhere."""
    if result.metadata is not None or "metadata" in result.observation:
        return "openenv-0.4+"
    return "openenv-0.3"


def _error_from_frame(data: Any, url: str, verb: str) -> EnvError:
    if not isinstance(data, dict):
        return EnvProtocolError(f"{verb}: error frame without data: {data!r:.200}", env_url=url)
    code = str(data.get("code", "")) or None
    message = str(data.get("message", "")) or "(no message)"
    text = f"{verb} failed: {code}: {message}"
    if code == "CAPACITY_REACHED":
        return EnvCapacityError(text, env_url=url, code=code)
    if code == "EXECUTION_ERROR":
        return EnvExecutionError(text, env_url=url, code=code)
    if code in ("SESSION_ERROR", "FACTORY_ERROR"):
        return EnvClosedError(text, env_url=url, code=code)
    return EnvProtocolError(text, env_url=url, code=code)


def _reset_frame(payload: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if payload is None else {"type": "reset", "data": payload}


async def _send_together(ws: ClientConnection, texts: list[str]) -> None:
    """Send ``texts`` as text frames, one after the other, in a single write to the socket.

    The server reads the same frames as from one ``send`` each, but in one TCP segment: one
    system call here, one wake-up there (a step and the reset behind it, on a hot path).
    """
    protocol = ws.protocol
    async with ws.send_context():  # checks the session is open; drains the write after
        for text in texts:
            protocol.send_text(text.encode())
        # In an open session the protocol queues frames only (no end of stream): one write.
        ws.transport.write(b"".join(protocol.data_to_send()))


class _Deadline:
    """A request's deadline: when it passes, the socket is dropped (its reply never read)."""

    def __init__(self, ws: ClientConnection, seconds: float) -> None:
        self.ws = ws
        self.expired = False
        self._loop = asyncio.get_running_loop()
        self._timer = self._loop.call_at(self._loop.time() + seconds, self._expire)

    def _expire(self) -> None:
        self.expired = True
        if self.ws.transport is not None:
            self.ws.transport.abort()

    def extend(self, seconds: float) -> None:
        """Move the deadline ``seconds`` later (time the client spent on other work)."""
        if not self.expired:
            self._timer.cancel()
            self._timer = self._loop.call_at(self._timer.when() + seconds, self._expire)

    def cancel(self) -> None:
        """The request ended: the deadline no longer applies."""
        self._timer.cancel()


class EnvClient:
    """An OpenEnv episode session over WebSocket ``<base>/ws``.

    Use it as an async context manager; a closed client cannot be reopened::

        async with EnvClient("http://127.0.0.1:8000") as env:
            first = await env.reset(seed=3)
            result = await env.step({"answer": "42"})

    After a timeout the socket is dropped: a late reply would otherwise be read as the answer
    to the next request.

    A step known to be an episode's last can carry the next episode's reset behind it
    (``step(action, then_reset=payload)``): both frames leave at once, and ``reset(**payload)``
    then only reads the reply the server has most likely sent already. Any other request
    first reads and drops that reply.
    """

    #: Whether ``step`` can send a reset right behind its action (``then_reset``).
    resets_ahead = True

    def __init__(
        self,
        base_url: str,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Prepare a session with the server at ``base_url`` (http(s) or ws(s) URL).

        Args:
            base_url: The server, e.g. ``http://127.0.0.1:8000`` or ``wss://x.hf.space/ws``.
            timeout: Deadline of each request, seconds.
            connect_timeout: Deadline of the WebSocket handshake, seconds.
            max_frame_bytes: Largest frame accepted from the server.
            headers: Extra handshake headers (e.g. ``Authorization`` for private Spaces).
        """
        self.base_url, self.ws_url = split_base_url(base_url)
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.max_frame_bytes = max_frame_bytes
        self._headers = headers or {}
        self._loopback = urlsplit(self.ws_url).hostname in ("127.0.0.1", "localhost", "::1")
        self._ws: ClientConnection | None = None
        self._state: Literal["unopened", "open", "closed"] = "unopened"
        self.last_latency_s = 0.0
        # the payload of a reset sent behind a step, whose reply is the next frame to read
        self._ahead: dict[str, Any] | None = None

    @property
    def headers(self) -> dict[str, str]:
        """The handshake headers (a copy)."""
        return dict(self._headers)

    @property
    def reset_ahead(self) -> dict[str, Any] | None:
        """The payload of a reset sent behind the last step and not read yet, or None."""
        return self._ahead

    @property
    def is_open(self) -> bool:
        """Whether the session is connected and the server has not closed it."""
        return self._ws is not None and self._ws.state is State.OPEN

    async def __aenter__(self) -> EnvClient:
        await self.connect()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def connect(self) -> None:
        """Open the WebSocket session.

        Raises:
            EnvConnectError: The server is unreachable or refuses the handshake.
            EnvTimeout: The handshake did not finish in time.
        """
        if self._state == "closed":
            raise RuntimeError("Cannot reopen a closed EnvClient; create a new one")
        if self._state == "open":
            return
        try:
            self._ws = await connect(
                self.ws_url,
                open_timeout=self.connect_timeout,
                max_size=self.max_frame_bytes,
                compression=None,
                additional_headers=self._headers or None,
                close_timeout=2,
                # no proxy lookup (it reads the environment on every connect) for loopback
                proxy=None if self._loopback else True,
            )
        except InvalidStatus as exc:
            status = exc.response.status_code
            raise EnvConnectError(
                f"{self.ws_url} refused the WebSocket handshake with HTTP {status}",
                env_url=self.ws_url,
                code=str(status),
            ) from None
        except (OSError, InvalidHandshake, InvalidURI) as exc:
            raise EnvConnectError(
                f"cannot connect to {self.ws_url}: {exc}", env_url=self.ws_url
            ) from None
        except TimeoutError:
            raise EnvTimeout(
                f"WebSocket handshake with {self.ws_url} took longer than "
                f"{self.connect_timeout:g}s",
                env_url=self.ws_url,
            ) from None
        self._state = "open"

    async def _request(
        self,
        frame: dict[str, Any] | None,
        verb: str,
        while_waiting: Callable[[], Awaitable[None]] | None = None,
        then: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Send ``frame`` (None: it was sent ahead) and read its reply.

        ``then`` is a reset frame sent right behind ``frame``; its reply is left unread. A
        frame sent while such a reply waits unread is answered after it: that reply is read
        and dropped first.
        """
        if self._state == "unopened":
            await self.connect()
        if self._state == "closed" or self._ws is None:
            raise EnvClosedError(f"{verb}: the session is closed", env_url=self.ws_url)
        if frame is not None and self._ahead is not None:
            await self._skip_ahead()
        ws = self._ws
        started = time.perf_counter()
        # The deadline drops the socket, as a timeout must (a late reply would be read as the
        # next request's), and the wait for the reply ends with the close: a timer per request
        # costs a fraction of an asyncio.timeout scope, and cancels nothing but this socket.
        deadline = _Deadline(ws, self.timeout)
        try:
            try:
                if then is None:
                    if frame is not None:
                        await ws.send(json.dumps(frame))
                else:
                    sent = [json.dumps(f) for f in (frame, then) if f is not None]
                    await _send_together(ws, sent)
                    self._ahead = then["data"]
            except ConnectionClosed:
                # CAPACITY_REACHED can arrive, and the socket close, before our first send:
                # the frame is still queued, so read it before reporting the close.
                pass
            if while_waiting is not None:
                await self._meanwhile(while_waiting, deadline)
            raw = await ws.recv()
        except ConnectionClosed as exc:
            await self._drop()
            if deadline.expired:
                raise EnvTimeout(
                    f"{verb}: no reply from {self.ws_url} within {self.timeout:g}s",
                    env_url=self.ws_url,
                ) from None
            rcvd = exc.rcvd
            if rcvd is not None and rcvd.code == 1009 or "1009" in str(exc):
                raise EnvProtocolError(
                    f"{verb}: the server sent a frame larger than {self.max_frame_bytes} bytes",
                    env_url=self.ws_url,
                    code="FRAME_TOO_LARGE",
                ) from None
            reason = f" ({rcvd.code} {rcvd.reason})" if rcvd is not None else ""
            raise EnvClosedError(
                f"{verb}: the server closed the session{reason}", env_url=self.ws_url
            ) from None
        finally:
            deadline.cancel()
        self.last_latency_s = time.perf_counter() - started
        if isinstance(raw, bytes):
            await self._drop()
            raise EnvProtocolError(f"{verb}: the server sent a binary frame", env_url=self.ws_url)
        try:
            message = _loads(raw)
        except ValueError as exc:
            await self._drop()
            raise EnvProtocolError(
                f"{verb}: the server sent a frame that is not JSON ({exc}): {raw[:200]!r}",
                env_url=self.ws_url,
            ) from None
        if not isinstance(message, dict):
            await self._drop()
            raise EnvProtocolError(
                f"{verb}: the server sent a non-object frame: {raw[:200]!r}", env_url=self.ws_url
            )
        if message.get("type") == "error":
            error = _error_from_frame(message.get("data"), self.ws_url, verb)
            if error.code not in _RECOVERABLE_CODES:
                await self._drop()
            raise error
        return message

    async def reset(self, **kwargs: Any) -> StepResult:
        """Start an episode; keyword arguments go to the env's ``reset()``.

        A reset with these arguments sent ahead (``step(..., then_reset=kwargs)``,
        ``send_reset(**kwargs)``) is not sent again: its reply is read.

        Raises:
            EnvCapacityError: The server is at its session limit (retry later).
            EnvError: Any other failure, typed by what went wrong.
        """
        if self._ahead is not None and self._ahead == kwargs:
            self._ahead = None
            return self._observation(await self._request(None, "reset"), "reset")
        message = await self._request({"type": "reset", "data": kwargs}, "reset")
        return self._observation(message, "reset")

    async def send_reset(self, **kwargs: Any) -> None:
        """Send a reset now and leave its reply unread: ``reset(**kwargs)`` reads it.

        For a session opened before its episode starts (the run's first ones). Any other
        request first reads and drops that reply.

        Raises:
            EnvError: The session could not be opened.
        """
        if self._state == "unopened":
            await self.connect()
        if self._state == "closed" or self._ws is None:
            raise EnvClosedError("reset: the session is closed", env_url=self.ws_url)
        if self._ahead is not None:
            await self._skip_ahead()
        self._ahead = kwargs
        with contextlib.suppress(ConnectionClosed):  # the reply, or the close, is read later
            await self._ws.send(json.dumps({"type": "reset", "data": kwargs}))

    async def step(
        self, action: dict[str, Any], *, then_reset: dict[str, Any] | None = None
    ) -> StepResult:
        """Send one action (its fields, unwrapped) and return the env's answer.

        ``then_reset``: the payload of the next episode's reset, sent right behind the action
        (this step being known to be the episode's last); ``reset`` reads its reply.
        """
        message = await self._request(
            {"type": "step", "data": action}, "step", then=_reset_frame(then_reset)
        )
        return self._observation(message, "step")

    async def step_while(
        self,
        action: dict[str, Any],
        work: Callable[[], Awaitable[None]],
        *,
        then_reset: dict[str, Any] | None = None,
    ) -> StepResult:
        """``step``, doing ``work`` while the env works on the action.

        ``work`` runs once the frame is sent and before its reply is read; the request's
        deadline is moved by the time it takes. If it fails, the reply is never read: the
        socket is dropped and its error raised.
        """
        message = await self._request(
            {"type": "step", "data": action}, "step", work, then=_reset_frame(then_reset)
        )
        return self._observation(message, "step")

    async def _skip_ahead(self) -> None:
        """Read and drop the reply of the reset sent ahead: another request comes first.

        An error frame that leaves the session usable is dropped with it; one that ends the
        session is raised.
        """
        self._ahead = None
        try:
            await self._request(None, "reset")
        except EnvError:
            if self._state != "open":
                raise

    async def _meanwhile(self, work: Callable[[], Awaitable[None]], deadline: _Deadline) -> None:
        loop = asyncio.get_running_loop()
        began = loop.time()
        try:
            await work()
        except BaseException:
            await self._drop()
            raise
        deadline.extend(loop.time() - began)

    async def state(self) -> dict[str, Any]:
        """Return the env's ``state`` (episode_id, step_count and env fields)."""
        message = await self._request({"type": "state"}, "state")
        if message.get("type") != "state" or not isinstance(message.get("data"), dict):
            raise EnvProtocolError(
                f"state: expected a state frame, got {json.dumps(message)[:200]}",
                env_url=self.ws_url,
            )
        data: dict[str, Any] = message["data"]
        return data

    def _observation(self, message: dict[str, Any], verb: str) -> StepResult:
        if message.get("type") != "observation":
            raise EnvProtocolError(
                f"{verb}: expected an observation frame, got {json.dumps(message)[:200]}",
                env_url=self.ws_url,
            )
        return parse_step_payload(message.get("data"), f"{verb} reply from {self.ws_url}")

    async def close(self) -> None:
        """Send ``close`` and shut the socket. Safe to call more than once."""
        if self._state == "closed":
            return
        ws, self._ws, self._state, self._ahead = self._ws, None, "closed", None
        if ws is None:
            return
        try:
            async with asyncio.timeout(2):
                await ws.send(json.dumps({"type": "close"}))
                await ws.close()
        except (ConnectionClosed, TimeoutError, OSError):
            pass
        finally:
            if ws.transport is not None:
                ws.transport.abort()

    async def _drop(self) -> None:
        """Abandon the socket without a handshake (after a timeout or a broken frame)."""
        ws, self._ws, self._state, self._ahead = self._ws, None, "closed", None
        if ws is not None and ws.transport is not None:
            ws.transport.abort()
