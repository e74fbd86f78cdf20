"""Where a run's episodes are played: the seam between the runner and an executor.

The runner plans a run and stays the only writer of its run directory; an ``Executor`` plays
the planned episodes (on this machine or on a cluster) and hands every record back through an
``EpisodeSink``. Without an executor the runner plays them itself, in this process. The Ray
executor (``taskhub._ray.RayExecutor``) runs one ``EpisodeWorker`` per node.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from taskhub._schema import EnvInfo, EpisodeRecord, EvalConfig, ExecutorInfo, Task
from taskhub._taskset import Taskset


@dataclass(frozen=True)
class EpisodeJob:
    """Everything a worker needs to play a run's episodes, and nothing it must not select again.

    ``taskset`` holds only the planned tasks, as the one split ``split``, and ``config`` has no
    ``limit`` or ``shard`` left: a worker plans each episode exactly as the runner would.
    """

    config: EvalConfig
    taskset: Taskset
    split: str
    run_id: str
    items: list[tuple[Task, int]]
    """The ``(task, sample)`` pairs still to play, in plan order."""
    env_headers: dict[str, str] = field(default_factory=dict)


class EpisodeSink(Protocol):
    """The runner, as an executor sees it."""

    def begin(
        self,
        env_info: EnvInfo,
        model_details: dict[str, Any],
        tool_calling: Literal["native", "text"] | None = None,
    ) -> None:
        """The env is up: the run starts writing (call once, before the first record).

        ``tool_calling`` is how the workers' model acts on a tool env (None elsewhere).
        """
        ...

    def join(self, env_info: EnvInfo) -> None:
        """Another worker's env is up, after ``begin``: its URLs join the run's."""
        ...

    def record(self, record: EpisodeRecord, line: str | None = None) -> None:
        """One finished episode, written as it arrives.

        An executor whose workers serialize their records (``taskhub._runner.stored_line``)
        passes that JSON as ``line``, written as it is, and may pass the record's summary row
        (``summary_row``) as ``record``: the writer then neither parses nor serializes it.
        """
        ...

    def fail(self, error: BaseException) -> None:
        """A fatal error (bad credentials): stop starting episodes; the run raises it."""
        ...

    @property
    def stopping(self) -> bool:
        """True once no more episodes are to be started (--fail-fast or a fatal error)."""
        ...


class Executor(Protocol):
    """Plays a run's episodes somewhere and hands their records to the runner.

    Records must not depend on the executor: the seeds, episode ids and reset payloads come
    from the plan, so any executor gives the records a local run gives.
    """

    @property
    def info(self) -> ExecutorInfo:
        """What ``run.json`` records of the executor."""
        ...

    async def run(self, job: EpisodeJob, sink: EpisodeSink) -> None:
        """Play ``job.items``; call ``sink.begin`` once, then ``sink.record`` per episode.

        Workers that come up after ``begin`` announce their env with ``sink.join``.

        Raises:
            TaskhubError: The env or model could not be started, or every worker was lost
                (the records received are written; the run stays resumable).
        """
        ...
