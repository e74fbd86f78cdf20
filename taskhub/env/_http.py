"""The HTTP fallback for servers without ``/ws``: ``POST /reset``, ``POST /step``, ``GET /state``.

HTTP carries no session: a server keeps one env for every client (or a fresh env per request),
so the runner opens at most one of these per server at a time. ``HttpDialect`` says how a
server wants its requests: the paths and whether the action is wrapped in ``{"action": ...}``.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import httpx

from taskhub._errors import (
    EnvClosedError,
    EnvConnectError,
    EnvExecutionError,
    EnvProtocolError,
    EnvTimeout,
)
from taskhub.env._client import (
    DEFAULT_MAX_FRAME_BYTES,
    DEFAULT_TIMEOUT_S,
    StepResult,
    _loads,
    parse_step_payload,
    split_base_url,
)


@dataclass(frozen=True)
class HttpDialect:
    """How an HTTP-only server wants its requests.

    Attributes:
        reset_path: Path of the reset route (``POST``).
        step_path: Path of the step route (``POST``).
        state_path: Path of the state route (``GET``), or None when the server has none.
        wrap_action: Send ``{"action": action}`` (OpenEnv's body) rather than the bare action.
    """

    reset_path: str = "/reset"
    step_path: str = "/step"
    state_path: str | None = "/state"
    wrap_action: bool = True


#: OpenEnv's own HTTP routes and bodies.
OPENENV_HTTP = HttpDialect()


class HttpEnvSession:
    """The HTTP fallback for servers without ``/ws``: ``POST /reset``, ``POST /step``.

    HTTP carries no session, so such a server keeps one env for every client: the runner opens
    at most one of these per server at a time.
    """

    def __init__(
        self,
        base_url: str,
        *,
        http: httpx.AsyncClient,
        timeout: float = DEFAULT_TIMEOUT_S,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        dialect: HttpDialect = OPENENV_HTTP,
    ) -> None:
        """Prepare a session with ``base_url`` using the given HTTP client.

        Args:
            base_url: The server.
            http: The HTTP client (and so the transport) to send requests with.
            timeout: Deadline of each request, seconds.
            max_frame_bytes: Largest reply accepted.
            dialect: The server's routes and body shape.
        """
        self.base_url, _ = split_base_url(base_url)
        self.dialect = dialect
        self.timeout = timeout
        self.max_frame_bytes = max_frame_bytes
        self._http = http
        self._closed = False
        self.last_latency_s = 0.0

    async def __aenter__(self) -> HttpEnvSession:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def _call(
        self, method: str, path: str, body: Any, verb: str, *, fresh_retry: bool = False
    ) -> Any:
        """One request under the deadline; errors become ``EnvError``s.

        ``fresh_retry``: when the request fails on a pooled keep-alive connection the server had
        closed (uvicorn closes it after an unhandled exception's 500), send it once more on a
        new connection. Only for requests that are safe to repeat (a reset starts over anyway).
        """
        if self._closed:
            raise EnvClosedError(f"{verb}: the session is closed", env_url=self.base_url)
        url = self.base_url + path
        started = time.perf_counter()
        try:
            async with asyncio.timeout(self.timeout):
                try:
                    response = await self._http.request(method, url, json=body)
                except (httpx.ReadError, httpx.RemoteProtocolError):
                    if not fresh_retry:
                        raise
                    response = await self._http.request(method, url, json=body)
        except TimeoutError:
            raise EnvTimeout(
                f"{verb}: no reply from {url} within {self.timeout:g}s", env_url=url
            ) from None
        except httpx.HTTPError as exc:
            raise EnvConnectError(f"{verb}: cannot reach {url}: {exc}", env_url=url) from None
        self.last_latency_s = time.perf_counter() - started
        if len(response.content) > self.max_frame_bytes:
            raise EnvProtocolError(
                f"{verb}: reply larger than {self.max_frame_bytes} bytes", env_url=url
            )
        if response.status_code >= 500:
            raise EnvExecutionError(
                f"{verb}: HTTP {response.status_code}: {response.text[:300]}",
                env_url=url,
                code=str(response.status_code),
            )
        if response.status_code >= 400:
            raise EnvProtocolError(
                f"{verb}: HTTP {response.status_code}: {response.text[:300]}",
                env_url=url,
                code="VALIDATION_ERROR"
                if response.status_code == 422
                else str(response.status_code),
            )
        try:
            return _loads(response.content)
        except ValueError as exc:
            raise EnvProtocolError(
                f"{verb}: reply is not JSON ({exc}): {response.text[:200]!r}", env_url=url
            ) from None

    async def reset(self, **kwargs: Any) -> StepResult:
        """``POST /reset`` with the kwargs as the body."""
        path = self.dialect.reset_path
        body = await self._call("POST", path, kwargs, "reset", fresh_retry=True)
        return parse_step_payload(body, f"reset reply from {self.base_url}")

    async def step(self, action: dict[str, Any]) -> StepResult:
        """``POST /step`` with ``{"action": action}`` (or the bare action, by dialect)."""
        payload = {"action": action} if self.dialect.wrap_action else action
        body = await self._call("POST", self.dialect.step_path, payload, "step")
        return parse_step_payload(body, f"step reply from {self.base_url}")

    async def state(self) -> dict[str, Any]:
        """``GET /state``."""
        if self.dialect.state_path is None:
            raise EnvProtocolError(
                f"state: {self.base_url} has no state route", env_url=self.base_url
            )
        body = await self._call("GET", self.dialect.state_path, None, "state", fresh_retry=True)
        if not isinstance(body, dict):
            raise EnvProtocolError(f"state: expected an object, got {body!r:.200}")
        return body

    async def close(self) -> None:
        """Forget the session (HTTP has nothing to close)."""
        self._closed = True


async def fetch_json(
    http: httpx.AsyncClient,
    base_url: str,
    path: str,
    *,
    timeout: float = 10.0,
    max_bytes: int = DEFAULT_MAX_FRAME_BYTES,
) -> Any:
    """GET ``base_url + path`` and return its JSON body.

    Raises:
        EnvConnectError: The server cannot be reached or answers an HTTP error.
        EnvTimeout: No answer within ``timeout``.
        EnvProtocolError: The body is not JSON or is too large.
    """
    url = split_base_url(base_url)[0] + path
    try:
        async with asyncio.timeout(timeout):
            async with http.stream("GET", url) as response:
                body = b""
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > max_bytes:
                        raise EnvProtocolError(
                            f"GET {url}: body larger than {max_bytes} bytes", env_url=url
                        )
    except TimeoutError:
        raise EnvTimeout(f"GET {url}: no answer within {timeout:g}s", env_url=url) from None
    except httpx.HTTPError as exc:
        raise EnvConnectError(f"GET {url}: {exc}", env_url=url) from None
    if response.status_code >= 400:
        raise EnvConnectError(
            f"GET {url}: HTTP {response.status_code}", env_url=url, code=str(response.status_code)
        )
    try:
        return _loads(body)
    except ValueError as exc:
        raise EnvProtocolError(f"GET {url}: body is not JSON ({exc})", env_url=url) from None
