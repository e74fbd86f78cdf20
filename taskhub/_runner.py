"""The runner: fan a taskset's episodes out to env servers and write each result as it ends.

``evaluate_async`` is the API; ``evaluate`` its only sync twin (``asyncio.run``), used by the
CLI. Episodes run under a bound on concurrency, each with its own deadline; infra errors are
retried a bounded number of times; ``CAPACITY_REACHED`` is back-pressure (wait and retry, and
never open more sessions on that server than it accepted). Every episode ends as exactly one
record in ``episodes.jsonl``, whatever happened; ``resume_async`` finishes an interrupted run.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib.metadata
import itertools
import logging
import platform
import random
import re
import secrets
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

import httpx
from pydantic import SecretStr

from taskhub._agent import EpisodeTrace, run_episode
from taskhub._comparability import build_comparability, reward_infos
from taskhub._episode import CAPACITY_WAIT_S, EpisodePlan, plan_episode, record_episode
from taskhub._errors import (
    AgentFormatError,
    ConfigError,
    EnvCapacityError,
    EnvClosedError,
    EnvConnectError,
    EnvError,
    EnvTimeout,
    ModelAuthError,
    ModelError,
    ResultsError,
    TaskhubError,
)
from taskhub._executor import EpisodeJob, Executor
from taskhub._lock import RunLock
from taskhub._results import (
    EPISODES,
    SUMMARY_COLUMNS,
    ResultsWriter,
    RunSummary,
    SummaryColumns,
    read_manifest,
    repair_results,
    summarize,
    write_manifest,
)
from taskhub._results_table import read_results_table
from taskhub._rewards import BoundReward, RewardSet
from taskhub._rows import row_rewards, task_ids
from taskhub._schema import (
    EnvInfo,
    EpisodeRecord,
    ErrorInfo,
    EvalConfig,
    ExecutorInfo,
    ModelInfo,
    RunManifest,
    RunStatus,
    SamplingParams,
    Task,
)
from taskhub._taskset import Taskset, load_taskset
from taskhub._templates import Templates
from taskhub._tls import default_ssl_context
from taskhub._tools import Toolbox
from taskhub._trust import check_remote_code
from taskhub._urls import redact_optional_url, redact_url
from taskhub._version import __version__
from taskhub.env._client import EnvSession, wire_dialect
from taskhub.env._launch import EnvHandle, LocalServer
from taskhub.env._pool import SessionPool
from taskhub.models._base import ModelBackend, ModelOptions, load_model, split_model_spec
from taskhub.models._cache import CachedModel

if TYPE_CHECKING:
    import numpy
    import pyarrow

logger = logging.getLogger(__name__)

#: What ``--retry`` accepts, and the outcome of the episodes it runs again.
RETRY_OUTCOMES = {"infra": "infra_error"}
_LIBRARIES = ("aiohttp", "httpx", "websockets", "pydantic", "jinja2", "huggingface-hub", "openenv")


class Progress(Protocol):
    """Receives the runner's progress; the CLI shows a bar, tests record the calls."""

    def start(self, total: int, completed: int) -> None:
        """The run will write ``total`` episodes, ``completed`` of which already exist."""
        ...

    def update(self, record: EpisodeRecord) -> None:
        """One more episode finished (whatever its outcome).

        ``record`` is its summary row: the record without its trajectory (steps, messages,
        observations, reset payload), which only ``episodes.jsonl`` holds.
        """
        ...

    def complete(self) -> None:
        """The run ended."""
        ...


def _status(progress: Progress | None, text: str) -> None:
    """Tell ``progress`` what the run waits for before its first episode, if it listens.

    ``status(text)`` is optional on a ``Progress``: the CLI's bar and lines show it.
    """
    status = getattr(progress, "status", None)
    if callable(status):
        status(text)


class RunInterrupted(KeyboardInterrupt):
    """Raised by ``evaluate`` and ``resume`` when the run was interrupted (Ctrl-C).

    Attributes:
        run_dir: The run directory, when the run got far enough to choose it.
        resumable: Whether ``run.json`` was written (``taskhub eval --resume run_dir`` works).
    """

    def __init__(self, run_dir: Path | None) -> None:
        """Record where the interrupted run was writing."""
        self.run_dir = run_dir
        self.resumable = run_dir is not None and (run_dir / "run.json").is_file()
        super().__init__(str(run_dir) if run_dir else "interrupted before the run started")


@dataclass(frozen=True)
class RunResult:
    """What a run left behind."""

    run_dir: Path
    manifest: RunManifest
    summary: RunSummary

    def __repr__(self) -> str:
        """A line: the run's folder, status and counts (a summary can hold a million tasks)."""
        summary = self.summary
        return (
            f"RunResult(run_dir={str(self.run_dir)!r}, status={self.manifest.status!r}, "
            f"n_episodes={summary.n_episodes}, n_tasks={summary.n_tasks}, "
            f"mean_reward={summary.mean_reward!r})"
        )


def _slug(text: str, size: int = 32) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-")[:size] or "x"


@functools.cache
def _versions() -> dict[str, str]:
    versions = {}
    for name in _LIBRARIES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass
class _Plan:
    config: EvalConfig
    taskset: Taskset
    split: str
    tasks: Sequence[Task]
    run_id: str
    run_dir: Path
    rewards: RewardSet
    task_rewards: dict[str, list[BoundReward]]
    """The rewards of the tasks that name their own (and no ``--reward`` overrides them)."""
    default_rewards: list[BoundReward]
    """The rewards of every other task: ``--reward``'s, else the card's."""
    templates: Templates
    success_threshold: float
    manifest: RunManifest | None = None
    done: numpy.ndarray[Any, Any] | None = None
    """For a resume, whether each episode has a record: ``done[task_index * samples + sample]``."""
    previous: pyarrow.Table | None = None
    """What ``summarize`` reads of the episodes played before a resume (``SUMMARY_COLUMNS``)."""
    task_hashes: dict[str, str] = field(default_factory=dict)
    """Content hashes of the tasks played lately (their other samples reuse them)."""

    def rewards_of(self, task_id: str) -> list[BoundReward]:
        """The rewards an episode of ``task_id`` is scored with."""
        return self.task_rewards.get(task_id, self.default_rewards)

    def reward_lists(self) -> list[list[BoundReward]]:
        """Each distinct list of rewards the run's tasks are scored with."""
        lists = {tuple(b.spec.text for b in specs): specs for specs in self.task_rewards.values()}
        if len(self.task_rewards) < len(self.tasks):
            lists.setdefault(tuple(b.spec.text for b in self.default_rewards), self.default_rewards)
        return list(lists.values())

    def items(self) -> Iterator[tuple[Task, int]]:
        """The episodes to play: each task's samples, but those ``done``."""
        samples = self.config.samples
        if self.done is None:
            for task in self.tasks:
                for sample in range(samples):
                    yield task, sample
            return
        # a resume: only the tasks with an episode left are built (a run of a million episodes
        # is mostly done, and a Task costs more than finding them)
        import numpy as np

        done = self.done.reshape(len(self.tasks), samples)
        for index in np.flatnonzero(~done.all(axis=1)).tolist():
            task = self.tasks[index]
            for sample in np.flatnonzero(~done[index]).tolist():
                yield task, sample

    @property
    def n_done(self) -> int:
        """Episodes that have a record already (a resume's)."""
        return 0 if self.done is None else int(self.done.sum())

    @property
    def n_planned(self) -> int:
        return len(self.tasks) * self.config.samples


@dataclass(frozen=True)
class _Planned:
    """An episode about to be played: how it starts, and how its model samples."""

    episode: EpisodePlan
    sampling: SamplingParams


@dataclass(frozen=True)
class _Played:
    """An episode played to its end (or its error), not yet scored."""

    episode: EpisodePlan
    trace: EpisodeTrace
    error: BaseException | None
    attempts: int
    started_at: datetime
    duration: float
    session: EnvSession | None = None
    """The session it ended on (parked for the next episode, or closed)."""


def summary_row(record: EpisodeRecord) -> EpisodeRecord:
    """The record without its trajectory: what ``summarize`` reads, at a fraction of the memory."""
    return record.model_copy(
        update={"steps": [], "messages": [], "initial_observation": None, "reset_payload": {}}
    )


def stored_line(record: EpisodeRecord) -> tuple[EpisodeRecord, str]:
    """The record as ``episodes.jsonl`` stores it, and its JSON line (without the newline).

    A record that cannot be serialized (pydantic refuses a value: too deep, not JSON) is
    stored as that episode's error, without its trajectory.
    """
    try:
        return record, record.model_dump_json()
    except ValueError as exc:
        logger.warning("episode %s#%d cannot be stored: %s", record.task_id, record.sample, exc)
        error = ResultsError(
            f"the episode's record cannot be stored ({str(exc)[:300]}); its trajectory was left out"
        )
        stripped = record.model_copy(
            update={
                "outcome": "infra_error",
                "reward": None,
                "success": None,
                "reward_components": [],
                "error": ErrorInfo.from_exception(error),
                "steps": [],
                "messages": [],
                "initial_observation": None,
                "reset_metadata": None,
            }
        )
        return stripped, stripped.model_dump_json()


def select_tasks(taskset: Taskset, config: EvalConfig) -> tuple[str, Sequence[Task]]:
    """Apply ``split``, ``limit`` and ``shard`` to a taskset, in that order.

    The limit comes first so that ``--limit N --shard i/n`` over every ``i`` runs exactly the
    tasks of one ``--limit N`` run, and the shards merge into that run.
    """
    split = config.split or taskset.default_split()
    tasks = taskset.tasks(split)
    if config.limit is not None:
        tasks = tasks[: config.limit]
    if config.shard is not None:
        index, count = config.shard
        tasks = tasks[index::count]
    return split, tasks


def _plan(config: EvalConfig, taskset: Taskset, run_dir: Path, run_id: str) -> _Plan:
    split, tasks = select_tasks(taskset, config)
    if not tasks:
        raise ConfigError(f"nothing to run: split {split!r} selects no tasks")
    trusted = check_remote_code(
        taskset,
        trust_remote_code=config.trust_remote_code,
        rewards=not config.rewards,
        env=not config.env,
    )
    for item in trusted:
        logger.warning("running code of taskset %s (trusted): %s", taskset.name, item)
    rewards = RewardSet()
    # the tasks with rewards of their own, read without a Task built per row (a million rows)
    task_rewards = (
        {}
        if config.rewards
        else {task_id: rewards.resolve(specs) for _, task_id, specs in row_rewards(tasks)}
    )
    # every other task's (resolved only when one has none of its own: the run lists it)
    default_rewards = (
        rewards.resolve(config.rewards or taskset.card.rewards)
        if len(task_rewards) < len(tasks)
        else []
    )
    threshold = (
        config.success_threshold
        if config.success_threshold is not None
        else taskset.card.success_threshold
    )
    return _Plan(
        config=config,
        taskset=taskset,
        split=split,
        tasks=tasks,
        run_id=run_id,
        run_dir=run_dir,
        rewards=rewards,
        task_rewards=task_rewards,
        default_rewards=default_rewards,
        templates=Templates.from_card(taskset.card, own=taskset.ref.kind == "builtin"),
        success_threshold=threshold,
    )


def check_model(config: EvalConfig) -> None:
    """Check the model string before anything starts: its backend is created and closed.

    Sync: not for use inside a running event loop.

    Raises:
        UnknownPluginError: No backend has that provider name (with a "did you mean").
        ConfigError: The model string is malformed, or the backend refuses the model name or
            options (a missing base URL...).
    """
    backend = load_model(
        config.model,
        ModelOptions(
            base_url=config.base_url,
            api_key=config.api_key.get_secret_value() if config.api_key else None,
            timeout_s=config.model_timeout_s,
        ),
    )
    asyncio.run(backend.aclose())


def check_rewards(specs: Sequence[str]) -> None:
    """Check reward specs before anything starts: each parses and its plugin builds.

    Rewards backed by a process pool start it here, which the run then shares.

    Raises:
        UnknownPluginError: No reward has that name (with a "did you mean").
        ConfigError: A spec is malformed, or its reward refuses the argument.
        MissingDependencyError: The reward's library is not installed (with the pip command).
    """
    from taskhub._rewards import build_reward

    for text in specs:
        build_reward(text)


def env_spec(config: EvalConfig, taskset: Taskset) -> str:
    """The ENV a run plays on: the config's, else the taskset card's.

    Raises:
        ConfigError: Neither names one (the taskset may declare a container image, which
            taskhub does not run).
    """
    spec = config.env or taskset.card.env
    image = taskset.environment.image if taskset.environment else None
    if not spec and image:
        raise ConfigError(
            f"taskset {taskset.name!r} declares its env as the container image "
            f"{image!r} (environment.yaml); taskhub does not run containers: start it "
            f"(docker run -p 8000:8000 {image}) and pass its URL as ENV"
        )
    if not spec:
        raise ConfigError(
            f"no environment: pass ENV, or set `env:` in the taskset card of {taskset.name!r}"
        )
    return spec


def server_sessions(config: EvalConfig) -> int:
    """Sessions each launched env server of a run is told to accept (``MAX_CONCURRENT_ENVS``)."""
    return max(config.concurrency, config.max_sessions_per_env or 0)


def new_run_id(config: EvalConfig, taskset_name: str) -> str:
    """Return a fresh run id: UTC time, taskset, model, and a random suffix."""
    stamp = _now().strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{_slug(taskset_name, 24)}-{_slug(config.model, 32)}-{secrets.token_hex(3)}"


class _Runner:
    def __init__(
        self,
        plan: _Plan,
        *,
        progress: Progress | None,
        http: httpx.AsyncClient,
        env_headers: dict[str, str] | None,
        argv: list[str] | None,
        parent_manifest: RunManifest | None,
        executor: Executor | None = None,
    ) -> None:
        self.plan = plan
        self.config = plan.config
        self.progress = progress
        self.http = http
        self.env_headers = env_headers or {}
        self.argv = argv
        self.executor = executor
        # created_at of the run is the first session's start; --resume adds a session.
        self.sessions = [*(parent_manifest.sessions if parent_manifest else []), _now()]
        self.model: ModelBackend | None = None
        self.model_details: dict[str, Any] = {}
        self.worker_tool_calling: Literal["native", "text"] | None = None
        self.pool: SessionPool | None = None
        self.writer: ResultsWriter | None = None
        self.env_info: EnvInfo | None = None
        self.toolbox: Toolbox | None = None
        self.stop_reason: str | None = None
        self.fatal: BaseException | None = None
        # What the summary needs of every record (earlier sessions' too), as columns: the file
        # is not read again at the end of a long run, nor a record per episode held till then.
        self.rows = SummaryColumns(plan.previous)

    def env_spec(self) -> str:
        return env_spec(self.config, self.plan.taskset)

    def first_resets(self) -> list[dict[str, Any]]:
        """The resets of the episodes the run starts at once (``EnvHandle.first_resets``).

        One per worker, within the sessions its servers may hold: a server slow to probe gets
        them on sessions opened beside the probe's.
        """
        config = self.config
        if config.fresh_session:
            return []
        at_once = config.concurrency
        if config.max_sessions_per_env is not None:
            at_once = min(at_once, config.max_sessions_per_env * config.replicas)
        resets = []
        for item in itertools.islice(self.plan.items(), at_once):
            try:
                resets.append(self._planned(*item).episode.reset_payload)
            except Exception:  # planned again in its worker, where the error is recorded
                break
        return resets

    @contextlib.asynccontextmanager
    async def engine(
        self,
        log_dir: Path,
        launched: Sequence[LocalServer] = (),
        first_resets: Sequence[dict[str, Any]] = (),
    ) -> AsyncIterator[None]:
        """Open what episodes are played with: the model client, the env servers, the pool.

        ``launched`` are servers of a local env launched for this run already;
        ``first_resets``, the resets of the first episodes, go out beside a slow probe.
        """
        config = self.config
        env_spec = self.env_spec()
        _status(self.progress, f"loading model {config.model}")
        self.model = load_model(
            config.model,
            ModelOptions(
                base_url=config.base_url,
                api_key=config.api_key.get_secret_value() if config.api_key else None,
                timeout_s=config.model_timeout_s,
                tool_calling=config.tool_calling,
            ),
        )
        if config.cache is not None:
            self.model = CachedModel(
                self.model,
                Path(config.cache),
                model=config.model,
                endpoint=redact_optional_url(config.base_url),
            )
        try:
            _status(self.progress, f"starting env {redact_url(env_spec)}")
            handle = EnvHandle.open(
                env_spec,
                http=self.http,
                replicas=config.replicas,
                max_sessions=server_sessions(config),
                headers=self.env_headers,
                log_dir=log_dir,
                provider=config.env_provider,
                provider_options=config.env_provider_options,
                launched=launched,
                # the probe's session serves the first episode (a new session can cost as
                # much as a sandbox); --fresh-session wants every episode on a new one
                keep_session=not config.fresh_session,
                # a server slow to probe gets the first episodes' sessions opened beside it
                first_resets=first_resets,
                max_frame_bytes=config.max_frame_bytes,
            )
            async with handle:
                assert handle.info is not None
                self.env_info = handle.info
                self.toolbox = Toolbox.for_env(handle.info.tools, handle.info.action_schema)
                self.model_details = dict(self.model.details)
                self.pool = SessionPool(
                    handle.info,
                    http=self.http,
                    limit=config.max_sessions_per_env,
                    timeout=config.step_timeout_s,
                    max_frame_bytes=config.max_frame_bytes,
                    headers=self.env_headers,
                    reuse=not config.fresh_session,
                )
                async with self.pool:
                    for session in handle.take_sessions():
                        await self.pool.adopt(session)
                    yield
        finally:
            await self.model.aclose()

    def begin(
        self,
        env_info: EnvInfo,
        model_details: dict[str, Any],
        tool_calling: Literal["native", "text"] | None = None,
    ) -> None:
        """The env is up: write the manifest, open ``episodes.jsonl``, start the progress.

        ``tool_calling`` comes from the workers of a remote executor (whose model acts on
        the tool env); a local run reads its own model's.
        """
        plan = self.plan
        self.env_info = env_info
        self.model_details = model_details
        self.worker_tool_calling = tool_calling
        provider, name = split_model_spec(self.config.model)
        write_manifest(plan.run_dir, self._manifest(provider, name, "running"))
        repair_results(plan.run_dir / EPISODES)
        self.writer = ResultsWriter(plan.run_dir / EPISODES)
        if self.progress:
            self.progress.start(plan.n_planned, plan.n_done)

    def join(self, env_info: EnvInfo) -> None:
        """Another worker's env is up: its URLs are added to the run's (and to ``run.json``)."""
        assert self.env_info is not None
        urls = list(dict.fromkeys([*self.env_info.urls, *env_info.urls]))
        self.env_info = self.env_info.model_copy(update={"urls": urls})
        provider, name = split_model_spec(self.config.model)
        write_manifest(self.plan.run_dir, self._manifest(provider, name, "running"))

    def fail(self, error: BaseException) -> None:
        """Stop the run with ``error`` (bad credentials): raised once the run has stopped."""
        self.fatal = error
        self.stop_reason = str(error)

    @property
    def stopping(self) -> bool:
        """No more episodes are to be started (--fail-fast, or a fatal error)."""
        return self.stop_reason is not None

    def record(self, record: EpisodeRecord, line: str | None = None) -> None:
        """Write one finished episode (the run's only writer of ``episodes.jsonl``).

        ``line`` is the record's JSON when the worker that played it serialized it already
        (``stored_line``): it is written as it is, and ``record`` may be its summary row. A
        write that fails (disk full, the folder gone) stops the run with that error.
        """
        assert self.writer is not None
        if line is None:
            record, line = stored_line(record)
        try:
            self.writer.write(record, line)
        except ResultsError as exc:
            self.fatal = exc
            self.stop_reason = str(exc)
            return
        self.rows.append(record)
        logger.info(
            "episode %s#%d: %s reward=%s steps=%d",
            record.task_id,
            record.sample,
            record.outcome,
            record.reward,
            record.num_steps,
        )
        if self.progress:
            self.progress.update(record)
        if self.config.fail_fast and record.outcome != "scored":
            self.stop_reason = (
                f"--fail-fast: episode {record.task_id}#{record.sample} ended as {record.outcome}"
            )

    async def run(self) -> RunResult:
        plan = self.plan
        self.env_spec()  # no env is bad configuration: fail before anything starts
        provider, name = split_model_spec(self.config.model)
        status: RunStatus = "failed"
        # the result, once every episode is recorded and the manifest says how the run ended
        result: RunResult | None = None
        try:
            try:
                if self.executor is None:
                    async with self.engine(
                        plan.run_dir / "env-logs", first_resets=self.first_resets()
                    ):
                        assert self.env_info is not None
                        self.begin(self.env_info, self.model_details)
                        await self._fan_out()
                        # the sessions close in the background (``close_idle``): the run is
                        # concluded while their servers answer, not after
                        result = self._conclude(provider, name)
                else:
                    await self.executor.run(self._job(), self)
            finally:
                if self.writer is not None:
                    self.writer.close()
            if result is None:
                result = self._conclude(provider, name)
            status = result.manifest.status
        except asyncio.CancelledError:
            status = "interrupted"
            raise
        except KeyboardInterrupt:
            status = "interrupted"
            raise
        finally:
            if self.progress:
                self.progress.complete()
            # a run that ended otherwise than concluded (an error, even while its sessions
            # closed) says so
            if self.env_info is not None and (result is None or status != result.manifest.status):
                write_manifest(plan.run_dir, self._manifest(provider, name, status))
        return result

    def _conclude(self, provider: str, name: str) -> RunResult:
        """Every episode is recorded: write the final manifest and summarize the run.

        Raises:
            BaseException: The error that stopped the run (``fail``), nothing written.
        """
        plan = self.plan
        if self.writer is not None:
            self.writer.close()
        if self.fatal is not None:
            raise self.fatal
        status: RunStatus = "failed" if self.stop_reason else "completed"
        assert self.env_info is not None
        write_manifest(plan.run_dir, self._manifest(provider, name, status))
        manifest = read_manifest(plan.run_dir)
        summary = summarize(
            self.rows.table(), n_planned=plan.n_planned, comparability=manifest.comparability
        )
        return RunResult(plan.run_dir, manifest, summary)

    def _job(self) -> EpisodeJob:
        plan = self.plan
        # Workers get the planned tasks only, as the one split, with nothing left to select.
        taskset = Taskset(plan.taskset.ref, plan.taskset.card, {plan.split: plan.tasks})
        return EpisodeJob(
            config=self.config.model_copy(
                update={"limit": None, "shard": None, "split": plan.split}
            ),
            taskset=taskset,
            split=plan.split,
            run_id=plan.run_id,
            items=list(plan.items()),
            env_headers=dict(self.env_headers),
        )

    def _manifest(self, provider: str, name: str, status: RunStatus) -> RunManifest:
        plan, config = self.plan, self.config
        now = _now()
        manifest = RunManifest(
            run_id=plan.run_id,
            taskhub_version=__version__,
            status=status,
            created_at=self.sessions[0],
            updated_at=now,
            finished_at=now if status == "completed" else None,
            config=config.model_copy(
                update={
                    "base_url": redact_optional_url(config.base_url),
                    "env": redact_optional_url(config.env),
                }
            ),
            taskset=plan.taskset.ref,
            split=plan.split,
            env=self.env_info.model_copy(
                update={
                    "spec": redact_url(self.env_info.spec),
                    "urls": [redact_url(url) for url in self.env_info.urls],
                }
            )
            if self.env_info
            else None,
            model=ModelInfo(
                spec=config.model,
                provider=provider,
                name=name,
                base_url=redact_optional_url(config.base_url),
                sampling=config.sampling,
                # a local run's model may have learnt something since it started (a fallback)
                details=dict(self.model.details) if self.model is not None else self.model_details,
                tool_calling=getattr(self.model, "tool_calling", "text")
                if self.model is not None and self.toolbox is not None
                else self.worker_tool_calling,
            ),
            rewards=plan.rewards.plugins(),
            n_planned=plan.n_planned,
            libraries=_versions(),
            host={
                "python": platform.python_version(),
                "platform": platform.platform(),
                "machine": platform.machine(),
            },
            argv=self.argv,
            sessions=self.sessions,
            success_threshold=plan.success_threshold,
            executor=self.executor.info if self.executor else ExecutorInfo(),
        )
        # Distinct spec lists only: a taskset of 100k rows names a handful.
        rewards, total = reward_infos(plan.reward_lists())
        manifest.comparability = build_comparability(manifest, rewards, total)
        return manifest

    async def _fan_out(self) -> None:
        items = self.plan.items()
        # Recording an episode (rewards, the line in episodes.jsonl) overlaps the next episode
        # of its worker, whose requests wait on the env meanwhile; one record in the making per
        # worker at most. An episode's last step, when known (max_steps), carries the next
        # episode's reset. --fail-fast does neither: it decides on the outcome before going on.
        overlap = not self.config.fail_fast
        # episodes planned ahead and not started yet, over every worker: each may want a
        # parked session; the sessions parked beyond them serve nothing any more
        unstarted = [0]

        async def worker() -> None:
            loop = asyncio.get_running_loop()
            recording: asyncio.Task[None] | None = None
            # The next episode is planned (seeds, episode id, payload) while this one's first
            # request is in flight: a call scheduled now runs once the worker waits for the env.
            ahead: list[tuple[Task, int] | _Planned] = []

            def next_reset() -> dict[str, Any] | None:
                """The reset of this worker's next episode (planned now if it is not yet)."""
                plan_ahead()  # the episode may not have waited yet: a reply already arrived
                if ahead and isinstance(ahead[-1], _Planned):
                    return ahead[-1].episode.reset_payload
                return None

            def plan_ahead() -> None:
                if ahead:  # planned already
                    return
                item = next(items, None)
                if item is not None:
                    unstarted[0] += 1
                    try:
                        ahead.append(self._planned(*item))
                    except Exception:  # planned again in the worker, where it raises
                        ahead.append(item)

            # the session of this worker's last episode: it may have sent the next one's reset
            held: EnvSession | None = None
            try:
                item: tuple[Task, int] | _Planned | None = next(items, None)
                while item is not None:
                    if self.stop_reason:
                        return
                    planned = item if isinstance(item, _Planned) else self._planned(*item)
                    scheduled = loop.call_soon(plan_ahead)
                    played = await self._play(
                        planned, prefer=held, next_reset=next_reset if overlap else None
                    )
                    if recording is not None:
                        await recording
                        recording = None
                    if played is None:
                        scheduled.cancel()
                        return
                    held = played.session
                    if overlap:
                        recording = group.create_task(self._finish(played))
                    else:
                        await self._finish(played)
                    if not ahead:  # it did not run (the episode never waited), or found none
                        scheduled.cancel()
                        plan_ahead()
                    if not ahead:
                        break
                    item = ahead.pop()
                    unstarted[0] -= 1
            finally:
                unstarted[0] -= len(ahead)  # a stopped run starts them nowhere
                if recording is not None:
                    await recording
                # this worker starts no more episodes: its session, if parked, serves none
                if self.pool is not None:
                    self.pool.close_idle(keep=unstarted[0])

        async with asyncio.TaskGroup() as group:
            for _ in range(self.config.concurrency):
                group.create_task(worker())

    async def _finish(self, played: _Played) -> None:
        """Score a played episode and record it."""
        self.record(await self._score(played))

    async def _episode(self, task: Task, sample: int) -> EpisodeRecord | None:
        """Play an episode and score it; None when the run must stop (bad key)."""
        played = await self._play(self._planned(task, sample))
        return None if played is None else await self._score(played)

    async def _score(self, played: _Played) -> EpisodeRecord:
        """The record of a played episode, scored."""
        plan = self.plan
        return await record_episode(
            played.episode,
            played.trace,
            played.error,
            run_id=plan.run_id,
            split=plan.split,
            attempts=played.attempts,
            started_at=played.started_at,
            duration=played.duration,
            rewards=plan.rewards_of(played.episode.task.task_id),
            success_threshold=plan.success_threshold,
        )

    def _planned(self, task: Task, sample: int) -> _Planned:
        """How an episode of ``task`` starts: its plan and its sampling parameters."""
        config, plan = self.config, self.plan
        hashes = plan.task_hashes
        task_hash = hashes.get(task.task_id)
        if task_hash is None:  # once per task, however many samples it has
            task_hash = hashes[task.task_id] = plan.taskset.content_hash(task)
            if len(hashes) > 4 * config.concurrency + 4:  # samples of a task run close together
                del hashes[next(iter(hashes))]
        episode = plan_episode(
            task,
            sample,
            run_seed=config.seed,
            max_steps=config.max_steps,
            card_max_steps=plan.taskset.card.max_steps,
            model_seed=config.sampling.seed,
            task_hash=task_hash,
        )
        sampling = config.sampling.model_copy(update={"seed": episode.model_seed})
        return _Planned(episode, sampling)

    async def _play(
        self,
        planned: _Planned,
        *,
        prefer: EnvSession | None = None,
        next_reset: Callable[[], dict[str, Any] | None] | None = None,
    ) -> _Played | None:
        """Play an episode, retrying infra errors; None when the run must stop (bad key).

        ``prefer`` is the session to play on when it is parked (it may have sent this
        episode's reset); ``next_reset`` gives the next episode's reset, which the episode's
        last step may send ahead on a session the pool reuses.
        """
        config, plan = self.config, self.plan
        assert self.pool is not None and self.model is not None
        episode, sampling = planned.episode, planned.sampling
        task, sample = episode.task, episode.sample
        attempts = 0
        capacity_deadline = time.monotonic() + CAPACITY_WAIT_S
        capacity_delay = 0.1
        while True:
            attempts += 1
            trace = EpisodeTrace(reset_payload=episode.reset_payload)
            started_at, started = _now(), time.perf_counter()
            error: BaseException | None = None
            reused = False
            session: EnvSession | None = None
            try:
                lease = self.pool.session(
                    prefer if attempts == 1 else None, reset=episode.reset_payload
                )
                async with lease as pooled:
                    reused, session = pooled.reused, pooled.session
                    async with asyncio.timeout(config.episode_timeout_s):
                        await run_episode(
                            task=task,
                            session=pooled.session,
                            model=self.model,
                            templates=plan.templates,
                            action_schema=self.env_info.action_schema if self.env_info else None,
                            reset_payload=episode.reset_payload,
                            sampling=sampling,
                            max_steps=episode.max_steps,
                            format_retries=config.format_retries,
                            episode_seed=episode.model_seed,
                            trace=trace,
                            toolbox=self.toolbox,
                            next_reset=next_reset if self.pool.reuse else None,
                        )
            except EnvCapacityError as exc:
                if time.monotonic() < capacity_deadline:
                    attempts -= 1  # back-pressure, not a failed attempt
                    await asyncio.sleep(capacity_delay * random.uniform(0.5, 1.5))
                    capacity_delay = min(capacity_delay * 2, 5.0)
                    continue
                error = exc
            except (EnvClosedError, EnvConnectError) as exc:
                if reused and trace.initial is None:
                    # a parked session the server closed between episodes: not this episode's
                    # failure; the pool dropped it, so the next try gets another session
                    attempts -= 1
                    continue
                error = exc
            except TimeoutError:
                error = EnvTimeout(
                    f"episode exceeded its {config.episode_timeout_s:g}s deadline "
                    f"after {len(trace.steps)} steps"
                )
                error.retryable = False
            except ModelAuthError as exc:
                self.fail(exc)
                return None
            except (AgentFormatError, EnvError, ModelError) as exc:
                error = exc
            except TaskhubError as exc:
                error = exc
            except Exception as exc:  # a bug in plugin code must not end the run
                logger.exception("episode %s#%d crashed", task.task_id, sample)
                error = exc
            retryable = isinstance(error, EnvError | ModelError) and error.retryable
            if retryable and attempts <= config.max_retries:
                logger.info("episode %s#%d: %s; retrying", task.task_id, sample, error)
                await asyncio.sleep(min(0.5 * 2 ** (attempts - 1), 10.0))
                continue
            if trace.initial is not None and self.env_info and self.env_info.dialect is None:
                # what the server actually spoke, from its first observation frame
                self.env_info.dialect = wire_dialect(trace.initial)
            return _Played(
                episode,
                trace,
                error,
                attempts,
                started_at,
                time.perf_counter() - started,
                session,
            )


class EpisodeWorker:
    """Plays a job's episodes in this process, with its own model client, env servers and pool.

    What an executor runs on each machine (the Ray executor: one per node). ``play`` may be
    called several times at once: the episodes of every call share ``config.concurrency``
    slots. Each episode is played by the runner's own code, so its record is the one a local
    run writes.
    """

    def __init__(
        self, job: EpisodeJob, *, log_dir: Path, launched: Sequence[LocalServer] = ()
    ) -> None:
        """Prepare to play ``job`` (nothing starts before ``open``); env logs go to ``log_dir``.

        ``launched`` are servers of the job's local env launched already: ``open`` waits for
        them instead of launching as many; they stop when it fails, or on ``close``.
        """
        self.job = job
        self.log_dir = log_dir
        self.launched = list(launched)
        self._plan = _plan(job.config, job.taskset, log_dir, job.run_id)
        self._stack = contextlib.AsyncExitStack()
        self._runner: _Runner | None = None
        self._slots = asyncio.Semaphore(job.config.concurrency)

    async def open(self) -> tuple[EnvInfo, dict[str, Any]]:
        """Start the model client and the env servers; return the env and the model details.

        Raises:
            TaskhubError: The env or the model could not be started.
        """
        try:
            # the servers launched already stop with the rest, whether the env took them or not
            self._stack.callback(self._stop_launched)
            http = await self._stack.enter_async_context(_make_http())
            runner = _Runner(
                self._plan,
                progress=None,
                http=http,
                env_headers=self.job.env_headers,
                argv=None,
                parent_manifest=None,
            )
            await self._stack.enter_async_context(
                runner.engine(self.log_dir / "env-logs", self.launched)
            )
        except BaseException:
            await self._stack.aclose()
            raise
        assert runner.env_info is not None
        self._runner = runner
        return runner.env_info, runner.model_details

    @property
    def tool_calling(self) -> Literal["native", "text"] | None:
        """How the model acts on a tool env (None before ``open`` and on other envs)."""
        runner = self._runner
        if runner is None or runner.model is None or runner.toolbox is None:
            return None
        calling: Literal["native", "text"] = getattr(runner.model, "tool_calling", "text")
        return calling

    async def play(self, items: Sequence[tuple[Task, int]]) -> AsyncIterator[EpisodeRecord]:
        """Play ``items`` and yield each record as its episode ends (in any order).

        Raises:
            ModelAuthError: The model refused the credentials (fatal to the run).
        """
        runner = self._runner
        if runner is None:
            raise RuntimeError("EpisodeWorker.play() before open()")
        finished: asyncio.Queue[EpisodeRecord | None] = asyncio.Queue()

        async def one(task: Task, sample: int) -> None:
            record = None
            try:
                async with self._slots:
                    if not runner.stopping:
                        record = await runner._episode(task, sample)
            finally:
                finished.put_nowait(record)

        tasks = [asyncio.create_task(one(task, sample)) for task, sample in items]
        try:
            for _ in tasks:
                record = await finished.get()
                if record is not None:
                    yield record
                elif runner.fatal is not None:
                    raise runner.fatal
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def close(self) -> None:
        """Stop the env servers and close the model client."""
        self._runner = None
        await self._stack.aclose()

    def _stop_launched(self) -> None:
        for server in self.launched:  # stopping a server twice does nothing
            server.stop()


def _make_http() -> httpx.AsyncClient:
    return httpx.AsyncClient(
        timeout=httpx.Timeout(30.0, connect=10.0), verify=default_ssl_context()
    )


async def evaluate_async(
    config: EvalConfig,
    *,
    output_dir: Path | str = "runs",
    run_dir: Path | str | None = None,
    progress: Progress | None = None,
    env_headers: dict[str, str] | None = None,
    hub_token: str | None = None,
    argv: list[str] | None = None,
    executor: Executor | None = None,
    _target: list[Path] | None = None,
) -> RunResult:
    """Run an evaluation and write its run directory.

    Args:
        config: What to run.
        output_dir: Parent of the new run directory (named after the run id).
        run_dir: Exact run directory to create instead (must not hold a run yet).
        progress: Receives progress updates.
        env_headers: Extra WebSocket handshake headers (a token for private Spaces).
        hub_token: Token for private Hub tasksets.
        argv: The command line, recorded in ``run.json``.
        executor: Where the episodes are played (``taskhub.RayExecutor`` for a Ray cluster);
            None plays them in this process. It changes no record, and is named in ``run.json``.
        _target: Receives the run directory once it is chosen (``evaluate`` names it when
            the run is interrupted).

    Returns:
        The run directory, its manifest and summary.

    Raises:
        TaskhubError: Bad configuration (raised before any episode runs), an env that cannot
            be started, or a fatal model error (bad credentials). Episode failures are records,
            not exceptions.
    """
    taskset = load_taskset(config.taskset, revision=config.revision, token=hub_token)
    run_id = new_run_id(config, taskset.name)
    target = Path(run_dir) if run_dir is not None else Path(output_dir) / run_id
    if _target is not None:
        _target.append(target)
    if (target / "run.json").exists():
        raise ResultsError(
            f"{target} already holds a run; use `taskhub eval --resume {target}` to finish it"
        )
    plan = _plan(config, taskset, target, run_id)
    fresh = not target.exists()
    try:
        return await _evaluate_locked(plan, target, progress, env_headers, argv, executor)
    except BaseException:
        if fresh and not (target / "run.json").exists():  # bad configuration: leave nothing
            RunLock(target).remove_if_alone()
        raise


async def _evaluate_locked(
    plan: _Plan,
    target: Path,
    progress: Progress | None,
    env_headers: dict[str, str] | None,
    argv: list[str] | None,
    executor: Executor | None,
) -> RunResult:
    with RunLock(target):
        if (target / "run.json").exists():  # another writer started it meanwhile
            raise ResultsError(
                f"{target} already holds a run; use `taskhub eval --resume {target}` to finish it"
            )
        async with _make_http() as http:
            runner = _Runner(
                plan,
                progress=progress,
                http=http,
                env_headers=env_headers,
                argv=argv,
                parent_manifest=None,
                executor=executor,
            )
            return await runner.run()


async def resume_async(
    run_dir: Path | str,
    *,
    api_key: str | None = None,
    base_url: str | None = None,
    retry: Sequence[str] = (),
    progress: Progress | None = None,
    env_headers: dict[str, str] | None = None,
    hub_token: str | None = None,
    argv: list[str] | None = None,
    executor: Executor | None = None,
) -> RunResult:
    """Finish an interrupted run: run only the episodes it has no record of.

    The taskset is loaded at the commit the run recorded, and must have the same content.
    ``run.json`` keeps no credentials: pass ``api_key`` (and ``base_url`` when the endpoint's URL
    carried some) again. ``retry=["infra"]`` also runs again the episodes that ended as
    ``infra_error``: their earlier records stay in ``episodes.jsonl`` as history, and readers
    count only the newest record of each (task, sample).
    ``executor`` plays the missing episodes (whatever played the earlier ones).

    Raises:
        ResultsError: ``run_dir`` is not a run directory, the taskset changed, or another
            process is writing the run.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    run_dir = Path(run_dir)
    unknown = sorted(set(retry) - set(RETRY_OUTCOMES))
    if unknown:
        raise ConfigError(
            f"--retry {unknown[0]!r}: only {', '.join(RETRY_OUTCOMES)} episodes can be run again"
        )
    manifest = read_manifest(run_dir)
    config = manifest.config
    if api_key is not None:
        config = config.model_copy(update={"api_key": SecretStr(api_key)})
    if base_url is not None:
        config = config.model_copy(update={"base_url": base_url})
    ref = manifest.taskset
    if ref.kind == "hub" and ref.repo_id and ref.commit_sha:
        taskset = load_taskset(ref.repo_id, revision=ref.commit_sha, token=hub_token)
    else:
        taskset = load_taskset(ref.source, revision=config.revision, token=hub_token)
    if taskset.ref.fingerprint != ref.fingerprint:
        raise ResultsError(
            f"taskset {ref.source!r} changed since the run started (fingerprint "
            f"{ref.fingerprint[:12]} -> {taskset.ref.fingerprint[:12]}): cannot resume "
            f"{run_dir}; start a new run"
        )
    taskset = Taskset(ref, taskset.card, taskset.splits, taskset.environment)
    plan = _plan(config, taskset, run_dir, manifest.run_id)
    retry_outcomes = {RETRY_OUTCOMES[name] for name in retry}
    with RunLock(run_dir):  # read what is done only once no other writer can add to it
        manifest = read_manifest(run_dir)
        repair_results(run_dir / EPISODES)
        # a column per summary field, not a record per episode: a million-episode run resumes
        previous = read_results_table(run_dir, columns=(*SUMMARY_COLUMNS, "sample"))
        again = pc.is_in(
            previous["outcome"], value_set=pa.array(sorted(retry_outcomes), pa.string())
        )
        plan.previous = previous.filter(pc.invert(again))
        plan.done = _done(plan, plan.previous)
        if plan.previous.num_rows < previous.num_rows:
            logger.info(
                "resume %s: running %d episode(s) again (%s); their earlier records stay as "
                "history and are not counted",
                run_dir,
                previous.num_rows - plan.previous.num_rows,
                ", ".join(sorted(retry)),
            )
        del previous, again
        # what reading a million records took, Arrow's allocator keeps unless told (~0.3 GB)
        pa.default_memory_pool().release_unused()
        if manifest.status == "completed" and not any(True for _ in plan.items()):
            logger.info("run %s is complete: nothing to resume", manifest.run_id)
            summary = summarize(
                plan.previous, n_planned=plan.n_planned, comparability=manifest.comparability
            )
            return RunResult(run_dir, manifest, summary)
        async with _make_http() as http:
            runner = _Runner(
                plan,
                progress=progress,
                http=http,
                env_headers=env_headers,
                argv=argv or manifest.argv,
                parent_manifest=manifest,
                executor=executor,
            )
            return await runner.run()


def _done(plan: _Plan, previous: pyarrow.Table) -> numpy.ndarray[Any, Any]:
    """Which of ``plan``'s episodes have a record in ``previous`` (``_Plan.done``)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    samples = plan.config.samples
    ids = task_ids(plan.tasks)
    done = np.zeros(len(ids) * samples, dtype=bool)
    task = pc.index_in(previous["task_id"], value_set=pa.array(ids, pa.string()))
    task = pc.fill_null(task, -1).to_numpy(zero_copy_only=False)
    sample = pc.fill_null(previous["sample"], -1).to_numpy(zero_copy_only=False)
    # a record of a task or sample the plan does not hold (another --limit) counts for nothing
    planned = (task >= 0) & (sample >= 0) & (sample < samples)
    done[task[planned] * samples + sample[planned]] = True
    return done


def evaluate(config: EvalConfig, **kwargs: Any) -> RunResult:
    """Run ``evaluate_async`` to completion (the one sync entry point).

    Raises:
        RunInterrupted: Ctrl-C stopped the run; it names the run directory, if there is one.
    """
    target: list[Path] = []
    try:
        return asyncio.run(evaluate_async(config, _target=target, **kwargs))
    except RunInterrupted:
        raise
    except KeyboardInterrupt:
        raise RunInterrupted(target[0] if target else None) from None


def resume(run_dir: Path | str, **kwargs: Any) -> RunResult:
    """Run ``resume_async`` to completion.

    Raises:
        RunInterrupted: Ctrl-C stopped the run (it stays resumable).
    """
    try:
        return asyncio.run(resume_async(run_dir, **kwargs))
    except RunInterrupted:
        raise
    except KeyboardInterrupt:
        raise RunInterrupted(Path(run_dir)) from None
