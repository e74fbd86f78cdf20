"""A process pool for CPU-heavy rewards, with per-call timeouts that kill hung workers.

math-verify and sympy can spend minutes (or forever) on one pathological answer, inside C code
where no signal handler runs, and math-verify's own ``signal.alarm`` timeouts only work on a
main thread anyway. So heavy rewards run here: in worker processes, each call with a deadline.
A worker that passes its deadline is killed (SIGKILL) and replaced; the call fails with a
``RewardError`` (the episode becomes a ``reward_error``) and the calls queued behind it run on.

The pool is independent of any event loop: ``submit`` returns a ``concurrent.futures.Future``
and ``run`` awaits it from asyncio. One manager thread feeds the workers (a few jobs ahead, so
the pipe round trip does not idle them), collects results and enforces deadlines.

Workers are fresh interpreters (``python -P -c BOOTSTRAP FD PID``, which imports
``taskhub.rewards._worker``) talking over a socket pair: never forked from a process that runs
threads (a lock held at fork time deadlocks the child), and unlike multiprocessing's spawn and
forkserver they never re-run the user's ``__main__`` module, so a script without an
``if __name__ == "__main__":`` guard works. They stop at interpreter exit, or on their own when
the process that owns them dies.

```
submit() ──► queue ──► manager thread ──► socket ──► worker: fn(*args), one job at a time
   ▲                       │   ▲ result / EOF (died)        │
   └─ Future ◄─────────────┘   └────────────────────────────┘
                           deadline passed: kill the worker, fail its job, requeue the rest
```
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import itertools
import logging
import os
import pickle
import select
import selectors
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from taskhub import RewardError

logger = logging.getLogger(__name__)

#: Jobs a worker holds at most (the one it runs and the next ones), so that it never waits on a
#: round trip through the manager, yet a slow job holds few others back.
_AHEAD = 8
#: How long a worker may take to exit after being asked to, at shutdown.
_STOP_GRACE_S = 2.0
#: What a worker process runs (kept apart: the package never imports it, or ``-m`` would warn).
_PACKAGE = __name__.rpartition(".")[0]
_WORKER_MODULE = _PACKAGE + "._worker"
#: The job id of a worker's "ready" message (``_worker.READY``).
READY = -1
#: What a worker runs first: it imports the worker module and says why when it cannot (an
#: install shadowed by a partial source tree, a broken environment), so that the pool fails
#: at once with that error instead of waiting for workers that will never start.
_BOOTSTRAP = f"""
import sys
from multiprocessing.connection import Connection
conn = Connection(int(sys.argv[1]))
try:
    from {_WORKER_MODULE} import main
except BaseException as exc:
    conn.send(({READY}, False, f"{{type(exc).__name__}}: {{exc}}"))
    raise SystemExit(1)
main(conn, int(sys.argv[2]), sys.argv[3:])
"""


@dataclass
class _Job:
    id: int
    payload: bytes
    timeout_s: float
    future: concurrent.futures.Future[Any]
    label: str
    # set_running_or_notify_cancel() was called (it may be called once only): a job taken back
    # from a killed worker is requeued marked
    marked: bool = False


@dataclass
class _Worker:
    process: subprocess.Popen[bytes]
    conn: Connection
    jobs: deque[_Job] = field(default_factory=deque)
    # When the job at the head of ``jobs`` started (the worker runs jobs in order).
    head_started: float = 0.0
    # Whether the worker has started (imports done); jobs go to ready workers only.
    ready: bool = False

    def __post_init__(self) -> None:
        self.fd = self.conn.fileno()  # kept: a closed connection no longer tells it


class RewardPool:
    """Worker processes that run picklable functions with a deadline per call.

    Example::

        pool = RewardPool(workers=2)
        value = await pool.run(math.factorial, 20, timeout_s=5.0)
        pool.shutdown()

    ``fn`` must be importable by name (a module-level function). A call that raises fails with
    ``RewardError("TypeName: message")``; one that passes ``timeout_s`` fails with a
    ``RewardError`` saying so, and its worker is killed and replaced.
    """

    def __init__(self, workers: int | None = None, *, preload: Sequence[str] = ()) -> None:
        """Describe the pool; processes start on ``start()`` or the first ``submit``.

        Args:
            workers: Worker processes (default: the number of CPUs).
            preload: Modules each worker imports when it starts (heavy libraries).
        """
        self.size = max(1, workers or os.cpu_count() or 1)
        self.preload = tuple(preload)
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self._reset_state()

    def _reset_state(self) -> None:
        self._pid = os.getpid()
        self._queue: deque[_Job] = deque()
        self._workers: list[_Worker | None] = [None] * self.size
        self._thread: threading.Thread | None = None
        self._closing = False
        self._why = "the reward pool is shut down"
        # a byte in this pipe wakes the manager; both ends are non-blocking (a full pipe
        # already means "wake up")
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._wake_pending = False
        self._all_ready = threading.Event()
        # the manager waits on this: the wake-up pipe and every worker's socket
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self.kills = 0
        """Workers killed for passing a deadline (for tests and logs)."""

    # --- the caller's side ---------------------------------------------------------------------

    def start(self) -> None:
        """Start the manager thread, which starts the workers (returns at once)."""
        with self._lock:
            if os.getpid() != self._pid:  # we are a forked child: the parent's pool is not ours
                self._reset_state()
            if self._closing:
                raise RewardError(self._why)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._manage, name="taskhub-reward-pool", daemon=True
                )
                self._thread.start()
                atexit.register(self.shutdown)

    def wait_ready(self, timeout_s: float | None = None) -> bool:
        """Start the pool and block until every worker has started; False on timeout."""
        self.start()
        return self._all_ready.wait(timeout_s)

    def submit(
        self, fn: Callable[..., Any], /, *args: Any, timeout_s: float, label: str = ""
    ) -> concurrent.futures.Future[Any]:
        """Queue ``fn(*args)`` for a worker.

        Args:
            fn: A module-level function (pickled by reference).
            *args: Its picklable arguments.
            timeout_s: Seconds the call may run once a worker starts it.
            label: What the call is, for messages (``math_verify``).

        Returns:
            A future of ``fn``'s result.

        Raises:
            RewardError: ``fn`` or its arguments cannot be pickled, or the pool is shut down.
        """
        try:
            payload = pickle.dumps((fn, args), protocol=pickle.HIGHEST_PROTOCOL)
        except (pickle.PicklingError, TypeError, AttributeError) as exc:
            what = label or "reward"
            raise RewardError(f"{what} cannot run in a worker process: {exc}") from None
        self.start()
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        job = _Job(next(self._ids), payload, timeout_s, future, label or "reward")
        with self._lock:
            self._queue.append(job)
            wake = not self._wake_pending
            self._wake_pending = True
        if wake:  # one wake-up per manager turn, however many calls arrive meanwhile
            self._wake()
        return future

    async def run(
        self, fn: Callable[..., Any], /, *args: Any, timeout_s: float, label: str = ""
    ) -> Any:
        """Await ``fn(*args)`` run in a worker (see ``submit``)."""
        return await asyncio.wrap_future(self.submit(fn, *args, timeout_s=timeout_s, label=label))

    def shutdown(self, wait: bool = True) -> None:
        """Stop the workers; queued calls fail with ``RewardError``. Safe to call twice."""
        with self._lock:
            if self._closing or os.getpid() != self._pid:
                return
            self._closing = True
            self._why = "the reward pool was shut down"
            thread = self._thread
        self._wake()
        if thread is not None and wait:
            thread.join(_STOP_GRACE_S * 2 + 5)

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"!")
        except OSError:  # full (the manager has wake-ups pending) or closed (it is gone)
            pass

    # --- the manager thread --------------------------------------------------------------------

    def _spawn(self, index: int) -> _Worker | None:
        ours, theirs = socket.socketpair()
        # the worker imports what this process can import, whatever put it on sys.path
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        try:
            process = subprocess.Popen(  # stdout: a worker prints nothing the owner wants
                [
                    sys.executable,
                    # -P: the current directory is not put first on sys.path, where a source
                    # tree there would shadow the install this process imports
                    "-P",
                    "-c",
                    _BOOTSTRAP,
                    str(theirs.fileno()),
                    str(os.getpid()),
                    *self.preload,
                ],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                env=env,
            )
        except OSError as exc:
            logger.error("could not start a reward worker process: %s", exc)
            ours.close()
            return None
        finally:
            theirs.close()  # so that the worker's death reads as EOF here
        return _Worker(process, Connection(ours.detach()))

    def _manage(self) -> None:
        why: str | None = None
        try:
            self._loop()
        except Exception:  # a bug here must not leave callers waiting for ever
            logger.exception("the reward pool manager failed")
            why = "the reward pool failed; see the log"
        finally:
            # whatever ended the loop, the pool takes no more calls and fails those it holds
            with self._lock:
                self._closing = True
                self._why = why or self._why
            self._fail_all(self._why)
            self._stop_workers()

    def _close(self, why: str) -> None:
        with self._lock:
            self._closing = True
            self._why = why

    def _set_worker(self, index: int, worker: _Worker | None) -> None:
        old = self._workers[index]
        if old is not None:
            self._selector.unregister(old.fd)
        self._workers[index] = worker
        if worker is not None:
            self._selector.register(worker.fd, selectors.EVENT_READ, index)
            self._all_ready.clear()  # until it says it is ready

    def _loop(self) -> None:
        for index in range(self.size):
            self._set_worker(index, self._spawn(index))
        while True:
            with self._lock:
                closing = self._closing
                self._wake_pending = False
            if closing:
                return
            if not any(self._workers):
                self._close("no reward worker process could be started; see the log")
                return
            self._dispatch()
            now = time.monotonic()
            deadlines = [
                w.head_started + w.jobs[0].timeout_s for w in self._workers if w and w.jobs
            ]
            wait = max(0.0, min(deadlines) - now) if deadlines else None
            for key, _ in self._selector.select(wait):
                if key.data is None:  # the wake-up pipe
                    try:
                        while os.read(self._wake_r, 4096):
                            pass
                    except BlockingIOError:
                        pass
                elif self._workers[key.data] is not None:
                    self._collect(key.data)
            self._enforce_deadlines()

    def _dispatch(self) -> None:
        """Give queued jobs to the least loaded workers, up to ``_AHEAD`` each."""
        if not self._queue:  # read without the lock: a job queued meanwhile wakes us again
            return
        live = [w for w in self._workers if w is not None and w.ready]
        load = {id(w): len(w.jobs) for w in live}
        plan: dict[int, tuple[_Worker, list[_Job]]] = {}
        with self._lock:
            while self._queue and live:
                target = min(live, key=lambda w: load[id(w)])
                if load[id(target)] >= _AHEAD:
                    break
                job = self._queue.popleft()
                if job.marked or job.future.set_running_or_notify_cancel():
                    job.marked = True
                    plan.setdefault(id(target), (target, []))[1].append(job)
                    load[id(target)] += 1
        for target, batch in plan.values():
            if not target.jobs:
                target.head_started = time.monotonic()
            target.jobs.extend(batch)
            try:
                target.conn.send([(job.id, job.payload) for job in batch])
            except OSError:
                pass  # the worker died; its EOF is read by the next wait()

    def _collect(self, index: int) -> None:
        worker = self._workers[index]
        assert worker is not None
        try:
            while True:
                job_id, ok, value = worker.conn.recv()
                if job_id == READY and not ok:  # it cannot import the worker: none can
                    self._fail_to_start(index, str(value))
                    return
                if job_id == READY:
                    worker.ready = True
                    if all(w is not None and w.ready for w in self._workers):
                        self._all_ready.set()
                else:
                    job = worker.jobs.popleft()
                    worker.head_started = time.monotonic()
                    if job.id != job_id:  # cannot happen: a worker answers in order
                        raise RuntimeError(
                            f"reward worker answered job {job_id}, expected {job.id}"
                        )
                    if ok:
                        job.future.set_result(value)
                    else:
                        job.future.set_exception(RewardError(str(value)))
                if not select.select([worker.fd], [], [], 0)[0]:
                    return
        except (EOFError, OSError):
            try:
                code = worker.process.wait(1.0)
            except subprocess.TimeoutExpired:  # its socket closed, yet it runs: end it
                worker.process.kill()
                code = worker.process.wait()
            if not worker.ready:
                # dying before its first job is no accident of one call: every worker would
                self._fail_to_start(index, f"exit code {code}; its error, if any, is on stderr")
                return
            self._replace(index, f"its worker process died (exit code {code})")

    def _fail_to_start(self, index: int, why: str) -> None:
        """Close the pool: a worker could not start, so no call would ever run."""
        worker = self._workers[index]
        assert worker is not None
        message = f"reward worker processes cannot start ({why})"
        logger.error("%s", message)
        self._close(message)
        self._set_worker(index, None)
        worker.conn.close()
        if worker.process.poll() is None:
            worker.process.kill()
        worker.process.wait()

    def _enforce_deadlines(self) -> None:
        now = time.monotonic()
        for index, worker in enumerate(self._workers):
            if worker is None or not worker.jobs:
                continue
            job = worker.jobs[0]
            if now - worker.head_started >= job.timeout_s:
                self.kills += 1
                worker.process.kill()
                worker.process.wait()
                self._replace(
                    index,
                    f"it did not finish within {job.timeout_s:g}s (its worker process was killed)",
                )

    def _replace(self, index: int, why: str) -> None:
        """Fail the head job of a dead or killed worker, requeue the rest, start a new one."""
        worker = self._workers[index]
        assert worker is not None
        worker.conn.close()
        if worker.jobs:
            job = worker.jobs.popleft()
            job.future.set_exception(RewardError(f"{job.label}: {why}"))
            logger.warning("%s: %s", job.label, why)
        with self._lock:
            self._queue.extendleft(reversed(worker.jobs))
        self._set_worker(index, self._spawn(index))

    def _fail_all(self, why: str) -> None:
        with self._lock:
            pending = list(self._queue)
            self._queue.clear()
        for worker in self._workers:
            if worker is not None:
                pending.extend(worker.jobs)
                worker.jobs.clear()
        for job in pending:
            if job.marked or job.future.set_running_or_notify_cancel():
                job.marked = True
                if not job.future.done():
                    job.future.set_exception(RewardError(f"{job.label}: {why}"))

    def _stop_workers(self) -> None:
        workers = [w for w in self._workers if w is not None]
        self._workers = [None] * self.size
        self._selector.close()
        for worker in workers:
            try:
                worker.conn.send(None)
            except OSError:
                pass
        deadline = time.monotonic() + _STOP_GRACE_S
        for worker in workers:
            try:
                worker.process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                worker.process.kill()
                worker.process.wait()
            worker.conn.close()


_shared: RewardPool | None = None
_shared_lock = threading.Lock()


def shared_pool() -> RewardPool:
    """Return the process-wide pool that taskhub's heavy rewards share (one worker per CPU)."""
    global _shared
    with _shared_lock:
        if _shared is None or _shared._closing:
            # math-verify (with sympy) is what the pool is for: import it before the first job
            _shared = RewardPool(preload=("math_verify", _PACKAGE + "._math_work"))
        return _shared
