"""Micro-batching: the calls made in one event-loop turn become one batch call.

Used where one call per batch is cheaper than one per episode: TRL-convention functions (their
convention is a batch), and the process pool (one round trip per batch instead of per answer).
When the runner finishes episodes one at a time, batches are of one; when ``taskhub rescore``
scores many at once, they fill up.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

from taskhub import RewardError

from ._pool import RewardPool

#: Batches of a ``PoolCalls`` in the pool per worker, beyond which calls wait to fill a batch.
RUNNING_PER_WORKER = 2

T = TypeVar("T")
R = TypeVar("R")


class MicroBatcher(Generic[T, R]):
    """Gathers items submitted in the same event-loop turn (up to ``max_batch``) into one call.

    ``handler(items)`` returns one result per item, in order; a result that is an exception is
    raised to that item's caller only. If ``handler`` raises, every item of the batch gets the
    error (as a ``RewardError``).
    """

    def __init__(
        self,
        handler: Callable[[list[T]], Awaitable[list[R | BaseException]]],
        max_batch: int,
        *,
        max_running: int | None = None,
    ) -> None:
        """Batch calls to ``handler``.

        ``max_running``: while this many batches run, a batch that is not full waits, for more
        items or for one of them to end (the handler is busy anyway: fuller batches cost it
        fewer calls). None: every turn's items go at the end of the turn.
        """
        self.handler = handler
        self.max_batch = max(1, max_batch)
        self.max_running = None if max_running is None else max(1, max_running)
        self._pending: list[tuple[T, asyncio.Future[R]]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._scheduled = False
        self._running = 0
        self._tasks: set[asyncio.Task[None]] = set()

    async def __call__(self, item: T) -> R:
        """Submit ``item`` with the current batch and wait for its result."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # a new run's loop: what an old one left behind is dead
            self._pending, self._loop, self._scheduled, self._running = [], loop, False, 0
        future: asyncio.Future[R] = loop.create_future()
        self._pending.append((item, future))
        if len(self._pending) >= self.max_batch:
            self._flush()
        else:
            self._schedule()
        return await future

    def _schedule(self) -> None:
        """Flush at the end of this turn, unless the batches running hold it back."""
        if not self._scheduled and self._pending:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._turn_ended)

    def _turn_ended(self) -> None:
        self._scheduled = False
        if self.max_running is None or self._running < self.max_running:
            self._flush()  # else a batch that ends flushes it (``_run``), or it fills up

    def _flush(self) -> None:
        batch, self._pending = self._pending, []
        if batch:
            self._running += 1
            task = asyncio.get_running_loop().create_task(self._run(batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _run(self, batch: list[tuple[T, asyncio.Future[R]]]) -> None:
        try:
            results = await self.handler([item for item, _ in batch])
        except Exception as exc:
            message = str(exc) if isinstance(exc, RewardError) else f"{type(exc).__name__}: {exc}"
            for _, future in batch:
                if not future.done():
                    future.set_exception(RewardError(message))
            return
        finally:
            self._running -= 1
            self._schedule()  # the items held back while it ran
        for (_, future), result in zip(batch, results, strict=True):
            if future.done():  # its caller gave up (cancelled)
                continue
            if isinstance(result, BaseException):
                future.set_exception(result)
            else:
                future.set_result(result)


def run_each(fn: Callable[..., Any], items: list[tuple[Any, ...]]) -> list[tuple[bool, Any]]:
    """Run ``fn(*item)`` for each item, in a worker: ``(True, result)`` or ``(False, error)``."""
    results: list[tuple[bool, Any]] = []
    for item in items:
        try:
            results.append((True, fn(*item)))
        except Exception as exc:  # one item's failure is its own
            results.append((False, f"{type(exc).__name__}: {exc}"))
    return results


class PoolCalls:
    """Calls ``fn(*args)`` in a ``RewardPool``, the calls of one event-loop turn in one job.

    One job per batch saves a round trip through the pool per answer, which is most of the
    pool's cost when an answer takes milliseconds. The deadline applies to the batch as to a
    single call; a batch that misses it (or kills its worker) is run again one call per job, so
    that only the call at fault fails.
    """

    def __init__(
        self,
        pool: RewardPool,
        fn: Callable[..., Any],
        *,
        timeout_s: float,
        label: str,
        max_batch: int = 8,
    ) -> None:
        """Batch calls of the module-level function ``fn``."""
        self.pool = pool
        self.fn = fn
        self.timeout_s = timeout_s
        self.label = label
        # while every worker has a batch running and the next one waiting, calls gather into
        # fuller batches instead of going one by one
        self._batcher: MicroBatcher[tuple[Any, ...], Any] = MicroBatcher(
            self._run, max_batch, max_running=RUNNING_PER_WORKER * pool.size
        )

    async def __call__(self, *args: Any) -> Any:
        """Return ``fn(*args)``, computed in a worker process.

        Raises:
            RewardError: The call raised, missed its deadline or crashed its worker.
        """
        return await self._batcher(args)

    async def _run(self, items: list[tuple[Any, ...]]) -> list[Any]:
        if len(items) == 1:
            return [await self._one(items[0])]
        try:
            results = await self.pool.run(
                run_each, self.fn, items, timeout_s=self.timeout_s, label=self.label
            )
        except RewardError:
            return list(await asyncio.gather(*(self._one(item) for item in items)))
        return [value if ok else RewardError(value) for ok, value in results]

    async def _one(self, item: tuple[Any, ...]) -> Any:
        try:
            return await self.pool.run(self.fn, *item, timeout_s=self.timeout_s, label=self.label)
        except RewardError as exc:
            return exc
