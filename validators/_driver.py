"""The driver of a running env: sessions, episodes, the local server, and every exchange.

Episodes go through ``taskhub.env.EnvClient`` (or the HTTP fallback in the dialect the server
speaks), each request under a deadline and each frame under a size limit. Every exchange of
every episode is recorded, so that the checks that judge the whole run (reward
well-formedness, observation schema, latency) see all of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import statistics
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx

from taskhub import EnvCapacityError, EnvError, EnvTimeout, canonical_json
from taskhub.env import (
    OPENENV_HTTP,
    EnvClient,
    EnvSession,
    HttpDialect,
    LocalServer,
    StepResult,
    child_pids,
    open_session,
    retry_after,
    split_base_url,
    start_server,
)

from ._actions import ChoiceHint
from ._config import ValidationConfig
from ._json import JsonObject

logger = logging.getLogger(__name__)

Transport = Literal["ws", "http"]
#: Most exchanges kept for the run-wide checks (each is small; the newest are dropped).
MAX_EXCHANGES = 20_000
#: Times a probe answered 429 (rate limited) is sent again.
THROTTLE_RETRIES = 3
#: Seconds a new session waits out CAPACITY_REACHED while earlier sessions close.
CAPACITY_WAIT_S = 5.0


@dataclass
class Exchange:
    """One request to the env and what came back, as a check saw it."""

    check: str
    op: Literal["reset", "step", "state"]
    request: JsonObject | None
    reply: JsonObject | None = None
    error: str | None = None
    code: str | None = None
    latency_s: float = 0.0
    after_done: bool = False
    """A step sent on a session whose episode had ended (``runtime.step_after_done`` judges
    what the env did with it)."""

    def evidence(self) -> JsonObject:
        """The exchange as report evidence: the frame sent and the frame received."""
        sent: JsonObject = {"type": self.op}
        if self.request is not None:
            sent["data"] = _clip(self.request)
        out: JsonObject = {"check": self.check, "sent": sent}
        if self.reply is not None:
            out["received"] = _clip(self.reply)
        if self.error is not None:
            out["error"] = self.error[:500]
        return out


def _clip(value: Any, limit: int = 2000) -> Any:
    """Keep evidence small: a value whose JSON exceeds ``limit`` becomes a truncated string."""
    text = canonical_json(value)
    return value if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"


def frame_of(result: StepResult) -> JsonObject:
    """Rebuild the ``data`` of the observation frame a StepResult was read from."""
    data: JsonObject = {
        "observation": result.observation,
        "reward": result.reward,
        "done": result.done,
    }
    if result.metadata is not None:
        data["metadata"] = result.metadata
    return data


#: Words of a field name that mark a measured duration (``execution_time``, ``latency_ms``).
_DURATION_WORDS = frozenset({"elapsed", "duration", "latency", "runtime", "took"})
_DURATION_ENDINGS = frozenset({"time", "ms", "sec", "secs", "seconds"})


def is_duration_field(name: str) -> bool:
    """Whether a field named ``name`` reads as a measured duration.

    ``execution_time``, ``elapsed_s``, ``latencyMs`` and ``step_duration`` do; ``time`` or
    ``time_remaining`` (a game clock) do not.
    """
    words = re.findall(r"[a-z]+|[A-Z][a-z]*", name)
    words = [w.lower() for w in words]
    if not words:
        return False
    if _DURATION_WORDS.intersection(words):
        return True
    return len(words) > 1 and (words[-1] in _DURATION_ENDINGS or words[-1] == "s")


def _without_durations(value: Any, depth: int = 0) -> Any:
    if depth > 32:
        return value
    if isinstance(value, dict):
        return {
            k: "<duration>"
            if isinstance(v, float) and is_duration_field(str(k))
            else _without_durations(v, depth + 1)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_without_durations(v, depth + 1) for v in value]
    return value


def observation_key(observation: dict[str, Any]) -> str:
    """Canonical text of an observation for comparisons.

    ``metadata`` is left out (0.4+ servers put timings there), and so are measured durations
    (a float under a name such as ``execution_time``: wall-clock time, which no seed controls).
    """
    return canonical_json(
        _without_durations({k: v for k, v in observation.items() if k != "metadata"})
    )


class TracedSession:
    """An ``EnvSession`` that records each exchange into the driver."""

    def __init__(self, inner: EnvSession, driver: EnvDriver) -> None:
        """Wrap ``inner``; exchanges are credited to the driver's current check."""
        self.inner = inner
        self.driver = driver
        self.done = False

    async def _call(self, op: Literal["reset", "step", "state"], request: Any, call: Any) -> Any:
        exchange = Exchange(self.driver.current_check, op, request)
        exchange.after_done = op == "step" and self.done
        started = time.perf_counter()
        try:
            result = await call
        except EnvError as exc:
            exchange.error = f"{type(exc).__name__}: {exc}"
            exchange.code = exc.code
            if isinstance(exc, EnvTimeout):
                self.driver.timeouts += 1
            raise
        finally:
            exchange.latency_s = time.perf_counter() - started
            self.driver.record(exchange)
        self.driver.answered += 1
        self.driver.last_answer_at = time.monotonic()
        exchange.reply = frame_of(result) if isinstance(result, StepResult) else result
        if isinstance(result, StepResult):
            # a terminal reply that repeats the last one and pays nothing answers a step after
            # the end, even when another client ended it (one env shared by every client)
            last = self.driver.last_terminal
            repeat = result.done and result.reward is None and result.observation == last
            exchange.after_done = exchange.after_done or (op == "step" and repeat)
            self.done = result.done
            if result.done:
                self.driver.last_terminal = result.observation
        return result

    async def reset(self, **kwargs: Any) -> StepResult:
        """Start an episode."""
        result: StepResult = await self._call("reset", kwargs, self.inner.reset(**kwargs))
        return result

    async def step(self, action: dict[str, Any]) -> StepResult:
        """Send one action."""
        result: StepResult = await self._call("step", action, self.inner.step(action))
        return result

    async def state(self) -> dict[str, Any]:
        """Return the env's state."""
        result: dict[str, Any] = await self._call("state", None, self.inner.state())
        return result

    async def close(self) -> None:
        """End the session."""
        await self.inner.close()


@dataclass
class Trajectory:
    """One episode as played: the reset, every step, optional state snapshots, the error."""

    reset_kwargs: JsonObject
    first: StepResult | None = None
    steps: list[tuple[JsonObject, StepResult]] = field(default_factory=list)
    states: list[JsonObject] = field(default_factory=list)
    final_state: JsonObject | None = None
    error: EnvError | None = None
    duration_s: float = 0.0

    @property
    def done(self) -> bool:
        """Whether the env ended the episode."""
        if self.steps:
            return self.steps[-1][1].done
        return self.first is not None and self.first.done

    @property
    def total_reward(self) -> float:
        """Sum of the step rewards (null rewards count as 0)."""
        return sum(r.reward or 0.0 for _, r in self.steps)

    @property
    def observations(self) -> list[dict[str, Any]]:
        """The reset observation and every step observation, in order."""
        first = [self.first.observation] if self.first is not None else []
        return first + [r.observation for _, r in self.steps]

    def pre_done_observations(self) -> list[dict[str, Any]]:
        """Observations the agent sees while it still has to act (the final one left out)."""
        out = [self.first.observation] if self.first is not None else []
        out += [r.observation for _, r in self.steps if not r.done]
        return out

    def signature(self, *, states: bool = True) -> str:
        """Canonical text of the trajectory: observations (no metadata), rewards, dones.

        Args:
            states: Include the ``state()`` snapshots, without their episode id (an env whose
                reset() takes none names its episodes itself, a fresh id each time).
        """
        frames: list[Any] = []
        if self.first is not None:
            frames.append([observation_key(self.first.observation), self.first.done])
        for action, result in self.steps:
            frames.append(
                [
                    canonical_json(action),
                    observation_key(result.observation),
                    result.reward,
                    result.done,
                ]
            )
        frames.append(type(self.error).__name__ if self.error else None)
        if states:
            frames.append(
                [
                    {k: v for k, v in s.items() if k != "episode_id"} if isinstance(s, dict) else s
                    for s in self.states
                ]
            )
        return canonical_json(frames)

    def describe(self, limit: int = 6) -> JsonObject:
        """A short JSON picture of the episode for evidence."""
        return {
            "reset": _clip(self.reset_kwargs, 400),
            "initial_observation": _clip(self.first.observation, 800) if self.first else None,
            "steps": [
                {
                    "action": _clip(a, 300),
                    "reward": r.reward,
                    "done": r.done,
                    "observation": _clip(r.observation, 500),
                }
                for a, r in self.steps[:limit]
            ],
            "n_steps": len(self.steps),
            "total_reward": self.total_reward,
            "done": self.done,
            "error": f"{type(self.error).__name__}: {self.error}"[:400] if self.error else None,
        }


ActionPolicy = Callable[[int, StepResult], JsonObject | None]


@dataclass
class EnvDriver:
    """Talks to the env's server: launches it (a folder), opens sessions, plays episodes.

    What the driver has learnt about the server's wire (transport, HTTP dialect, schemas) is
    set by the protocol discovery (``protocol.WIRE``) before the first episode.
    """

    config: ValidationConfig
    http: httpx.AsyncClient
    folder: Path | None = None
    """The env folder to launch (None for a URL)."""
    url: str | None = None
    """The running server's base URL (None when it is down)."""
    server: LocalServer | None = None
    """The launched server process."""
    transport: Transport | None = None
    """How episodes run: ``ws``, ``http``, or None when neither works."""
    dialect: HttpDialect = OPENENV_HTTP
    """Routes and body shapes of the HTTP transport."""
    schema: dict[str, Any] | None = None
    """The JSON schemas of action, observation, state (``/schema``)."""
    sessions: int | None = None
    """Sessions asked of a launched server (``MAX_CONCURRENT_ENVS``)."""
    log_dir: Path | None = None
    python: str | None = None
    on_launch: Callable[[LocalServer], None] | None = None
    exchanges: list[Exchange] = field(default_factory=list)
    last_terminal: JsonObject | None = None
    """The observation of the last reply, in any session, that ended an episode."""
    current_check: str = ""
    answered: int = 0
    """Episode requests (reset, step, state) the env has answered so far."""
    last_answer_at: float = 0.0
    """``time.monotonic()`` of the last such answer."""
    timeouts: int = 0
    """Episode requests that outlasted their deadline so far."""
    rss_samples_mb: list[float] = field(default_factory=list)
    episode_durations_s: list[float] = field(default_factory=list)
    episodes: int = 0
    """Episode ids handed out so far."""
    health_path: str | None = None
    """The path that said a launched server was up (``/health``, or ``/`` without one)."""
    first_action: JsonObject | None = None
    """The first action the env accepted, when it refused the emptiest one."""
    choice_hint: ChoiceHint | None = None
    """The action field that plays a choice the observation lists, when that is how the env
    accepted its first action (the do-nothing policy then follows the list)."""
    op_timeout_s: float = 0.0
    """Deadline of one request: the configured one, raised for an env whose resets are slow
    (``protocol.WIRE`` measures them)."""

    def __post_init__(self) -> None:
        self.op_timeout_s = self.op_timeout_s or self.config.op_timeout_s

    @property
    def slowdown(self) -> float:
        """How much longer than configured a request may take on this env (1 when not slow)."""
        return max(self.op_timeout_s / self.config.op_timeout_s, 1.0)

    @property
    def serves_state(self) -> bool:
        """Whether the env has a state route: every ``/ws`` session does, HTTP when it is found.

        Checks that read ``state()`` only as more evidence take snapshots when it is true;
        ``runtime.state_contract`` judges the route itself.
        """
        return self.transport != "http" or self.dialect.state_path is not None

    def in_transport(self, ws: str, http: str) -> str:
        """The words of a remediation that fit how episodes run: ``http`` over HTTP, else ``ws``.

        A remediation names the transport the env plays over: a server that speaks only HTTP
        is not told about WebSocket sessions or frames.
        """
        return http if self.transport == "http" else ws

    # --- what the server declares --------------------------------------------------------

    @property
    def action_schema(self) -> dict[str, Any] | None:
        """The action JSON schema."""
        return _schema_part(self.schema, "action")

    @property
    def observation_schema(self) -> dict[str, Any] | None:
        """The observation JSON schema."""
        return _schema_part(self.schema, "observation")

    @property
    def reset_observation_schema(self) -> dict[str, Any] | None:
        """The reset observation schema (OpenEnv 0.10), else the observation schema."""
        return _schema_part(self.schema, "reset_observation") or self.observation_schema

    def episode_id(self, tag: str = "") -> str:
        """A fresh episode id naming the check that asked for it."""
        self.episodes += 1
        return f"taskhub-{tag or self.current_check}-{self.episodes}"

    # --- recording -----------------------------------------------------------------------

    def record(self, exchange: Exchange) -> None:
        """Keep an exchange for the run-wide checks."""
        if len(self.exchanges) < MAX_EXCHANGES:
            self.exchanges.append(exchange)

    def latencies(self, op: str) -> list[float]:
        """Latencies of every successful ``op`` exchange, in seconds."""
        return [e.latency_s for e in self.exchanges if e.op == op and e.error is None]

    # --- sessions and episodes -----------------------------------------------------------

    @contextlib.asynccontextmanager
    async def session(
        self, transport: Transport | None = None, dialect: HttpDialect | None = None
    ) -> AsyncIterator[TracedSession]:
        """Open one episode session and close it after.

        Args:
            transport: ``ws`` or ``http``; the server's own transport when None.
            dialect: The HTTP dialect; the learnt one when None.
        """
        if self.url is None:
            raise RuntimeError("no running server")
        config = self.config
        inner: EnvSession = open_session(
            self.url,
            transport or self.transport or "ws",
            http=self.http,
            timeout=self.op_timeout_s,
            connect_timeout=config.op_timeout_s,
            max_frame_bytes=config.max_frame_bytes,
            dialect=dialect or self.dialect,
        )
        if isinstance(inner, EnvClient):
            await inner.connect()
        traced = TracedSession(inner, self)
        try:
            yield traced
        finally:
            with contextlib.suppress(EnvError, OSError):
                await inner.close()

    @contextlib.asynccontextmanager
    async def episode(self, kwargs: JsonObject) -> AsyncIterator[tuple[TracedSession, StepResult]]:
        """Open a session and reset it, waiting out ``CAPACITY_REACHED``.

        A server at capacity answers the first frame with ``CAPACITY_REACHED`` and closes the
        socket; sessions of earlier checks may still be closing on its side, so a new session
        is tried until ``CAPACITY_WAIT_S`` has passed.
        """
        deadline = time.monotonic() + CAPACITY_WAIT_S
        delay = 0.05
        while True:
            stack = contextlib.AsyncExitStack()
            session = await stack.enter_async_context(self.session())
            try:
                first = await session.reset(**kwargs)
            except EnvCapacityError:
                await stack.aclose()
                if time.monotonic() > deadline or self.transport == "http":
                    raise
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.5)
                continue
            except BaseException:
                await stack.aclose()
                raise
            break
        try:
            yield session, first
        finally:
            await stack.aclose()

    async def play(
        self,
        kwargs: JsonObject,
        policy: ActionPolicy,
        *,
        max_steps: int,
        snapshots: bool = False,
    ) -> Trajectory:
        """Play one episode in a fresh session; env errors end it and are kept, not raised.

        Args:
            kwargs: The reset kwargs.
            policy: ``(step_index, last_result) -> action``; None ends the episode early.
            max_steps: Most steps taken.
            snapshots: Call ``state()`` after the reset and after every step.
        """
        trajectory = Trajectory(reset_kwargs=dict(kwargs))
        started = time.perf_counter()
        try:
            async with self.episode(trajectory.reset_kwargs) as (session, first):
                trajectory.first = first
                await self._play_in(session, trajectory, policy, max_steps, snapshots)
        except EnvError as exc:
            trajectory.error = exc
        trajectory.duration_s = time.perf_counter() - started
        self.episode_durations_s.append(trajectory.duration_s)
        return trajectory

    async def _play_in(
        self,
        session: TracedSession,
        trajectory: Trajectory,
        policy: ActionPolicy,
        max_steps: int,
        snapshots: bool,
    ) -> None:
        result = trajectory.first
        if result is None:
            return
        if snapshots:
            trajectory.states.append(await session.state())
        for index in range(max_steps):
            if result.done:
                break
            action = policy(index, result)
            if action is None:
                break
            result = await session.step(action)
            trajectory.steps.append((action, result))
            if snapshots and not result.done:
                trajectory.states.append(await session.state())
            elif snapshots:
                with contextlib.suppress(EnvError):
                    trajectory.final_state = await session.state()

    # --- the local server ----------------------------------------------------------------

    async def launch(self, env: dict[str, str] | None = None) -> LocalServer:
        """Start the env folder's server and wait until it answers.

        Args:
            env: Variables set for the server on top of this process's environment.

        Raises:
            EnvLaunchError: The server exited before it became healthy.
            EnvTimeout: It did not become healthy in time.
        """
        if self.folder is None:
            raise RuntimeError("only an env folder can be launched")
        server, self.health_path = await start_server(
            self.http,
            self.folder,
            timeout=self.config.startup_timeout_s,
            on_launch=self.on_launch,
            max_sessions=self.sessions or self.config.sessions,
            log_dir=self.log_dir,
            python=self.python,
            env=env,
        )
        self.server = server
        self.url = server.url
        return server

    def stop(self) -> None:
        """Stop the launched server, if any."""
        if self.server is not None:
            self.server.stop()

    def sample_rss(self) -> float | None:
        """Read the launched server's resident memory (MiB, children included)."""
        if self.server is None or self.server.process.poll() is not None:
            return None
        rss = process_rss_mb(self.server.process.pid)
        if rss is not None:
            self.rss_samples_mb.append(rss)
        return rss


@dataclass
class HttpReply:
    """An HTTP answer as a check saw it."""

    path: str
    status: int | None = None
    body: bytes = b""
    json: Any = None
    error: str | None = None
    latency_s: float = 0.0

    def evidence(self) -> JsonObject:
        """Status and body excerpt, for reports."""
        out: JsonObject = {
            "request": self.path,
            "status": self.status,
            "body": self.body[:400].decode("utf-8", "replace"),
        }
        if self.error:
            out["error"] = self.error
        return out


async def http_call(
    driver: EnvDriver,
    path: str,
    *,
    method: str = "GET",
    json_body: Any = None,
    content: bytes | None = None,
) -> HttpReply:
    """One HTTP request under the op deadline, reading at most ``max_frame_bytes``."""
    reply = HttpReply(f"{method} {path}")
    if driver.url is None:
        reply.error = "no server"
        return reply
    url = split_base_url(driver.url)[0] + path
    started = time.perf_counter()
    limit = driver.config.max_frame_bytes
    kwargs: dict[str, Any] = {}
    if content is not None:
        kwargs = {"content": content, "headers": {"content-type": "application/json"}}
    elif json_body is not None:
        kwargs = {"json": json_body}
    kwargs["timeout"] = httpx.Timeout(driver.op_timeout_s, connect=5.0)
    try:
        async with asyncio.timeout(driver.op_timeout_s):
            stale_retried = False
            for attempt in range(THROTTLE_RETRIES + 1):
                reply.status, reply.body = None, b""
                try:
                    async with driver.http.stream(method, url, **kwargs) as response:
                        reply.status = response.status_code
                        async for chunk in response.aiter_bytes():
                            reply.body += chunk
                            if len(reply.body) > limit:
                                reply.error = f"body larger than {limit} bytes"
                                break
                except (httpx.ReadError, httpx.RemoteProtocolError):
                    # uvicorn closes a keep-alive connection after an unhandled exception's
                    # 500: a request on that pooled connection fails before any answer
                    if stale_retried or reply.status is not None:
                        raise
                    stale_retried = True
                    continue
                if reply.status != 429 or attempt == THROTTLE_RETRIES:
                    break
                await asyncio.sleep(retry_after(response, attempt))  # rate limited: wait
    except TimeoutError:
        reply.error = f"no answer within {driver.op_timeout_s:g}s"
    except httpx.HTTPError as exc:
        reply.error = f"{type(exc).__name__}: {exc}"
    reply.latency_s = time.perf_counter() - started
    if reply.error is None and reply.body:
        try:
            reply.json = json.loads(reply.body)
        except ValueError:
            reply.json = None
    return reply


def _show(value: Any, limit: int = 120) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


#: Characters kept before the first difference of two long strings shown side by side.
_LEAD = 30


def _around_difference(a: str, b: str, limit: int = 110) -> tuple[str, str]:
    """Two long strings cut to where they first differ (``...`` marks what was left out)."""
    if max(len(a), len(b)) <= limit:
        return a, b
    first = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
    first = min(len(a), len(b)) if first is None else first
    start = max(0, first - _LEAD)
    if start == 0:
        return a, b
    return "..." + a[start:], "..." + b[start:]


def field_diff(before: Any, after: Any, path: str = "", limit: int = 8) -> list[str]:
    """Where two JSON values differ, field by field: ``path: before -> after``."""
    out: list[str] = []

    def walk(a: Any, b: Any, where: str) -> None:
        if len(out) >= limit or a == b:
            return
        if isinstance(a, dict) and isinstance(b, dict):
            for key in sorted(set(a) | set(b), key=str):
                walk(a.get(key), b.get(key), f"{where}.{key}" if where else str(key))
            return
        if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
            for index, (x, y) in enumerate(zip(a, b, strict=True)):
                walk(x, y, f"{where}[{index}]")
            return
        if isinstance(a, str) and isinstance(b, str):
            a, b = _around_difference(a, b)
        out.append(f"{where or '(root)'}: {_show(a)} -> {_show(b)}")

    walk(before, after, path)
    return out


def masked(value: Any, secrets: set[str]) -> Any:
    """``value`` with every string in ``secrets`` (echoed episode ids) replaced by ``<id>``."""
    if isinstance(value, dict):
        return {k: masked(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [masked(v, secrets) for v in value]
    if isinstance(value, str):
        for secret in secrets:
            if secret and secret in value:
                value = value.replace(secret, "<id>")
    return value


#: State fields that legitimately differ between two resets of the same task.
VOLATILE_STATE = frozenset({"episode_id", "step_count"})


def stable_state(state: dict[str, Any]) -> str:
    """Canonical text of a state without its per-episode identity."""
    return canonical_json({k: v for k, v in state.items() if k not in VOLATILE_STATE})


def _schema_part(schema: dict[str, Any] | None, key: str) -> dict[str, Any] | None:
    part = (schema or {}).get(key)
    return part if isinstance(part, dict) and part else None


def process_rss_mb(pid: int) -> float | None:
    """Resident memory of ``pid`` and its children in MiB (None when unreadable)."""
    total = 0.0
    found = False
    for proc in [pid, *child_pids(pid)]:
        try:
            for line in Path(f"/proc/{proc}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) / 1024
                    found = True
        except (OSError, ValueError):
            continue
    return total if found else None


def open_fds(pid: int) -> int | None:
    """Number of open file descriptors of ``pid`` (None when unreadable)."""
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values`` by linear interpolation."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def median(values: list[float]) -> float:
    """The median of ``values``."""
    return float(statistics.median(values))
