"""The Ray actor on each node of a run: it launches the node's env servers, then plays chunks.

Ray sends this class to the nodes by value (``taskhub._ray.node_worker`` registers this module
and ``taskhub.env._spawn`` with Ray's pickler for that): a worker process loads it with the
standard library alone, so the env servers the driver names are launched in its constructor,
before the process imports taskhub. The runner comes in with the first ``start`` call (its
argument, the job, is made of taskhub's classes) while the servers start on the node's other
cores, instead of after it. Nothing of taskhub but ``taskhub.env._spawn`` is imported here at
module level: the methods import what they use.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from taskhub.env._spawn import ServerCommand, free_port, spawn_server

if TYPE_CHECKING:
    from taskhub._executor import EpisodeJob
    from taskhub._runner import EpisodeWorker
    from taskhub._schema import EnvInfo, EpisodeRecord, Task
    from taskhub.env._launch import LocalServer

#: A node worker's folder (its env servers' logs) is made in the temporary folder under this
#: prefix, with an ``owner`` file naming the host and process it belongs to.
FOLDER_PREFIX = "taskhub-ray-"

#: Seconds a finished episode's record waits on its worker for others to travel back with it
#: (one Ray object per batch rather than per record); a chunk's last record never waits.
BATCH_WAIT_S = 0.05


@dataclass(frozen=True)
class EarlyLaunch:
    """The env servers a node's worker launches as soon as it is up: a local env's.

    The driver works out the command (``server_command``); the node finds the folder on its
    own disk: an env folder at the same path, a built-in env in its own taskhub install.
    """

    command: ServerCommand
    """How the env is served."""
    folder: str | None = None
    """An env folder's path."""
    builtin: str | None = None
    """A built-in env's name."""
    replicas: int = 1
    """Servers to launch."""
    max_sessions: int | None = None
    """Sessions each server is told to accept (``MAX_CONCURRENT_ENVS``)."""

    def node_folder(self) -> Path | None:
        """The env's folder on this node, None when it has none there."""
        if self.builtin is not None:
            # find_spec of a top-level package locates it without importing it
            spec = importlib.util.find_spec("taskhub")
            if spec is None or not spec.submodule_search_locations:
                return None
            folder = Path(next(iter(spec.submodule_search_locations))) / "_envs" / self.builtin
        elif self.folder is not None:
            folder = Path(self.folder)
        else:
            return None
        return folder if (folder / self.command.workdir).is_dir() else None


class NodeWorker:
    """The actor on one node: its early env servers, an ``EpisodeWorker`` and its chunks."""

    def __init__(self, launch: EarlyLaunch | None = None) -> None:
        """Launch the env servers of ``launch`` (if any); nothing else starts before ``start``.

        A launch that fails is left to ``start``, which launches them as a plain run does
        (and so reports why they cannot start the same way).
        """
        self.phases = {"actor up": time.time()}
        sweep_lost_folders(Path(tempfile.gettempdir()))
        self.log_dir = Path(tempfile.mkdtemp(prefix=FOLDER_PREFIX))
        (self.log_dir / "owner").write_text(_owner(os.getpid()), encoding="utf-8")
        self.early: list[tuple[Path, int, subprocess.Popen[bytes], Path]] = []
        self.servers: list[LocalServer] = []
        self.worker: EpisodeWorker | None = None
        self.opening: asyncio.Future[tuple[EnvInfo, dict[str, Any]]] | None = None
        self.stopping = False
        folder = launch.node_folder() if launch is not None else None
        if launch is None or folder is None:
            return
        try:
            for _ in range(launch.replicas):
                port = free_port()
                log_path = self.log_dir / "env-logs" / f"{folder.name}-{port}.log"
                process = spawn_server(
                    folder,
                    launch.command,
                    port=port,
                    log_path=log_path,
                    max_sessions=launch.max_sessions,
                )
                self.early.append((folder, port, process, log_path))
        except OSError:
            self._kill_early()
            return
        self.phases["env launched"] = time.time()

    async def start(self, job: EpisodeJob) -> dict[str, Any]:
        """Open the worker; return the env, the model details, this process and its phases.

        The servers launched early are handed to it (it waits until they answer). The phases
        say when the worker reached each step of its start (seconds since the epoch): its
        actor ran (``actor up``), it launched the env servers that serve the run (``env
        launched``, only when that came before the runner's imports), it had imported the
        runner (``runner imported``), the env answered (``env up``). Returns the error instead
        when the env or the model cannot start; a ``stop`` while it opens (the run ended
        first) stops what was started and answers ``{"stopped": True}``.
        """
        import ray

        from taskhub._runner import EpisodeWorker
        from taskhub.env._launch import LocalServer

        self.phases["runner imported"] = time.time()
        self.servers = [LocalServer(*server) for server in self.early]
        self.early = []
        worker = EpisodeWorker(job, log_dir=self.log_dir, launched=self.servers)
        opening = self.opening = asyncio.ensure_future(worker.open())
        try:
            env_info, details = await opening
        except asyncio.CancelledError:
            this = asyncio.current_task()
            if this is not None and this.cancelling():  # this call itself was cancelled
                raise
            return {"stopped": True}
        except Exception as exc:
            return {"error": _error_info(exc)}
        finally:
            self.opening = None
        if self.stopping:  # stop() came as it opened
            await worker.close()
            return {"stopped": True}
        self.worker = worker
        self.phases["env up"] = time.time()
        if not {server.url for server in self.servers} & set(env_info.urls):
            self.phases.pop("env launched", None)  # launched again by the runner
        return {
            "env": env_info.model_dump(mode="json"),
            "model_details": details,
            "tool_calling": worker.tool_calling,
            "pid": os.getpid(),
            "node_id": ray.get_runtime_context().get_node_id(),
            "phases": self.phases,
        }

    async def play(self, items: list[tuple[Task, int]]) -> AsyncIterator[tuple[str, Any]]:
        """Yield ``("records", [(line, summary), ...])`` as episodes end, or ``("error", json)``.

        Each record travels as the JSON line ``episodes.jsonl`` gets and its summary row (the
        record without its trajectory), so that the writer neither parses nor serializes it
        again. Records travel in batches: each waits at most ``BATCH_WAIT_S`` for the ones
        ending after it, and the last of the chunk is sent as soon as it ends.
        """
        from taskhub._errors import TaskhubError
        from taskhub._runner import stored_line, summary_row
        from taskhub._schema import ErrorInfo

        worker = self.worker
        assert worker is not None
        ended: asyncio.Queue[EpisodeRecord | None] = asyncio.Queue()

        async def produce() -> None:
            try:
                async for record in worker.play(items):
                    ended.put_nowait(record)
            finally:
                ended.put_nowait(None)

        producer = asyncio.create_task(produce())
        loop = asyncio.get_running_loop()
        batch: list[tuple[str, EpisodeRecord]] = []
        due = 0.0
        try:
            while True:
                try:
                    async with asyncio.timeout_at(due if batch else None):
                        record = await ended.get()
                except TimeoutError:
                    yield ("records", batch)
                    batch = []
                    continue
                if record is None:
                    break
                if not batch:
                    due = loop.time() + BATCH_WAIT_S
                stored, line = stored_line(record)
                batch.append((line, summary_row(stored)))
            try:
                await producer
            except TaskhubError as exc:
                if batch:  # played before the error: results like any other
                    yield ("records", batch)
                yield ("error", ErrorInfo.from_exception(exc).model_dump_json())
                return
            if batch:
                yield ("records", batch)
        finally:
            producer.cancel()
            await asyncio.gather(producer, return_exceptions=True)

    async def stop(self) -> None:
        """Stop this node's env servers and model client (cancelling a start under way)."""
        self.stopping = True
        if self.opening is not None:
            self.opening.cancel()
            await asyncio.gather(self.opening, return_exceptions=True)
        if self.worker is not None:
            await self.worker.close()
            self.worker = None
        # the servers launched early, whoever holds them now (stopping one twice does nothing)
        for server in self.servers:
            server.stop()
        self._kill_early()
        shutil.rmtree(self.log_dir, ignore_errors=True)

    def _kill_early(self) -> None:
        for *_, process, _log in self.early:
            process.kill()
            process.wait()
        self.early = []


def sweep_lost_folders(root: Path) -> list[Path]:
    """Remove the folders of node workers that ended without ``stop`` (killed, or lost).

    A worker removes its folder when it stops; one that is killed cannot. Its folder is
    removed here, by the next worker that starts on the same host, once its process is gone:
    a folder whose ``owner`` names another host (a container sharing the folder), a process
    still alive, or nothing readable, is left alone.

    Returns:
        The folders removed.
    """
    removed = []
    for folder in root.glob(f"{FOLDER_PREFIX}*"):
        try:
            owner = (folder / "owner").read_text(encoding="utf-8")[:300]
        except (OSError, UnicodeDecodeError):
            continue
        pid = owner.rpartition(" ")[2]
        if not pid.isdigit() or owner != _owner(int(pid)) or _alive(int(pid)):
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


def _owner(pid: int) -> str:
    return f"{socket.gethostname()} {pid}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _error_info(exc: BaseException) -> dict[str, str]:
    from taskhub._schema import ErrorInfo

    info = ErrorInfo.from_exception(exc)
    return {"type": info.type, "message": info.message}
