"""The simulator's GPU model: a continuous batch served one step at a time.

Reads wait in a FIFO queue. While work waits, a step of ``step_ms`` runs; at the end of each
step up to ``max_batch`` waiting reads are answered. Throughput is therefore at most
``max_batch / step_ms`` reads per millisecond and queueing grows with load, as on a real GPU.
``step_ms == 0`` answers at once.
"""

from __future__ import annotations

import asyncio
from collections import deque

__all__ = ["BatchModel"]


class BatchModel:
    """A continuous batch. Create and use it inside one event loop."""

    def __init__(self, *, step_ms: float, max_batch: int) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        self.step_ms = step_ms
        self.max_batch = max_batch
        self.steps = 0
        self._waiting: deque[asyncio.Future[None]] = deque()
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def queued(self) -> int:
        """Reads admitted and not answered yet."""
        return sum(1 for f in self._waiting if not f.done())

    async def admit(self) -> None:
        """Return when the read has been computed by a step."""
        if self.step_ms <= 0:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append(future)
        self._ensure_stepper().set()
        await future

    def _ensure_stepper(self) -> asyncio.Event:
        if self._wake is None or self._task is None or self._task.done():
            self._wake = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._run())
        return self._wake

    async def _run(self) -> None:
        assert self._wake is not None
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._waiting:
                await asyncio.sleep(self.step_ms / 1000.0)
                self.steps += 1
                self._serve_batch()

    def _serve_batch(self) -> None:
        served = 0
        while self._waiting and served < self.max_batch:
            future = self._waiting.popleft()
            if not future.done():  # a cancelled read (client gone) takes no batch slot
                future.set_result(None)
                served += 1

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
