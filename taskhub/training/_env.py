"""Env servers held open for a training run, and episodes played exactly as evaluation plays them.

Trainers call from synchronous code (TRL's reward functions, rollout hooks, environment
objects), while taskhub's env client is async. ``TrainingEnv`` owns an event loop on a
background thread, launches or reaches the env there once, and runs every reset, step and
reward on it. Episodes go through the evaluation agent loop itself (``run_episode``) with the
same reset payload, templates, action parsing and reward scoring as ``taskhub eval``: a prompt
rendered here is the prompt an evaluation sends, and a completion scored here gets the reward an
evaluation would give it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

import httpx

from taskhub._agent import EpisodeTrace, run_episode, template_variables
from taskhub._episode import CAPACITY_WAIT_S, EpisodePlan, plan_episode, record_episode
from taskhub._errors import AgentFormatError, ConfigError, EnvCapacityError, TaskhubError
from taskhub._rewards import BoundReward, RewardSet
from taskhub._schema import (
    ChatMessage,
    EnvInfo,
    EpisodeRecord,
    SamplingParams,
    Task,
)
from taskhub._taskset import Taskset
from taskhub._templates import Templates
from taskhub._tls import default_ssl_context
from taskhub._tools import Toolbox
from taskhub._trust import check_remote_code
from taskhub.env._client import DEFAULT_MAX_FRAME_BYTES, EnvSession
from taskhub.env._launch import DEFAULT_STARTUP_TIMEOUT_S, EnvHandle
from taskhub.env._pool import SessionPool
from taskhub.models._base import GenerateRequest, Generation, ModelBackend

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: Run id written into the episode records a training env produces.
TRAINING_RUN_ID = "training"


class _FirstTurn(Exception):
    """Raised by the capturing model to stop an episode at its first model call."""

    def __init__(self, messages: list[ChatMessage]) -> None:
        super().__init__("first turn captured")
        self.messages = messages


class _CaptureFirstTurn:
    """A model backend that records the messages of the first call and stops the episode.

    ``tool_calling`` says which prompt is captured: ``native`` for a trainer that calls the
    env's tools itself (TRL's ``environment_factory``), ``text`` for replies parsed as text.
    """

    details: dict[str, Any] = {"policy": "capture-first-turn"}

    def __init__(self, tool_calling: str = "text") -> None:
        self.tool_calling = tool_calling

    async def generate(self, request: GenerateRequest) -> Generation:
        raise _FirstTurn(list(request.messages))

    async def aclose(self) -> None:
        return None


class ReplayModel:
    """A model backend that answers with given replies, one per call (the last one repeats).

    Used to score a trainer's completion through the evaluation loop: the episode sees exactly
    that reply, as if a model had written it.
    """

    def __init__(self, replies: Sequence[str]) -> None:
        """Answer ``replies`` in order."""
        if not replies:
            raise ValueError("ReplayModel needs at least one reply")
        self.replies = list(replies)
        self.calls = 0
        self.details: dict[str, Any] = {"policy": "replay"}

    async def generate(self, request: GenerateRequest) -> Generation:
        """Return the next reply."""
        text = self.replies[min(self.calls, len(self.replies) - 1)]
        self.calls += 1
        return Generation(text=text, finish_reason="stop")

    async def aclose(self) -> None:
        """Nothing to release."""


class TrainingEnv:
    """An environment for training on a taskset: launched once, driven from sync code.

    Use it as a context manager (local servers stop on exit)::

        with TrainingEnv(load_taskset("arith")) as env:
            prompts = env.prompts(env.taskset.tasks("train")[:4])

    Args:
        taskset: The taskset whose rows are trained on.
        env: The environment (URL, Space id, folder, built-in name); the card's by default.
        seed: Run seed, as ``taskhub eval --seed``: derives each row's env seed when the row
            pins none, and episode ids.
        rewards: Reward specs overriding the rows' and the card's (as ``--reward``).
        max_steps: Step limit overriding the rows' and the card's.
        replicas: Server processes for a local env.
        max_sessions: Sessions per server at most (None: learnt from ``CAPACITY_REACHED``).
        concurrency: Episodes in flight at once.
        step_timeout_s: Deadline of one env request.
        headers: WebSocket handshake headers (a token for private Spaces).
        startup_timeout_s: Deadline for a launched server to become healthy.
        fresh_session: Open a new session for every episode (as ``taskhub eval
            --fresh-session``) instead of resetting an idle one again.
        trust_remote_code: Let the taskset's rows and card run code (``python:`` rewards, an
            env folder); refused otherwise (``RemoteCodeError``).
    """

    def __init__(
        self,
        taskset: Taskset,
        *,
        env: str | None = None,
        seed: int = 0,
        rewards: Sequence[str] | None = None,
        max_steps: int | None = None,
        replicas: int = 1,
        max_sessions: int | None = None,
        concurrency: int = 8,
        step_timeout_s: float = 60.0,
        headers: dict[str, str] | None = None,
        startup_timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S,
        fresh_session: bool = False,
        trust_remote_code: bool = False,
    ) -> None:
        """Resolve the env; nothing starts before ``start()`` (or ``with``)."""
        spec = env or taskset.card.env
        if not spec:
            raise ConfigError(
                f"no environment: pass env=, or set `env:` in the card of taskset {taskset.name!r}"
            )
        check_remote_code(
            taskset, trust_remote_code=trust_remote_code, rewards=not rewards, env=not env
        )
        self.taskset = taskset
        self.env_spec = spec
        self.seed = seed
        self.rewards = list(rewards) if rewards else None
        self.max_steps = max_steps
        self.templates = Templates.from_card(taskset.card, own=taskset.ref.kind == "builtin")
        self._reward_set = RewardSet()
        self._task_rewards: dict[str, list[BoundReward]] = {}
        self._tasks = {t.task_id: t for tasks in taskset.splits.values() for t in tasks}
        self._replicas = replicas
        self._max_sessions = max_sessions
        self._concurrency = concurrency
        self._step_timeout_s = step_timeout_s
        self._headers = dict(headers or {})
        self._startup_timeout_s = startup_timeout_s
        self._fresh_session = fresh_session
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._http: httpx.AsyncClient | None = None
        self._handle: EnvHandle | None = None
        self._pool: SessionPool | None = None
        self._limit: asyncio.Semaphore | None = None
        self.info: EnvInfo | None = None
        #: The env's actions as functions: its tools for a tool env (None before ``start``).
        self.toolbox: Toolbox | None = None

    # lifecycle ------------------------------------------------------------------------------

    def start(self) -> TrainingEnv:
        """Start the background loop, launch or reach the env, read its action schema.

        Raises:
            EnvError: The env cannot be started or reached.
        """
        if self._loop is not None:
            return self
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="taskhub-training-env", daemon=True)
        thread.start()
        self._loop, self._thread = loop, thread
        try:
            self.run(self._start())
        except BaseException:
            self.close()
            raise
        return self

    async def _start(self) -> None:
        self._http = httpx.AsyncClient(
            timeout=httpx.Timeout(30.0, connect=10.0), verify=default_ssl_context()
        )
        self._handle = EnvHandle.open(
            self.env_spec,
            http=self._http,
            replicas=self._replicas,
            max_sessions=max(self._concurrency, self._max_sessions or 0),
            headers=self._headers,
            startup_timeout=self._startup_timeout_s,
        )
        self.info = await self._handle.start()
        self.toolbox = Toolbox.for_env(self.info.tools, self.info.action_schema)
        self._pool = SessionPool(
            self.info,
            http=self._http,
            limit=self._max_sessions,
            timeout=self._step_timeout_s,
            max_frame_bytes=DEFAULT_MAX_FRAME_BYTES,
            headers=self._headers,
            reuse=not self._fresh_session,
        )
        self._limit = asyncio.Semaphore(self._concurrency)

    def close(self) -> None:
        """Stop launched servers and the background loop (idempotent)."""
        loop, self._loop = self._loop, None
        if loop is None:
            return
        try:
            if loop.is_running():
                asyncio.run_coroutine_threadsafe(self._stop(), loop).result(30)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            if self._thread is not None:
                self._thread.join(30)
            loop.close()

    async def _stop(self) -> None:
        if self._pool is not None:
            await self._pool.aclose()
        if self._handle is not None:
            self._handle.stop()
        if self._http is not None:
            await self._http.aclose()

    def __enter__(self) -> TrainingEnv:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine on the env's loop and wait for its result (from any other thread)."""
        if self._loop is None:
            coro.close()
            raise RuntimeError("the TrainingEnv is not started: use `with TrainingEnv(...)`")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    # tasks ----------------------------------------------------------------------------------

    def task(self, task_id: str) -> Task:
        """Return the task with id ``task_id``.

        Raises:
            ConfigError: No split of the taskset has it.
        """
        try:
            return self._tasks[task_id]
        except KeyError:
            raise ConfigError(
                f"task {task_id!r} is not in taskset {self.taskset.name!r}: the dataset and the "
                "TrainingEnv must come from the same taskset"
            ) from None

    def plan(self, task: Task, sample: int = 0) -> EpisodePlan:
        """Return how ``taskhub eval --seed SEED`` would start sample ``sample`` of ``task``."""
        return plan_episode(
            task,
            sample,
            run_seed=self.seed,
            max_steps=self.max_steps,
            card_max_steps=self.taskset.card.max_steps,
        )

    def template_variables(self, task: Task, *, native: bool = False) -> dict[str, Any]:
        """The variables every prompt template of ``task`` sees, as the agent loop sets them."""
        schema = self.info.action_schema if self.info is not None else None
        return template_variables(task, schema, self.toolbox, native=native)

    @property
    def tool_env(self) -> bool:
        """Whether the env is a tool env (MCP): its actions are calls of its listed tools."""
        return self.toolbox is not None and self.toolbox.mcp

    def _rewards_for(self, task: Task) -> list[BoundReward]:
        if task.task_id not in self._task_rewards:
            specs = self.rewards or task.rewards or self.taskset.card.rewards
            self._task_rewards[task.task_id] = self._reward_set.resolve(specs)
        return self._task_rewards[task.task_id]

    # sessions ---------------------------------------------------------------------------------

    async def with_session(self, use: Callable[[EnvSession], Awaitable[T]]) -> T:
        """Run ``use(session)`` on a fresh episode session, waiting out ``CAPACITY_REACHED``."""
        assert self._pool is not None and self._limit is not None, "not started"
        deadline = time.monotonic() + CAPACITY_WAIT_S
        delay = 0.1
        async with self._limit:
            while True:
                try:
                    async with self._pool.session() as pooled:
                        return await use(pooled.session)
                except EnvCapacityError:
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 5.0)

    # episodes ---------------------------------------------------------------------------------

    async def first_turn_async(
        self, task: Task, sample: int = 0, *, tool_calling: str = "text"
    ) -> list[ChatMessage]:
        """Reset the env for ``task`` and return the messages the first model call receives.

        Args:
            task: The task.
            sample: Sample index (part of the episode id).
            tool_calling: ``native`` renders the prompt for a model that calls the env's tools
                itself (no call format in the text); ``text`` for one that writes its calls.

        Raises:
            EnvError: The reset failed.
        """
        plan = self.plan(task, sample)
        trace = EpisodeTrace(reset_payload=plan.reset_payload)
        capture = _CaptureFirstTurn(tool_calling)

        async def use(session: EnvSession) -> list[ChatMessage]:
            try:
                await self._run(plan, session, capture, trace, format_retries=0)
            except _FirstTurn as captured:
                return captured.messages
            raise ConfigError(
                f"task {task.task_id!r}: the env ended the episode at reset, before any model call"
            )

        return await self.with_session(use)

    def prompts(
        self, tasks: Sequence[Task], sample: int = 0, *, tool_calling: str = "text"
    ) -> list[list[dict[str, str]]]:
        """Render each task's first-turn chat messages (one env reset per task).

        Args:
            tasks: The tasks.
            sample: Sample index.
            tool_calling: ``native`` or ``text`` (see ``first_turn_async``).

        Returns:
            One list of ``{"role", "content"}`` messages per task, as evaluation sends them.
        """

        async def all_prompts() -> list[list[ChatMessage]]:
            return list(
                await asyncio.gather(
                    *(self.first_turn_async(t, sample, tool_calling=tool_calling) for t in tasks)
                )
            )

        return [[m.model_dump() for m in messages] for messages in self.run(all_prompts())]

    async def _run(
        self,
        plan: EpisodePlan,
        session: EnvSession,
        model: ModelBackend,
        trace: EpisodeTrace,
        *,
        format_retries: int,
        sampling: SamplingParams | None = None,
    ) -> None:
        assert self.info is not None
        await run_episode(
            task=plan.task,
            session=session,
            model=model,
            templates=self.templates,
            action_schema=self.info.action_schema,
            reset_payload=plan.reset_payload,
            sampling=(sampling or SamplingParams()).model_copy(update={"seed": plan.model_seed}),
            max_steps=plan.max_steps,
            format_retries=format_retries,
            episode_seed=plan.model_seed,
            trace=trace,
            toolbox=self.toolbox,
        )

    async def play_async(
        self,
        task: Task,
        model: ModelBackend,
        *,
        sample: int = 0,
        max_steps: int | None = None,
        format_retries: int = 0,
        sampling: SamplingParams | None = None,
    ) -> EpisodeRecord:
        """Play one episode of ``task`` with ``model`` and score it like ``taskhub eval``.

        Env and model failures become the record's ``infra_error``/``agent_error`` outcome, as
        in an evaluation; only a programming error raises.

        Args:
            task: The task.
            model: Any model backend (a replayed completion, a trainer's policy...).
            sample: Sample index (part of the episode id).
            max_steps: Step limit overriding the plan's (1 scores a single completion).
            format_retries: Unusable replies shown back to the model before an agent error.
            sampling: Sampling parameters passed to the model.

        Returns:
            The scored episode record.
        """
        plan = self.plan(task, sample)
        if max_steps is not None:
            plan = EpisodePlan(**{**plan.__dict__, "max_steps": max_steps})
        trace = EpisodeTrace(reset_payload=plan.reset_payload)
        started_at, started = datetime.now(UTC), time.perf_counter()
        error: BaseException | None = None

        async def use(session: EnvSession) -> None:
            await self._run(
                plan, session, model, trace, format_retries=format_retries, sampling=sampling
            )

        try:
            await self.with_session(use)
        except asyncio.CancelledError:
            raise
        except TaskhubError as exc:
            error = exc
        return await self._record(plan, trace, error, started_at, time.perf_counter() - started)

    async def _record(
        self,
        plan: EpisodePlan,
        trace: EpisodeTrace,
        error: BaseException | None,
        started_at: datetime,
        duration: float,
    ) -> EpisodeRecord:
        """Record a played episode exactly as ``taskhub eval`` would (``record_episode``)."""
        if error is not None and not isinstance(error, AgentFormatError):
            logger.warning("episode %s failed: %s", plan.task.task_id, error)
        return await record_episode(
            plan,
            trace,
            error,
            run_id=TRAINING_RUN_ID,
            split=next(
                (s for s, ts in self.taskset.splits.items() if plan.task in ts),
                self.taskset.default_split(),
            ),
            attempts=1,
            started_at=started_at,
            duration=duration,
            rewards=self._rewards_for(plan.task),
            success_threshold=self.taskset.card.success_threshold,
        )

    def score_completions(
        self, tasks: Sequence[Task], completions: Sequence[str], *, sample: int = 0
    ) -> list[EpisodeRecord]:
        """Score each completion as the model's first reply to its task, as evaluation would.

        The env is reset with the task's reset payload, the completion is parsed into an action
        and stepped (one step: a single completion is one turn), and the taskset's rewards score
        the episode. An unusable completion is an ``agent_error`` with the reward it earned.

        Returns:
            One scored record per completion, in order.
        """
        if len(tasks) != len(completions):
            raise ValueError(f"{len(tasks)} tasks but {len(completions)} completions")

        async def all_records() -> list[EpisodeRecord]:
            return list(
                await asyncio.gather(
                    *(
                        self.play_async(task, ReplayModel([text]), sample=sample, max_steps=1)
                        for task, text in zip(tasks, completions, strict=True)
                    )
                )
            )

        return self.run(all_records())
