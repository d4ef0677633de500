"""Group commit of a chunk's finished decisions, and the transaction every SQL step runs in.

A busy worker finishes many decisions at once; each one's answers, draws, attempt and status
are written by ``finish_decisions``, and what they spent is added to the run's spend in the
same transaction (``app.runs.budget.finish_and_spend``, which also checks the run's budget).
``GroupCommit`` writes the first at once and those that finish meanwhile together in the next
transaction, so nothing waits longer than one transaction and the busier the worker, the fewer
transactions (and WAL flushes) per decision.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from app.errors import StoreError
from app.runs.budget import ChunkSpend, Committed, finish_and_spend
from app.store.db import session_scope
from app.store.queue import Finished, utcnow
from app.store.types import SessionFactory

__all__ = ["COMMIT_BATCH", "GroupCommit", "in_transaction"]


#: Finished decisions written in one transaction, at most.
COMMIT_BATCH = 64


class GroupCommit:
    """The first finished decision is written at once; those that finish while a transaction
    is being written wait for it and go together in the next one (``finish_decisions``, at
    most ``COMMIT_BATCH``). A group that fails is written again decision by decision, so one
    bad row fails only itself."""

    def __init__(self, factory: SessionFactory, spend: ChunkSpend) -> None:
        self.factory = factory
        self.spend = spend
        self.waiting: list[tuple[Finished, asyncio.Future[bool]]] = []
        self.writing: asyncio.Task[None] | None = None
        #: a commit reached the run's budget and paused it: why
        self.paused: str | None = None

    async def finish(self, item: Finished) -> bool:
        """Whether ``item``'s answers are the ones kept (raises StoreError)."""
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self.waiting.append((item, future))
        if self.writing is None:
            self.writing = asyncio.create_task(self._write())
        return await future

    async def _write(self) -> None:
        try:
            while self.waiting:
                group = self.waiting[:COMMIT_BATCH]
                del self.waiting[:COMMIT_BATCH]
                await self._commit(group)
        finally:
            self.writing = None

    async def _commit(self, group: list[tuple[Finished, asyncio.Future[bool]]]) -> None:
        try:
            committed: Committed = await asyncio.to_thread(
                in_transaction, self.factory, finish_and_spend, [item for item, _ in group],
                self.spend, now=utcnow())
        except StoreError as exc:
            if len(group) == 1:
                _settle(group[0][1], exc=exc)
            else:
                for one in group:
                    await self._commit([one])
            return
        except Exception as exc:  # a bug: each waiting decision records it itself
            for _, future in group:
                _settle(future, exc=exc)
            return
        if committed.paused is not None:
            self.paused = committed.paused
        for (_, future), result in zip(group, committed.won, strict=True):
            _settle(future, result=result)


def _settle(future: asyncio.Future[bool], *, result: bool = False,
            exc: BaseException | None = None) -> None:
    if future.done():  # its decision was cancelled meanwhile
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)


def in_transaction(factory: SessionFactory, fn: Callable[..., Any], *args: Any,
                   **kwargs: Any) -> Any:
    """``fn(session, *args, **kwargs)`` in a transaction of its own, database errors as
    ``StoreError``."""
    with session_scope(factory, what=getattr(fn, "__name__", "store")) as s:
        return fn(s, *args, **kwargs)
