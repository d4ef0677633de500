"""A micro-batcher whose own thread runs the batches.

Every ``submit`` from any coroutine of the process (of any event loop) joins the pending list
together with the other jobs its event loop submits in the same turn (the reads of one
decision's questions, say), so those are batched together. The engine's thread takes up to
``max_batch`` pending jobs once that many wait or ``flush_ms`` after it started waiting, runs
the batch function, hands each result to its reader's event loop, and takes the next batch
straight away. It never waits for an event loop: while the loop plans decisions, tokenizes
prompts and reads results (the CPU's part of a read), the reads already waiting go to the
GPU, so the two overlap whenever more reads are in flight than one batch.

With ``first``, the jobs it holds true for are taken before the others (in arrival order within
each kind). The engine uses it for reads whose prompt is already encoded: a decision's later
draws go before new decisions' first ones, as a serving scheduler runs its running requests
before admitting waiting ones, so the prompts being read stay few enough for the prompt cache.
After a batch the thread gives the readers it answered up to ``flush_ms`` to queue their next
reads (each passes a few awaits first), so ``first`` sees them.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

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
        self._thread_name = thread_name
        self._ready = threading.Condition()  #: guards the fields below
        self._pending: list[tuple[J, asyncio.Future[R]]] = []
        self._submitted = 0  #: jobs submitted so far
        #: per event loop, the jobs submitted in its current turn (touched by that loop only)
        self._staged: dict[asyncio.AbstractEventLoop, list[tuple[J, asyncio.Future[R]]]] = {}
        self._closed = False
        self._thread: threading.Thread | None = None
        self.batch_sizes: list[int] = []  #: size of every batch run (for benchmarks)

    async def submit(self, job: J) -> R:
        """Queue one job and wait for its result (its exception is raised here)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[R] = loop.create_future()
        if self._closed:
            raise RuntimeError("the engine's batcher is closed")
        staged = self._staged.setdefault(loop, [])
        if not staged:  # the loop's turn ends: the jobs of the turn go to the thread at once
            loop.call_soon(self._publish, loop)
        staged.append((job, future))
        try:
            return await future
        except asyncio.CancelledError:
            with self._ready:  # not read yet: leave the batch it would have joined
                self._pending = [(j, f) for j, f in self._pending if f is not future]
            raise

    def _publish(self, loop: asyncio.AbstractEventLoop) -> None:
        jobs = self._staged.pop(loop, [])
        with self._ready:
            closed = self._closed
            if not closed:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._serve, daemon=True,
                                                    name=self._thread_name)
                    self._thread.start()
                self._pending.extend(jobs)
                self._submitted += len(jobs)
                self._ready.notify()
        if closed:  # closed during the turn: nothing will read them
            for _, future in jobs:
                future.cancel()

    def close(self) -> None:
        """Stop the thread once its batch is done; jobs still waiting are cancelled."""
        with self._ready:
            self._closed = True
            waiting, self._pending = self._pending, []
            self._ready.notify_all()
        _settle([future for _, future in waiting], [_Cancelled()] * len(waiting))
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    async def aclose(self) -> None:
        """``close`` without blocking the event loop while a batch finishes."""
        await asyncio.to_thread(self.close)

    # -- the engine's thread ---------------------------------------------------------------------

    def _serve(self) -> None:
        while (batch := self._next_batch()) is not None:
            self._run(batch)
            if self._first is not None:
                self._await_next_reads(len(batch))

    def _next_batch(self) -> list[tuple[J, asyncio.Future[R]]] | None:
        """Wait for a job, then until ``max_batch`` wait or ``flush_ms`` passed; None once
        closed."""
        with self._ready:
            self._ready.wait_for(lambda: self._pending or self._closed)
            self._ready.wait_for(lambda: len(self._pending) >= self.max_batch or self._closed,
                                 timeout=self.flush_s)
            return None if self._closed else self._take()

    def _take(self) -> list[tuple[J, asyncio.Future[R]]]:
        """The next batch off the pending list: ``first``'s jobs, then the rest, each kind in
        arrival order."""
        if self._first is not None and len(self._pending) > self.max_batch:
            first = self._first
            self._pending.sort(key=lambda pending: not first(pending[0]))  # stable
        batch = self._pending[: self.max_batch]
        del self._pending[: self.max_batch]
        return batch

    def _run(self, batch: list[tuple[J, asyncio.Future[R]]]) -> None:
        live = [(job, future) for job, future in batch if not future.done()]
        if not live:
            return
        self.batch_sizes.append(len(live))
        futures = [future for _, future in live]
        try:
            results = self._run_batch([job for job, _ in live])
        except Exception as exc:  # the whole batch failed: every read gets the error
            _settle(futures, [_Failed(exc)] * len(futures))
            return
        _settle(futures, results)

    def _await_next_reads(self, answered: int) -> None:
        """Wait until the ``answered`` readers queued that many jobs, or ``flush_ms`` passed
        (a reader that is done queues nothing)."""
        with self._ready:
            target = self._submitted + answered
            self._ready.wait_for(lambda: self._submitted >= target or self._closed,
                                 timeout=self.flush_s)


def _settle(futures: Sequence[asyncio.Future[Any]], outcomes: Sequence[Any]) -> None:
    """Give each future its outcome (a result, ``_Failed`` or ``_Cancelled``) on its own event
    loop, from any thread. One call a future, so the loop resumes each reader as its result
    comes rather than all of a batch in one turn (their next reads then reach the thread over
    several turns, while it is free). A future already done, or whose loop has closed, is left
    as it is."""
    for future, outcome in zip(futures, outcomes, strict=True):
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits for it
            future.get_loop().call_soon_threadsafe(_set_outcome, future, outcome)


class _Failed:
    """A job's outcome that is an error."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


class _Cancelled:
    """A job's outcome that is its cancellation (the batcher closed)."""


def _set_outcome(future: asyncio.Future[Any], outcome: Any) -> None:
    if future.done():
        return
    if isinstance(outcome, _Cancelled):
        future.cancel()
    elif isinstance(outcome, _Failed):
        future.set_exception(outcome.error)
    else:
        future.set_result(outcome)
