"""The HTTP fallback for servers without ``/ws``: ``POST /reset``, ``POST /step``, ``GET /state``.

HTTP carries no session: a server keeps one env for every client (or a fresh env per request),
so the runner opens at most one of these per server at a time. ``HttpDialect`` says how a
server wants its requests (the paths, whether the action is wrapped in ``{"action": ...}``,
which reset kwargs it takes); ``learn_http_dialect`` reads it from the server's
``/openapi.json``. Replies are read whether the observation is nested under ``observation``
(OpenEnv's body) or is the reply itself (most hand-rolled servers).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx

from taskhub._errors import (
    EnvClosedError,
    EnvConnectError,
    EnvExecutionError,
    EnvProtocolError,
    EnvTimeout,
)
from taskhub._schema import HttpDialect
from taskhub.env._client import (
    DEFAULT_MAX_FRAME_BYTES,
    DEFAULT_TIMEOUT_S,
    StepResult,
    _as_reward,
    _loads,
    parse_step_payload,
    split_base_url,
)

__all__ = [
    "OPENENV_HTTP",
    "HttpDialect",
    "HttpEnvSession",
    "fetch_json",
    "learn_http_dialect",
    "parse_http_reply",
    "request_schema",
    "response_schema",
    "retry_after",
]

#: Times a request answered 429 (rate limited) is sent again.
THROTTLE_RETRIES = 3


def retry_after(response: httpx.Response, attempt: int = 0) -> float:
    """Seconds to wait after a 429: its ``Retry-After`` (0.2 to 5), else 1, 2, 4... by attempt."""
    try:
        return min(max(float(response.headers["retry-after"]), 0.2), 5.0)
    except (KeyError, ValueError):
        return min(2.0**attempt, 5.0)


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
        self._session: dict[str, Any] = {}

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
        # the session's deadline governs, whatever the shared client's own timeout says
        limit = httpx.Timeout(self.timeout, connect=min(self.timeout, 10.0))
        try:
            async with asyncio.timeout(self.timeout):
                try:
                    response = await self._http.request(method, url, json=body, timeout=limit)
                except (httpx.ReadError, httpx.RemoteProtocolError):
                    if not fresh_retry:
                        raise
                    response = await self._http.request(method, url, json=body, timeout=limit)
                for attempt in range(THROTTLE_RETRIES):
                    if response.status_code != 429:
                        break
                    # a rate-limited server: wait as it asks (within the deadline), then again
                    await asyncio.sleep(retry_after(response, attempt))
                    response = await self._http.request(method, url, json=body, timeout=limit)
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
        """``POST /reset`` with the kwargs the route takes as the body."""
        keys = self.dialect.reset_keys
        if keys is not None:
            kwargs = {k: v for k, v in kwargs.items() if k in keys}
        path = self.dialect.reset_path
        body = await self._call("POST", path, kwargs, "reset", fresh_retry=True)
        result = parse_http_reply(body, f"reset reply from {self.base_url}")
        self._session = {}
        for key in self.dialect.session_keys:
            for source in (body, result.observation):
                if isinstance(source, dict) and source.get(key) is not None:
                    self._session[key] = source[key]
                    break
        return result

    async def step(self, action: dict[str, Any]) -> StepResult:
        """``POST /step`` with ``{"action": action}`` (or the bare action, by dialect).

        The session keys the reset handed out go with it, beside the action.
        """
        payload = {"action": action} if self.dialect.wrap_action else dict(action)
        payload.update(self._session)
        body = await self._call("POST", self.dialect.step_path, payload, "step")
        return parse_http_reply(body, f"step reply from {self.base_url}", step=True)

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


#: Reply keys that are not part of a top-level observation.
REPLY_KEYS = frozenset({"reward", "done", "terminated", "truncated", "info", "metadata"})


def parse_http_reply(body: Any, where: str, *, step: bool = False) -> StepResult:
    """Read a reset or step reply, the observation nested (OpenEnv) or at the top level.

    A top-level reply is the observation itself, less ``reward``, ``done`` (or ``terminated``
    / ``truncated``), ``info`` and ``metadata``. A step reply must say at least one of
    ``reward`` and ``done``: ``{"status": "ok"}`` is no step result.

    Raises:
        EnvProtocolError: The reply is not an object, a step reply has neither reward nor
            done, or ``done`` is not a bool.
    """
    if not isinstance(body, dict):
        raise EnvProtocolError(f"{where}: the reply must be an object, got {body!r:.200}")
    reward = body.get("reward")
    if isinstance(reward, dict):  # {"value": 0.4, "breakdown": {...}}: the number it carries
        number = next((reward[k] for k in ("value", "total", "score") if k in reward), reward)
        body = {**body, "reward": number}
    if isinstance(body.get("observation"), dict):
        if "done" not in body and {"terminated", "truncated"} & set(body):
            body = {**body, "done": bool(body.get("terminated") or body.get("truncated"))}
        return parse_step_payload(body, where)
    if step and not {"reward", "done", "terminated", "truncated"} & set(body):
        raise EnvProtocolError(
            f"{where}: the reply carries neither an observation nor a reward or done: {body!r:.200}"
        )
    observation = {k: v for k, v in body.items() if k not in REPLY_KEYS}
    done: Any = False
    for key in ("done", "terminated", "truncated"):
        if body.get(key) is not None:
            done = body[key]
            if done is True:
                break
    if not isinstance(done, bool):
        raise EnvProtocolError(f"{where}: done must be a bool, got {done!r:.100}")
    metadata = body.get("metadata", body.get("info"))
    return StepResult(
        observation=observation,
        reward=_as_reward(body.get("reward"), where),
        done=done,
        metadata=metadata if isinstance(metadata, dict) else None,
    )


def _resolve(spec: dict[str, Any], schema: Any, depth: int = 0) -> dict[str, Any]:
    """``schema`` with its ``$ref`` (and a lone ``allOf``) resolved inside the OpenAPI ``spec``."""
    if not isinstance(schema, dict) or depth > 8:
        return {}
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        node: Any = spec
        for part in ref[2:].split("/"):
            node = node.get(part) if isinstance(node, dict) else None
        return _resolve(spec, node, depth + 1)
    for key in ("allOf", "anyOf", "oneOf"):
        options = schema.get(key)
        if not isinstance(options, list):
            continue
        typed = [o for o in options if not (isinstance(o, dict) and o.get("type") == "null")]
        if len(typed) == 1:  # Optional[Model], or a lone allOf
            return _resolve(spec, typed[0], depth + 1)
    return schema


def _route(paths: dict[str, Any], verb: str, method: str) -> str | None:
    """The path of the ``verb`` route (``/reset``, else the shortest ``.../reset``)."""
    found = [
        path
        for path, item in paths.items()
        if isinstance(item, dict)
        and method in item
        and path.rstrip("/").rsplit("/", 1)[-1] == verb
        and "{" not in path
    ]
    if f"/{verb}" in found:
        return f"/{verb}"
    return min(found, key=len) if found else None


def request_schema(spec: dict[str, Any], path: str, method: str = "post") -> dict[str, Any]:
    """The resolved JSON schema of the request body of ``method path`` (empty when none)."""
    item = (spec.get("paths") or {}).get(path) or {}
    operation = item.get(method) if isinstance(item, dict) else None
    if not isinstance(operation, dict):
        return {}
    content = (operation.get("requestBody") or {}).get("content") or {}
    media = content.get("application/json") if isinstance(content, dict) else None
    return _resolve(spec, (media or {}).get("schema"))


def response_schema(spec: dict[str, Any], path: str, method: str = "post") -> dict[str, Any]:
    """The resolved JSON schema of the 200 reply of ``method path`` (empty when none)."""
    item = (spec.get("paths") or {}).get(path) or {}
    operation = item.get(method) if isinstance(item, dict) else None
    if not isinstance(operation, dict):
        return {}
    reply = (operation.get("responses") or {}).get("200") or {}
    content = reply.get("content") if isinstance(reply, dict) else None
    media = content.get("application/json") if isinstance(content, dict) else None
    return _resolve(spec, (media or {}).get("schema"))


def _body_keys(schema: dict[str, Any]) -> tuple[str, ...] | None:
    """The keys a request body takes, when its schema closes the set (None: any)."""
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return None
    extra = schema.get("additionalProperties")
    if extra is False or extra is None:
        return tuple(properties)
    return None


def _named_action(spec: dict[str, Any]) -> dict[str, Any] | None:
    """The one model named ``...Action`` among the document's schemas, if there is one.

    A step route that takes an untyped body and validates it by hand still publishes the
    model it validates with.
    """
    schemas = (spec.get("components") or {}).get("schemas") or {}
    named = [name for name in schemas if str(name).lower().endswith("action")]
    return _resolve(spec, schemas[named[0]]) if len(named) == 1 else None


def learn_http_dialect(spec: Any) -> tuple[HttpDialect, dict[str, Any] | None] | None:
    """Read an HTTP server's dialect, and its action schema, from its ``/openapi.json``.

    Returns:
        ``(dialect, action_schema)``, the schema None when the step body is untyped; None
        when the document has no reset and step routes.
    """
    if not isinstance(spec, dict) or not isinstance(spec.get("paths"), dict):
        return None
    paths: dict[str, Any] = spec["paths"]
    reset, step = _route(paths, "reset", "post"), _route(paths, "step", "post")
    if reset is None or step is None:
        return None
    state = _route(paths, "state", "get")
    health = next((p for p in ("/health", "/healthz", "/ping") if p in paths), None)
    body = request_schema(spec, step)
    found = body.get("properties")
    properties: dict[str, Any] = found if isinstance(found, dict) else {}
    inner = _resolve(spec, properties["action"]) if "action" in properties else {}
    # {"action": {...}} wraps an object, and so does an untyped {"action": Any} (OpenEnv's
    # shape); {"action": "A"} is a bare body with a field "action"
    untyped = "action" in properties and not any(
        k in inner for k in ("type", "enum", "const", "anyOf", "allOf")
    )
    wrap = bool(
        (untyped or inner.get("type") == "object" or "properties" in inner or "oneOf" in inner)
        and ("action" in (body.get("required") or []) or len(properties) == 1)
    )
    action: dict[str, Any] | None = inner if wrap else body
    if not action or not (action.get("properties") or action.get("oneOf") or action.get("anyOf")):
        action = None
    if not properties:
        wrap = True  # an untyped body: OpenEnv's shape is the likeliest
        action = _named_action(spec)
    reset_keys = _body_keys(request_schema(spec, reset))
    handed_out = set(_resolve(spec, response_schema(spec, reset)).get("properties") or {})
    session_keys = tuple(
        key
        for key in body.get("required") or []
        if key in handed_out and key != "action" and key in properties
    )
    if session_keys and action is not None and not wrap:
        # the action is what remains of the bare body once the session keys are set
        action = {
            **action,
            "properties": {
                k: v for k, v in (action.get("properties") or {}).items() if k not in session_keys
            },
            "required": [k for k in action.get("required") or [] if k not in session_keys],
        }
    dialect = HttpDialect(
        reset_path=reset,
        step_path=step,
        state_path=state,
        health_path=health,
        wrap_action=wrap,
        reset_keys=reset_keys,
        session_keys=session_keys,
    )
    return dialect, action


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
