"""Batching: small statements that arrive together share one round trip to the database.

Each caller `await`s `submit(item)`. Items submitted while a batch is in flight wait and go together in the
next one (at most `max_batch` at a time). For writes this is group commit: a burst of N check-ins costs a
handful of transactions instead of N, and a process's other writes (lease renewals, a cohort's sums) do not
queue behind N small ones; every caller still waits until its own item is committed and gets its own result,
or the exception of the batch that carried it (nothing is acknowledged that was not written). For reads
(a device's presence at check-in) it is one `IN (…)` query instead of N.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class Batcher(Generic[T, R]):
    def __init__(self, write: Callable[[list[T]], Awaitable[Sequence[R]]], max_batch: int = 500) -> None:
        """`write(items)` runs one batch (commits it, for writes) and returns one result per item, in order."""
        if max_batch < 1:
            raise ValueError("max_batch: must be at least 1")
        self._write = write
        self.max_batch = max_batch
        self._pending: list[tuple[T, asyncio.Future[R]]] = []
        self._writer: asyncio.Task[None] | None = None
        self.batches = 0

    async def submit(self, item: T) -> R:
        fut: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._pending.append((item, fut))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._drain())
        return await fut

    async def _drain(self) -> None:
        while self._pending:
            batch, self._pending = self._pending[:self.max_batch], self._pending[self.max_batch:]
            self.batches += 1
            try:
                results = await self._write([item for item, _ in batch])
                if len(results) != len(batch):
                    raise RuntimeError(f"batch: {len(results)} results for {len(batch)} items")
            except Exception as exc:  # every caller in the batch sees the failure; none was acknowledged
                for _, fut in batch:
                    if not fut.done():
                        fut.set_exception(exc)
                continue
            for (_, fut), result in zip(batch, results, strict=True):
                if not fut.done():
                    fut.set_result(result)

    async def wait_idle(self) -> None:
        """Until every submitted item is done (or failed)."""
        while self._writer is not None and not self._writer.done():
            await asyncio.gather(self._writer, return_exceptions=True)
