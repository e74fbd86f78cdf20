"""The env under validation, and the tools every check uses to play episodes against it.

A ``Subject`` holds what is known about the env (folder, manifest, URL, schemas, taskset, the
results so far) and records every exchange of every episode, so that the checks that judge
the whole run (reward well-formedness, observation schema, latency) see all of them. Episodes
go through ``taskhub.env.EnvClient`` (or the HTTP fallback), each request under a deadline and
each frame under a size limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import statistics
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx

from taskhub import (
    CheckResult,
    EnvCapacityError,
    EnvError,
    Task,
    Taskset,
    canonical_json,
)
from taskhub.env import (
    EnvClient,
    EnvSession,
    LocalServer,
    StepResult,
    launch_server,
    open_session,
    wait_healthy,
)
from taskhub.models import action_properties, text_field

from ._check import JsonObject
from ._config import ValidationConfig
from ._manifest import Manifest
from ._policy import Policy

logger = logging.getLogger(__name__)

TargetKind = Literal["folder", "url", "git", "builtin"]
Transport = Literal["ws", "http"]
#: Most exchanges kept for the run-wide checks (each is small; the newest are dropped).
MAX_EXCHANGES = 20_000
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


def observation_key(observation: dict[str, Any]) -> str:
    """Canonical text of an observation without ``metadata`` (0.4+ servers put timings there)."""
    return canonical_json({k: v for k, v in observation.items() if k != "metadata"})


class TracedSession:
    """An ``EnvSession`` that records each exchange into the subject."""

    def __init__(self, inner: EnvSession, subject: Subject) -> None:
        """Wrap ``inner``; exchanges are credited to the subject's current check."""
        self.inner = inner
        self.subject = subject

    async def _call(self, op: Literal["reset", "step", "state"], request: Any, call: Any) -> Any:
        exchange = Exchange(self.subject.current_check, op, request)
        started = time.perf_counter()
        try:
            result = await call
        except EnvError as exc:
            exchange.error = f"{type(exc).__name__}: {exc}"
            exchange.code = exc.code
            raise
        finally:
            exchange.latency_s = time.perf_counter() - started
            self.subject.record(exchange)
        exchange.reply = frame_of(result) if isinstance(result, StepResult) else result
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
            states: Include the ``state()`` snapshots (they carry the episode id).
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
            frames.append(self.states)
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
class Subject:
    """An env being validated: what is known about it, and the run's shared measurements."""

    target: str
    kind: TargetKind
    config: ValidationConfig
    policy: Policy
    http: httpx.AsyncClient
    folder: Path | None = None
    manifest: Manifest | None = None
    url: str | None = None
    server: LocalServer | None = None
    transport: Transport | None = None
    metadata: JsonObject | None = None
    schema: dict[str, Any] | None = None
    taskset: Taskset | None = None
    taskset_source: str | None = None
    tasks: list[Task] = field(default_factory=list)
    results: dict[str, CheckResult] = field(default_factory=dict)
    exchanges: list[Exchange] = field(default_factory=list)
    cache: dict[str, Any] = field(default_factory=dict)
    current_check: str = ""
    rss_samples_mb: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    log_dir: Path | None = None
    python: str | None = None
    episode_durations_s: list[float] = field(default_factory=list)
    on_launch: Callable[[LocalServer], None] | None = None

    # --- what the env declares ---------------------------------------------------------------

    @property
    def action_schema(self) -> dict[str, Any] | None:
        """The action JSON schema from ``/schema``."""
        return _schema_part(self.schema, "action")

    @property
    def observation_schema(self) -> dict[str, Any] | None:
        """The observation JSON schema from ``/schema``."""
        return _schema_part(self.schema, "observation")

    @property
    def reset_observation_schema(self) -> dict[str, Any] | None:
        """The reset observation schema (OpenEnv 0.10), else the observation schema."""
        return _schema_part(self.schema, "reset_observation") or self.observation_schema

    @property
    def declared_range(self) -> tuple[float, float] | None:
        """The reward range the manifest declares, if it declares one."""
        if self.manifest is None or self.manifest.validation is None:
            return None
        return self.manifest.reward_range

    @property
    def reward_range(self) -> tuple[float, float]:
        """The declared reward range, else the policy's default ``[0, 1]``."""
        return self.declared_range or self.policy.bounds.default_reward_range

    @property
    def oracle_tolerance(self) -> float:
        """Declared oracle tolerance, capped by the policy."""
        declared = self.manifest.oracle_tolerance if self.manifest else None
        return min(declared or 0.0, self.policy.bounds.max_oracle_tolerance)

    @property
    def floor_margin(self) -> float:
        """Declared floor margin, raised to the policy's minimum."""
        declared = self.manifest.floor_margin if self.manifest else None
        return max(declared or 0.0, self.policy.bounds.min_floor_margin)

    @property
    def variance_tolerance(self) -> float:
        """Declared variance tolerance, capped by the policy (the policy's bound when none)."""
        bound = self.policy.bounds.max_variance_tolerance
        declared = self.manifest.variance_tolerance if self.manifest else None
        return bound if declared is None else min(declared, bound)

    @property
    def root(self) -> Path:
        """The env folder (for checks that declare ``needs=("folder",)``)."""
        if self.folder is None:
            raise RuntimeError("this check needs an env folder")
        return self.folder

    def passed(self, check_id: str) -> bool:
        """Whether ``check_id`` ran and passed."""
        result = self.results.get(check_id)
        return result is not None and result.status == "pass"

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
    async def session(self) -> AsyncIterator[TracedSession]:
        """Open one episode session (WebSocket, or the HTTP fallback) and close it after."""
        if self.url is None:
            raise RuntimeError("no running server")
        config = self.config
        inner: EnvSession = open_session(
            self.url,
            self.transport or "ws",
            http=self.http,
            timeout=config.op_timeout_s,
            connect_timeout=config.op_timeout_s,
            max_frame_bytes=config.max_frame_bytes,
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

    def reset_kwargs(self, task: Task, *, seed: int | None = None, tag: str = "") -> JsonObject:
        """The reset kwargs of ``task``: its row, a seed and a fresh episode id."""
        kwargs: JsonObject = dict(task.reset)
        if seed is not None:
            kwargs["seed"] = seed
        elif not isinstance(kwargs.get("seed"), int):
            kwargs["seed"] = 1000 + self.tasks.index(task) if task in self.tasks else 1000
        self.cache["episodes"] = int(self.cache.get("episodes", 0)) + 1
        kwargs["episode_id"] = f"taskhub-{tag or self.current_check}-{self.cache['episodes']}"
        return kwargs

    # --- actions -------------------------------------------------------------------------

    def noop_action(self) -> JsonObject:
        """The emptiest valid action: empty strings, zeros, first enum options."""
        schema = self.action_schema
        props = action_properties(schema)
        required = set((schema or {}).get("required", []))
        return {name: empty_value(spec) for name, spec in props.items() if name in required}

    def text_field(self) -> str | None:
        """The single free-text field of the action (``answer``...), if there is one."""
        return text_field(self.action_schema)

    def oracle_actions(self, task: Task) -> list[JsonObject] | None:
        """The task's reference solution as actions: its oracle_actions, or its answer."""
        if task.oracle_actions:
            return [dict(a) for a in task.oracle_actions]
        if task.answer is None:
            return None
        if isinstance(task.answer, dict):
            return [dict(task.answer)]
        text = task.answer if isinstance(task.answer, str) else json.dumps(task.answer)
        return [{self.text_field() or "answer": text}]

    def oracle_policy(self, task: Task) -> ActionPolicy | None:
        """A policy that plays the task's reference solution, if the task carries one."""
        actions = self.oracle_actions(task)
        if actions is None:
            return None
        return lambda i, _r: actions[i] if i < len(actions) else None

    def max_steps_for(self, task: Task | None) -> int:
        """Steps allowed in a validation episode (the row's, the card's, else 50)."""
        cap = self.policy.bounds.max_episode_steps
        if task is not None and task.max_steps:
            return min(task.max_steps, cap)
        if self.taskset is not None and self.taskset.card.max_steps:
            return min(self.taskset.card.max_steps, cap)
        return min(50, cap)

    # --- the local server ----------------------------------------------------------------

    async def launch(self, env: dict[str, str] | None = None) -> LocalServer:
        """Start the env folder's server and wait until ``/health`` answers.

        Args:
            env: Variables set for the server on top of this process's environment.

        Raises:
            EnvLaunchError: The server exited before it became healthy.
            EnvTimeout: It did not become healthy in time.
        """
        folder = self.root
        sessions = self.declared_sessions or self.config.sessions
        server = launch_server(
            folder, max_sessions=sessions, log_dir=self.log_dir, python=self.python, env=env
        )
        if self.on_launch is not None:
            self.on_launch(server)
        try:
            await wait_healthy(
                self.http, server.url, timeout=self.config.startup_timeout_s, server=server
            )
        except BaseException:
            server.stop()
            raise
        self.server = server
        self.url = server.url
        return server

    @property
    def declared_sessions(self) -> int | None:
        """Sessions the manifest declares (``variables.MAX_CONCURRENT_ENVS``)."""
        return self.manifest.declared_sessions if self.manifest else None

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


def _schema_part(schema: dict[str, Any] | None, key: str) -> dict[str, Any] | None:
    part = (schema or {}).get(key)
    return part if isinstance(part, dict) and part else None


def empty_value(spec: dict[str, Any]) -> Any:
    """The emptiest value of a JSON schema property."""
    if "enum" in spec and spec["enum"]:
        return spec["enum"][0]
    if "const" in spec:
        return spec["const"]
    kind = spec.get("type")
    empties: dict[str, Any] = {
        "string": "",
        "integer": 0,
        "number": 0.0,
        "boolean": False,
        "array": [],
        "object": {},
    }
    if isinstance(kind, str):
        return empties.get(kind, "")
    return ""


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # the command name is in parentheses and may hold spaces: split after the last ')'
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 1 and fields[1] == str(pid):
            out.append(int(entry))
    return out


def process_rss_mb(pid: int) -> float | None:
    """Resident memory of ``pid`` and its children in MiB (None when unreadable)."""
    total = 0.0
    found = False
    for proc in [pid, *_children(pid)]:
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
