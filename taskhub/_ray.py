"""The Ray executor: a run's episodes played by one worker actor per node of a Ray cluster.

The driver (the process that runs ``evaluate``) plans every episode and is the only writer of
``episodes.jsonl``. Each alive node gets one worker actor that owns that node's env servers
(built-in envs and env folders are launched there; URLs and Spaces are shared) and its model
client, and plays the episodes of the chunks it is handed with the runner's own code
(``EpisodeWorker``), streaming each record back as it ends. Chunks come from one queue, so a
fast node takes more of them; a chunk of a worker that dies goes back to the queue, less the
records already received, and another worker plays it. Every ``(task, sample)`` is written once.

Ray is imported only when a ``RayExecutor`` runs (``pip install 'taskhub-openenv[ray]'``).
Errors cross from the workers as their type name and message (an exception that does not
pickle would lose its type), and are raised again on the driver as taskhub's own.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from taskhub import _errors
from taskhub._errors import ExecutorError, MissingDependencyError, TaskhubError
from taskhub._executor import EpisodeJob, EpisodeSink
from taskhub._runner import EpisodeWorker
from taskhub._schema import EnvInfo, EpisodeRecord, ErrorInfo, ExecutorInfo, Task

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


def _error_info(exc: BaseException) -> dict[str, str]:
    info = ErrorInfo.from_exception(exc)
    return {"type": info.type, "message": info.message}


class NodeWorker:
    """The actor on one node: an ``EpisodeWorker`` and the chunks streamed through it."""

    def __init__(self) -> None:
        """Nothing starts before ``start`` (so that start errors come back as values)."""
        self.worker: EpisodeWorker | None = None
        self.log_dir = Path(tempfile.mkdtemp(prefix="taskhub-ray-"))

    async def start(self, job: EpisodeJob) -> dict[str, Any]:
        """Open the worker; return the env, the model details and this process, or the error."""
        import ray

        worker = EpisodeWorker(job, log_dir=self.log_dir)
        try:
            env_info, details = await worker.open()
        except Exception as exc:
            return {"error": _error_info(exc)}
        self.worker = worker
        return {
            "env": env_info.model_dump(mode="json"),
            "model_details": details,
            "tool_calling": worker.tool_calling,
            "pid": os.getpid(),
            "node_id": ray.get_runtime_context().get_node_id(),
        }

    async def play(self, items: list[tuple[Task, int]]) -> AsyncIterator[tuple[str, str]]:
        """Yield ``("record", json)`` per episode as it ends, or ``("error", json)`` and stop."""
        assert self.worker is not None
        try:
            async for record in self.worker.play(items):
                yield ("record", record.model_dump_json())
        except TaskhubError as exc:
            yield ("error", ErrorInfo.from_exception(exc).model_dump_json())

    async def stop(self) -> None:
        """Stop this node's env servers and model client."""
        if self.worker is not None:
            await self.worker.close()
            self.worker = None
        shutil.rmtree(self.log_dir, ignore_errors=True)


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


@dataclass
class _Chunk:
    items: list[tuple[Task, int]]


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
            chunk_size: Episodes handed to a worker at once (default: its concurrency). Each
                worker holds two chunks, so its slots never wait for the driver.
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
        actors: list[Any] = []
        try:
            actors = await self._start_workers(ray, job, sink)
            await self._play(ray, actors, job, sink)
        finally:
            await self._stop_workers(ray, actors)
            if started:
                ray.shutdown()

    async def _start_workers(self, ray: Any, job: EpisodeJob, sink: EpisodeSink) -> list[Any]:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        nodes = [n for n in ray.nodes() if n.get("Alive")]
        if self.max_nodes is not None:
            nodes = nodes[: self.max_nodes]
        if not nodes:
            raise ExecutorError(f"the Ray cluster at {self.address!r} has no alive node")
        remote = ray.remote(num_cpus=0, max_restarts=0, max_concurrency=64)(NodeWorker)
        actors = [
            remote.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)
            ).remote()
            for n in nodes
        ]
        # Workers get the tasks with their chunks, not with the job.
        shared = ray.put(replace(job, items=[]))
        self.workers = []
        try:
            answers = await asyncio.gather(*(a.start.remote(shared) for a in actors))
        except ray.exceptions.RayError as exc:
            await self._stop_workers(ray, actors)
            raise ExecutorError(
                f"a Ray worker died while it started ({type(exc).__name__}: "
                f"{str(exc)[-500:]}); check the cluster's nodes (ray status) and try again"
            ) from None
        for answer in answers:
            if "error" in answer:
                await self._stop_workers(ray, actors)
                raise _error(answer["error"])
            env = EnvInfo.model_validate(answer["env"])
            self.workers.append(WorkerInfo(answer["node_id"], answer["pid"], env.urls))
        first = EnvInfo.model_validate(answers[0]["env"])
        urls = list(dict.fromkeys(u for w in self.workers for u in w.env_urls))
        sink.begin(
            first.model_copy(update={"urls": urls}),
            answers[0]["model_details"],
            answers[0].get("tool_calling"),
        )
        logger.info("ray: %d workers started on %d nodes", len(actors), len(nodes))
        return actors

    async def _play(self, ray: Any, actors: list[Any], job: EpisodeJob, sink: EpisodeSink) -> None:
        size = self.chunk_size or job.config.concurrency
        items = job.items
        queue = collections.deque(_Chunk(items[i : i + size]) for i in range(0, len(items), size))
        written: set[tuple[str, int]] = set()
        fatal: list[TaskhubError] = []
        in_flight = 0
        changed = asyncio.Condition()

        def over() -> bool:
            return bool(fatal) or sink.stopping

        async def next_chunk() -> _Chunk | None:
            # An empty queue is not the end while chunks are in flight: a worker lost later
            # puts the rest of its chunk back, for whichever worker is still alive.
            nonlocal in_flight
            async with changed:
                await changed.wait_for(lambda: bool(queue) or in_flight == 0 or over())
                if over() or not queue:
                    return None
                in_flight += 1
                return queue.popleft()

        async def done_with(chunk: _Chunk | None) -> None:
            nonlocal in_flight
            async with changed:
                in_flight -= 1
                if chunk is not None:
                    queue.appendleft(chunk)
                changed.notify_all()

        async def feed(index: int) -> None:
            actor, info = actors[index], self.workers[index]
            while info.alive:
                chunk = await next_chunk()
                if chunk is None:
                    return
                pending = {(t.task_id, s): (t, s) for t, s in chunk.items}
                left: _Chunk | None = None
                try:
                    async for ref in actor.play.remote(chunk.items):
                        kind, payload = await ref
                        if kind == "error":
                            fatal.append(_error(json.loads(payload)))
                            sink.fail(fatal[0])
                            break
                        record = EpisodeRecord.model_validate_json(payload)
                        pending.pop(record.key(), None)
                        if record.key() not in written:
                            written.add(record.key())
                            sink.record(record)
                except ray.exceptions.RayError as exc:
                    info.alive = False
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
                    await done_with(left)

        # Two feeders per worker: while one chunk drains, the next one already plays.
        await asyncio.gather(*(feed(i) for i in range(len(actors)) for _ in range(2)))
        if queue and not over():
            left = sum(len(c.items) for c in queue)
            raise ExecutorError(
                f"every Ray worker was lost with {left} episodes still to play; the records "
                "received are kept: finish with taskhub eval --resume RUN_DIR"
            )

    async def _stop_workers(self, ray: Any, actors: list[Any]) -> None:
        alive = [a for a, w in zip(actors, self.workers, strict=False) if w.alive]
        alive += actors[len(self.workers) :]  # started, not yet described
        if alive:
            try:
                await asyncio.wait_for(
                    asyncio.gather(*(a.stop.remote() for a in alive), return_exceptions=True),
                    timeout=60,
                )
            except TimeoutError:
                logger.warning("ray: workers did not stop their env servers within 60 s")
        for actor in actors:
            ray.kill(actor, no_restart=True)
