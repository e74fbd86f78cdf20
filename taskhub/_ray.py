"""The Ray executor: a run's episodes played by one worker actor per node of a Ray cluster.

The driver (the process that runs ``evaluate``) plans every episode and is the only writer of
``episodes.jsonl``. Each alive node gets one worker actor (``taskhub._ray_node.NodeWorker``)
that owns that node's env servers (built-in envs and env folders are launched there, as soon as
the actor is up and before it imports the runner; URLs and Spaces are shared) and its model
client, and plays the episodes of the chunks it is handed with the runner's own code
(``EpisodeWorker``), streaming the records back as episodes end (in batches of those that end
within ``BATCH_WAIT_S`` of each other). The run begins when the first worker is up; the others
join as they come up. Chunks are cut from one queue as workers ask, so a fast node takes more
of them; each is a share of the episodes left (``chunk_size``), large while many are left and
down to the concurrency at the end, so that few calls carry a run and the workers still end
together. A chunk of a worker that dies goes back to the queue, less the records already
received, and another worker plays it. Every ``(task, sample)`` is written once.

Ray is imported only when a ``RayExecutor`` runs (``pip install 'taskhub-openenv[ray]'``).
Errors cross from the workers as their type name and message (an exception that does not
pickle would lose its type), and are raised again on the driver as taskhub's own.
"""

from __future__ import annotations

import asyncio
import collections
import importlib
import json
import logging
import math
import os
from dataclasses import dataclass, field, replace
from typing import Any

from taskhub import _errors, _ray_node
from taskhub._errors import ExecutorError, MissingDependencyError, TaskhubError
from taskhub._executor import EpisodeJob, EpisodeSink
from taskhub._ray_node import EarlyLaunch, NodeWorker
from taskhub._runner import env_spec, server_sessions
from taskhub._schema import EnvInfo, ExecutorInfo, Task
from taskhub.env import _spawn
from taskhub.env._launch import resolve_env, server_command

logger = logging.getLogger(__name__)

#: ``ray.init(address=...)`` value that starts a Ray instance on this machine for the run.
LOCAL = "local"


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise MissingDependencyError(
            "the Ray executor needs ray: pip install 'taskhub-openenv[ray]'"
        ) from None
    return ray


def connect_ray(address: str = LOCAL) -> bool:
    """Connect this process to Ray as a driver, unless it already is; True when Ray was started.

    Args:
        address: ``local`` starts a Ray instance on this machine (on loopback only); ``auto``,
            ``HOST:PORT`` or ``ray://HOST:PORT`` join a running cluster.

    Returns:
        True when this call connected (the caller then calls ``ray.shutdown()`` when done).

    Raises:
        MissingDependencyError: Ray is not installed.
    """
    ray = _import_ray()
    if ray.is_initialized():
        return False
    if address == LOCAL:
        # Otherwise Ray advertises a non-loopback address and listens on every interface.
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        ray.init(address=LOCAL, namespace="taskhub", log_to_driver=False, include_dashboard=False)
    else:
        ray.init(address=address, namespace="taskhub", log_to_driver=False)
    return True


def _error(info: dict[str, str]) -> TaskhubError:
    """A worker's error raised again on the driver, as taskhub's class of that name."""
    cls = getattr(_errors, info["type"], None)
    message = info["message"]
    if isinstance(cls, type) and issubclass(cls, TaskhubError):
        for candidate in cls.__mro__:
            if not (isinstance(candidate, type) and issubclass(candidate, TaskhubError)):
                break
            try:
                return candidate(message)
            except TypeError:  # a class whose constructor takes other arguments
                continue
    return TaskhubError(f"{info['type']}: {message}")


@dataclass
class WorkerInfo:
    """One worker actor of a running Ray executor."""

    node_id: str
    """The Ray node it runs on."""
    pid: int
    """Its process id on that node."""
    env_urls: list[str] = field(default_factory=list)
    """The env servers it plays on."""
    alive: bool = True
    """False once the driver lost it."""
    chunks: list[int] = field(default_factory=list)
    """The sizes of the chunks it was handed, in order."""
    phases: dict[str, float] = field(default_factory=dict)
    """When it reached each step of its start, in seconds since the epoch on its node's
    clock: ``actor up`` (its process had loaded the actor), ``env launched`` (it launched the
    env servers that serve the run, before importing the runner; absent for an env it does not
    launch), ``runner imported``, ``env up`` (its env answered: it is ready to play)."""


@dataclass
class _Chunk:
    items: list[tuple[Task, int]]


#: A chunk cut from the queue is at most this fraction of a worker's share of the episodes left.
CHUNK_SHARE = 4


def chunk_size(left: int, workers: int, concurrency: int) -> int:
    """Episodes in the next chunk: a ``CHUNK_SHARE``-th of a worker's share of those left.

    Never fewer than ``concurrency`` (the worker's slots), so that the last chunks, whose
    size no longer shrinks, keep every slot busy; never more than are left.
    """
    share = math.ceil(left / (CHUNK_SHARE * max(workers, 1)))
    return min(left, max(concurrency, share))


class RayExecutor:
    """Plays a run's episodes on a Ray cluster: ``evaluate(config, executor=RayExecutor(...))``.

    Example::

        from taskhub import EvalConfig, RayExecutor, evaluate

        evaluate(EvalConfig(model="scripted/oracle", taskset="arith"), executor=RayExecutor())

    ``config.concurrency`` is per node: each worker plays that many episodes at once.
    """

    def __init__(
        self,
        address: str = LOCAL,
        *,
        chunk_size: int | None = None,
        max_nodes: int | None = None,
    ) -> None:
        """Describe the cluster; nothing connects before ``run``.

        Args:
            address: What ``ray.init`` takes: ``local`` starts a Ray instance on this machine
                for the run (and stops it after); ``auto`` joins the one running here;
                ``HOST:PORT`` or ``ray://HOST:PORT`` a cluster. A Python session already
                connected to Ray (``ray.init`` called) is used as it is, whatever the address.
            chunk_size: Episodes handed to a worker at once. By default a chunk is a share
                of the episodes left (``chunk_size()``: a few calls carry a run, and the last
                chunks are as large as the concurrency, so the workers end together); with
                ``fail_fast`` it is the concurrency, so that a failure stops the run within a
                chunk. Each worker holds two chunks, so its slots never wait for the driver.
            max_nodes: Use at most this many nodes (default: every alive node).
        """
        if chunk_size is not None and chunk_size < 1:
            raise ValueError(f"chunk_size must be at least 1, got {chunk_size}")
        if max_nodes is not None and max_nodes < 1:
            raise ValueError(f"max_nodes must be at least 1, got {max_nodes}")
        self.address = address
        self.chunk_size = chunk_size
        self.max_nodes = max_nodes
        self.workers: list[WorkerInfo] = []
        """The worker actors of the current run, once started."""
        self._version: str | None = None

    @property
    def info(self) -> ExecutorInfo:
        """What ``run.json`` records."""
        return ExecutorInfo(
            kind="ray",
            address=None if self.address == LOCAL else self.address,
            nodes=len(self.workers),
            version=self._version,
        )

    async def run(self, job: EpisodeJob, sink: EpisodeSink) -> None:
        """Start one worker per node, stream every episode's record to ``sink``, stop them.

        The run begins as soon as one worker is up; the others join it as they come up (a
        worker still starting when the last episode ends is stopped, and plays none).

        Raises:
            MissingDependencyError: Ray is not installed.
            TaskhubError: A worker could not start the env or the model (its error, raised
                again here), or every worker was lost before the episodes were played.
        """
        ray = _import_ray()
        self._version = ray.__version__
        # In the loop's thread (the main one from the CLI), where Ray sets its signal handlers;
        # nothing else runs before the workers start.
        started = connect_ray(self.address)
        dispatch: _Dispatch | None = None
        try:
            dispatch = _Dispatch(self, ray, job, sink)
            await dispatch.run()
        finally:
            if dispatch is not None:
                await dispatch.stop()
            if started:
                ray.shutdown()

    def _create_actors(self, ray: Any, launch: EarlyLaunch | None) -> list[Any]:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        nodes = [n for n in ray.nodes() if n.get("Alive")]
        if self.max_nodes is not None:
            nodes = nodes[: self.max_nodes]
        if not nodes:
            raise ExecutorError(f"the Ray cluster at {self.address!r} has no alive node")
        remote = ray.remote(num_cpus=0, max_restarts=0, max_concurrency=64)(node_worker())
        self.workers = []
        return [
            remote.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)
            ).remote(launch)
            for n in nodes
        ]


def node_worker() -> type[NodeWorker]:
    """The actor class, registered to travel by value: a node loads it without taskhub.

    Ray's pickler sends a class by reference (its module's name) unless its module is
    registered: the node would import ``taskhub._ray_node``, and with it all of taskhub, before
    the actor's constructor could launch anything.
    """
    cloudpickle = importlib.import_module("ray.cloudpickle")  # the pickler Ray sends with
    for module in (_spawn, _ray_node):
        cloudpickle.register_pickle_by_value(module)
    return NodeWorker


def early_launch(job: EpisodeJob) -> EarlyLaunch | None:
    """What each node's worker launches as soon as it is up: the servers of a local env.

    None for an env that is not launched by taskhub (a URL, a Space, a provider's), and for
    one that cannot be (the worker then meets the error as a plain run does, and reports it).
    """
    config = job.config
    if config.env_provider is not None:
        return None
    try:
        spec = env_spec(config, job.taskset)
        target = resolve_env(spec)
        if target.kind not in ("folder", "builtin") or target.path is None:
            return None
        command = server_command(target.path)
    except TaskhubError:
        return None
    return EarlyLaunch(
        command,
        folder=str(target.path) if target.kind == "folder" else None,
        builtin=target.path.name if target.kind == "builtin" else None,
        replicas=config.replicas,
        max_sessions=server_sessions(config),
    )


class _Dispatch:
    """One run on the driver: the workers as they come up, the chunk queue, the records."""

    def __init__(self, executor: RayExecutor, ray: Any, job: EpisodeJob, sink: EpisodeSink) -> None:
        self.executor = executor
        self.ray = ray
        self.sink = sink
        config = job.config
        self.concurrency = config.concurrency
        self.fixed = executor.chunk_size or (config.concurrency if config.fail_fast else None)
        # The episodes not yet handed out, in plan order: chunks are cut as workers ask.
        self.queue = collections.deque(job.items)
        # Workers get the tasks with their chunks, not with the job.
        self.shared = ray.put(replace(job, items=[]))
        self.actors = executor._create_actors(ray, early_launch(job))
        self.alive = [True] * len(self.actors)
        self.starts: list[asyncio.Future[Any]] = []
        self.written: set[tuple[str, int]] = set()
        self.fatal: list[TaskhubError] = []
        self.died: list[str] = []
        self.begun = False
        self.in_flight = 0
        self.changed = asyncio.Condition()

    def over(self) -> bool:
        return bool(self.fatal) or self.sink.stopping

    def finished(self) -> bool:
        return self.over() or (self.begun and not self.queue and self.in_flight == 0)

    def fail(self, error: TaskhubError) -> None:
        self.fatal.append(error)
        if self.begun:
            self.sink.fail(self.fatal[0])

    async def notify(self) -> None:
        async with self.changed:
            self.changed.notify_all()

    async def run(self) -> None:
        await asyncio.gather(*(self.serve(i) for i in range(len(self.actors))))
        if not self.begun:
            if self.fatal:
                raise self.fatal[0]
            cause = self.died[0] if self.died else "no answer"
            raise ExecutorError(
                f"every Ray worker died while it started ({cause}); check the cluster's nodes "
                "(ray status) and try again"
            )
        if self.queue and not self.over():
            raise ExecutorError(
                f"every Ray worker was lost with {len(self.queue)} episodes still to play; the "
                "records received are kept: finish with taskhub eval --resume RUN_DIR"
            )

    async def serve(self, index: int) -> None:
        """Start worker ``index``; once it is up, feed it chunks until none is left."""
        actor = self.actors[index]
        start: asyncio.Future[Any] = asyncio.ensure_future(_result(actor.start.remote(self.shared)))
        self.starts.append(start)
        ended = asyncio.ensure_future(self._until_finished())
        try:
            await asyncio.wait({start, ended}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            ended.cancel()
        if not start.done():  # the run ended first: stop() cancels the start
            return
        try:
            answer = start.result()
        except self.ray.exceptions.RayError as exc:
            self.alive[index] = False
            self.died.append(f"{type(exc).__name__}: {str(exc)[-500:]}")
            logger.warning("ray: a worker died while it started (%s)", type(exc).__name__)
            await self.notify()
            return
        if "error" in answer:
            self.fail(_error(answer["error"]))
            await self.notify()
            return
        if "stopped" in answer or self.finished():  # up too late to play
            return
        env = EnvInfo.model_validate(answer["env"])
        info = WorkerInfo(answer["node_id"], answer["pid"], env.urls, phases=answer["phases"])
        self.executor.workers.append(info)
        if self.begun:
            self.sink.join(env)
        else:
            self.begun = True
            self.sink.begin(env, answer["model_details"], answer.get("tool_calling"))
        logger.info(
            "ray: worker %d of %d up on node %s",
            len(self.executor.workers),
            len(self.actors),
            info.node_id[:12],
        )
        # Two feeders per worker: while one chunk drains, the next one already plays.
        await asyncio.gather(self.feed(index, info), self.feed(index, info))

    async def _until_finished(self) -> None:
        async with self.changed:
            await self.changed.wait_for(self.finished)

    async def next_chunk(self) -> _Chunk | None:
        # An empty queue is not the end while chunks are in flight: a worker lost later puts
        # the rest of its chunk back, for whichever worker is still alive (or starting).
        async with self.changed:
            await self.changed.wait_for(lambda: bool(self.queue) or self.finished())
            if self.over() or not self.queue:
                return None
            self.in_flight += 1
            size = self.fixed or chunk_size(len(self.queue), sum(self.alive), self.concurrency)
            return _Chunk([self.queue.popleft() for _ in range(min(size, len(self.queue)))])

    async def done_with(self, chunk: _Chunk | None) -> None:
        async with self.changed:
            self.in_flight -= 1
            if chunk is not None:  # first in line again, in plan order
                self.queue.extendleft(reversed(chunk.items))
            self.changed.notify_all()

    async def feed(self, index: int, info: WorkerInfo) -> None:
        actor, sink = self.actors[index], self.sink
        while info.alive:
            chunk = await self.next_chunk()
            if chunk is None:
                return
            info.chunks.append(len(chunk.items))
            pending = {(t.task_id, s): (t, s) for t, s in chunk.items}
            left: _Chunk | None = None
            try:
                async for ref in actor.play.remote(chunk.items):
                    kind, payload = await ref
                    if kind == "error":
                        self.fail(_error(json.loads(payload)))
                        break
                    for line, summary in payload:
                        key = summary.key()
                        pending.pop(key, None)
                        if key not in self.written:
                            self.written.add(key)
                            sink.record(summary, line)
            except self.ray.exceptions.RayError as exc:
                info.alive = self.alive[index] = False
                logger.warning(
                    "ray: worker on node %s lost (%s); %d episodes of its chunk go back "
                    "to the queue",
                    info.node_id[:12],
                    type(exc).__name__,
                    len(pending),
                )
                if pending:
                    left = _Chunk(list(pending.values()))
            finally:
                await self.done_with(left)

    async def stop(self) -> None:
        """Stop every worker not lost (one still starting is cancelled), then end the actors."""
        ray = self.ray
        alive = [a for a, ok in zip(self.actors, self.alive, strict=True) if ok]
        if alive:
            try:
                await asyncio.wait_for(
                    asyncio.gather(
                        *(a.stop.remote() for a in alive), *self.starts, return_exceptions=True
                    ),
                    timeout=60,
                )
            except TimeoutError:
                logger.warning("ray: workers did not stop their env servers within 60 s")
        for actor in self.actors:
            ray.kill(actor, no_restart=True)


async def _result(ref: Any) -> Any:
    return await ref
