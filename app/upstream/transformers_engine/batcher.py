"""An asyncio micro-batcher in front of one worker thread.

Every ``submit`` from any coroutine of the process joins the pending list; the consumer takes up
to ``max_batch`` of them once that many wait or ``flush_ms`` after the first arrived, and runs
the batch function on the single worker thread, so the event loop stays free. While a batch
runs, new reads gather for the next one.

With ``first``, the jobs it holds true for are taken before the others (in arrival order within
each kind). The engine uses it for reads whose prompt is already encoded: a decision's later
draws go before new decisions' first ones, as a serving scheduler runs its running requests
before admitting waiting ones, so the prompts being read stay few enough for the prompt cache.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Generic, TypeVar

__all__ = ["MicroBatcher"]

J = TypeVar("J")
R = TypeVar("R")


class MicroBatcher(Generic[J, R]):
    """Gathers jobs into batches for ``run_batch`` (which returns one result per job)."""

    def __init__(self, run_batch: Callable[[Sequence[J]], Sequence[R]], *, max_batch: int,
                 flush_ms: float, thread_name: str = "dreads-engine",
                 first: Callable[[J], bool] | None = None) -> None:
        self._run_batch = run_batch
        self._first = first
        self.max_batch = max_batch
        self.flush_s = flush_ms / 1000.0
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=thread_name)
        self._pending: list[tuple[J, asyncio.Future[R]]] = []
        self._submitted = 0  #: jobs submitted so far
        self._wakeup: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.batch_sizes: list[int] = []  #: size of every batch run (for benchmarks)

    async def submit(self, job: J) -> R:
        """Queue one job and wait for its result (its exception is raised here)."""
        loop = self._ensure_consumer()
        future: asyncio.Future[R] = loop.create_future()
        self._pending.append((job, future))
        self._submitted += 1
        assert self._wakeup is not None
        self._wakeup.set()
        return await future

    async def run_in_thread(self, fn: Callable[[], R]) -> R:
        """Run ``fn`` on the worker thread (between batches)."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn)

    async def aclose(self) -> None:
        """Stop the consumer and the worker thread; pending jobs are cancelled."""
        if self._task is not None and self._loop is asyncio.get_running_loop():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for _, future in self._pending:
            future.cancel()
        self._pending.clear()
        self._task = None
        self.executor.shutdown(wait=True)

    def _ensure_consumer(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.get_running_loop()
        if self._loop is not loop or self._task is None or self._task.done():
            self._loop = loop  # a new event loop (asyncio.run per chunk): start over on it
            self._pending = [(j, f) for j, f in self._pending if f.get_loop() is loop]
            self._wakeup = asyncio.Event()
            self._task = loop.create_task(self._consume(), name="dreads-engine-batcher")
        return loop

    async def _consume(self) -> None:
        assert self._wakeup is not None
        loop = asyncio.get_running_loop()
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            if not self._pending:
                continue
            await self._gather(loop)
            batch = self._take()
            await self._run(loop, [(j, f) for j, f in batch if not f.done()])
            if self._first is not None:
                await self._settle(loop, len(batch))
            if self._pending:
                self._wakeup.set()

    async def _settle(self, loop: asyncio.AbstractEventLoop, answered: int) -> None:
        """Give the ``answered`` readers of the batch just run the time to queue their next
        jobs (each passes a few awaits first), so ``first`` sees them: until that many jobs
        came, or ``flush_ms`` passed (a reader that is done submits nothing)."""
        assert self._wakeup is not None
        target = self._submitted + answered
        deadline = loop.time() + self.flush_s
        while self._submitted < target:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            self._wakeup.clear()
            try:
                await asyncio.wait_for(self._wakeup.wait(), remaining)
            except TimeoutError:
                return

    def _take(self) -> list[tuple[J, asyncio.Future[R]]]:
        """The next batch off the pending list: ``first``'s jobs, then the rest, each kind in
        arrival order."""
        if self._first is not None and len(self._pending) > self.max_batch:
            first = self._first
            marked = [(not first(job), i) for i, (job, _) in enumerate(self._pending)]
            self._pending = [self._pending[i] for _, i in sorted(marked)]
        batch = self._pending[: self.max_batch]
        del self._pending[: self.max_batch]
        return batch

    async def _gather(self, loop: asyncio.AbstractEventLoop) -> None:
        """Wait until ``max_batch`` jobs wait or ``flush_ms`` has passed."""
        assert self._wakeup is not None
        deadline = loop.time() + self.flush_s
        while len(self._pending) < self.max_batch:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            try:
                await asyncio.wait_for(self._wakeup.wait(), remaining)
            except TimeoutError:
                return
            self._wakeup.clear()

    async def _run(self, loop: asyncio.AbstractEventLoop, batch: list[tuple[J, asyncio.Future[R]]]
                   ) -> None:
        if not batch:
            return
        self.batch_sizes.append(len(batch))
        jobs = [j for j, _ in batch]
        try:
            results = await loop.run_in_executor(self.executor, self._run_batch, jobs)
        except Exception as exc:  # the whole batch failed: every read gets the error
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        for (_, future), result in zip(batch, results, strict=True):
            if not future.done():
                future.set_result(result)
