"""The sweeper: SQL says what must run; it (re-)publishes what Redis or a worker lost.

One sweep, in one transaction (PostgreSQL: under an advisory lock, so one sweeper at a time
across all workers; rows ``FOR UPDATE SKIP LOCKED``):

- leased decisions whose lease expired get a ``worker_lost`` attempt and go back to pending
  (or ``failed`` with a ``poison`` attempt at the attempt cap: no redelivery loop);
- pending decisions (never published, publish failed, transient failure) and queued ones whose
  message is older than ``requeue_after_s`` (Redis lost it) are stamped queued;

then, after the commit, their chunk messages are published (a decision lost with a worker goes
alone in its message, so a decision that kills its worker only takes itself down). A failed
publish puts them back to pending for the next sweep. Stale queued decisions are re-published
only while the queue is drained (``max_backlog``): a long backlog is not a loss.

``sweep_once`` is called periodically by ``SweeperThread`` (started in every worker's main
process) and once by ``dreads resume``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select, text
from sqlalchemy.orm import Session, sessionmaker

from app.config import get_settings
from app.errors import DreadsError
from app.publish import PublishError, Sender, publish_chunks, queue_backlog
from app.store.db import session_scope
from app.store.models import Run
from app.store.queue import SweepResult, mark_pending, mark_queued, sweep, translate_db_errors
from workers.constants import SWEEP_LOCK_ID

__all__ = ["SweepReport", "SweeperThread", "sweep_for", "sweep_once"]

log = logging.getLogger("dreads.sweeper")


@dataclass(frozen=True)
class SweepReport:
    lost: int = 0  #: expired leases turned back to pending
    poisoned: int = 0  #: decisions stopped at the attempt cap
    published: int = 0  #: decisions whose message went out
    messages: int = 0
    skipped: bool = False  #: another sweeper held the lock
    backlog: int | None = None  #: queue length seen before sweeping
    error: str | None = None  #: why publishing stopped, if it did

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def sweep_once(session_factory: sessionmaker[Session], publisher: Sender | None, *,
               max_attempts: int = 5, requeue_after_s: float = 600.0, chunk_size: int = 32,
               run_id: int | None = None, max_backlog: int = 0) -> SweepReport:
    """Expire dead leases and publish what has no live message. With ``publisher`` None the
    database is swept and nothing is published (the rows stay pending for the next sweep).

    Raises StoreError when the database is unreachable.
    """
    backlog = queue_backlog(publisher) if hasattr(publisher, "connection_for_read") else None
    republish = publisher is not None and (backlog is None or backlog <= max_backlog)
    with translate_db_errors("sweep"), session_scope(session_factory) as session:
        if not _try_lock(session):
            return SweepReport(skipped=True, backlog=backlog)
        result = sweep(session, max_attempts=max_attempts, requeue_after_s=requeue_after_s,
                       republish_queued=republish, run_id=run_id)
        if publisher is None:
            result.to_publish.clear()
            result.to_isolate.clear()
        mark_queued(session, _all_ids(result))
    published, messages, error = _publish(session_factory, publisher, result, chunk_size)
    report = SweepReport(lost=result.lost, poisoned=result.poisoned, published=published,
                         messages=messages, backlog=backlog, error=error)
    if report.lost or report.poisoned or report.published or error:
        log.info("sweep: %d lease(s) lost, %d poisoned, %d decision(s) in %d message(s)%s",
                 report.lost, report.poisoned, published, messages,
                 f"; publish failed: {error}" if error else "")
    return report


def _try_lock(session: Session) -> bool:
    """One sweeper at a time on PostgreSQL (released at commit); SQLite has a single writer."""
    if session.get_bind().dialect.name != "postgresql":
        return True
    return bool(session.execute(text("SELECT pg_try_advisory_xact_lock(:k)"),
                                {"k": SWEEP_LOCK_ID}).scalar())


def _all_ids(result: SweepResult) -> list[int]:
    return [i for group in (result.to_publish, result.to_isolate)
            for ids in group.values() for i in ids]


def _publish(factory: sessionmaker[Session], publisher: Sender | None, result: SweepResult,
             chunk_size: int) -> tuple[int, int, str | None]:
    if publisher is None:
        return 0, 0, None
    published = messages = 0
    batches = [(rid, ids, chunk_size) for rid, ids in result.to_publish.items()]
    batches += [(rid, ids, 1) for rid, ids in result.to_isolate.items()]
    names = _run_names(factory, {rid for rid, _, _ in batches}) if batches else {}
    for i, (rid, ids, size) in enumerate(batches):
        try:
            messages += publish_chunks(publisher, rid, ids, size, run_name=names.get(rid))
        except PublishError as exc:
            unsent = [d for _, rest, _ in batches[i:] for d in rest]
            _unmark(factory, unsent)
            return published, messages, exc.message
        published += len(ids)
    return published, messages, None


def _run_names(factory: sessionmaker[Session], run_ids: set[int]) -> dict[int, str]:
    """Run names for the messages' ``argsrepr`` (what Flower shows); ids if the lookup fails."""
    try:
        with translate_db_errors("run names"), session_scope(factory) as session:
            rows = session.execute(select(Run.id, Run.name).where(Run.id.in_(run_ids))).all()
    except DreadsError:
        return {}
    return {int(rid): str(name) for rid, name in rows}


def _unmark(factory: sessionmaker[Session], ids: list[int]) -> None:
    try:
        with translate_db_errors("unmark"), session_scope(factory) as session:
            mark_pending(session, ids)
    except DreadsError as exc:  # they are re-published after requeue_after_s anyway
        log.warning("could not put %d unpublished decision(s) back to pending: %s",
                    len(ids), exc.message)


class SweeperThread(threading.Thread):
    """Calls ``sweep`` every ``interval_s`` until ``stop()``; errors are logged, never fatal."""

    def __init__(self, sweep: Callable[[], SweepReport], *, interval_s: float) -> None:
        super().__init__(name="dreads-sweeper", daemon=True)
        self._sweep = sweep
        self._interval_s = interval_s
        self._stopped = threading.Event()

    def run(self) -> None:
        log.info("sweeper running every %.1f s", self._interval_s)
        while not self._stopped.wait(self._interval_s):
            try:
                self._sweep()
            except DreadsError as exc:
                log.warning("sweep failed: %s", exc.message)
            except Exception:  # keep sweeping: one bad sweep must not end recovery
                log.exception("sweep failed")

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stopped.set()
        if self.is_alive():
            self.join(timeout_s)


def sweep_for(factory: sessionmaker[Session], sender: Any, run_id: int,
              chunk_size: int | None) -> Callable[[], Any]:
    """One ``sweep_once`` of run ``run_id`` with the process settings (for ``resume``)."""
    env = get_settings()

    def _sweep() -> Any:
        return sweep_once(factory, sender, max_attempts=env.max_attempts,
                          requeue_after_s=env.requeue_after_s,
                          chunk_size=chunk_size or env.chunk_size, run_id=run_id)

    return _sweep
