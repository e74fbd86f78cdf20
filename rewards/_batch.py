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

T = TypeVar("T")
R = TypeVar("R")


class MicroBatcher(Generic[T, R]):
    """Gathers items submitted in the same event-loop turn (up to ``max_batch``) into one call.

    ``handler(items)`` returns one result per item, in order; a result that is an exception is
    raised to that item's caller only. If ``handler`` raises, every item of the batch gets the
    error (as a ``RewardError``).
    """

    def __init__(
        self, handler: Callable[[list[T]], Awaitable[list[R | BaseException]]], max_batch: int
    ) -> None:
        """Batch calls to ``handler``."""
        self.handler = handler
        self.max_batch = max(1, max_batch)
        self._pending: list[tuple[T, asyncio.Future[R]]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._scheduled = False
        self._tasks: set[asyncio.Task[None]] = set()

    async def __call__(self, item: T) -> R:
        """Submit ``item`` with the current batch and wait for its result."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # a new run's loop: what an old one left behind is dead
            self._pending, self._loop, self._scheduled = [], loop, False
        future: asyncio.Future[R] = loop.create_future()
        self._pending.append((item, future))
        if len(self._pending) >= self.max_batch:
            self._flush()
        elif not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._flush)
        return await future

    def _flush(self) -> None:
        self._scheduled = False
        batch, self._pending = self._pending, []
        if batch:
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
        self._batcher: MicroBatcher[tuple[Any, ...], Any] = MicroBatcher(self._run, max_batch)

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
