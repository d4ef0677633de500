"""The sweeper: SQL says what must run; it (re-)publishes what Redis or a worker lost.

One sweep (PostgreSQL: under a session advisory lock, so one sweeper at a time across all
workers; rows ``FOR UPDATE SKIP LOCKED``):

- leased decisions whose lease expired get a ``worker_lost`` attempt and go back to pending
  (or ``failed`` with a ``poison`` attempt at the attempt cap: no redelivery loop);
- then, run by run, page by page through the whole run (no cap), due rows are published to
  the run's queue (a decision lost with a worker goes alone in its message, so a decision
  that kills its worker only takes itself down). Due:
  - every pending decision (never published, publish failed, transient failure, lost
    lease): stamped queued and committed before its message goes out; a failed publish
    puts the page back to pending for the next sweep;
  - every queued decision stamped before the broker's epoch began (the broker lost its data:
    a FLUSHDB or a Redis restarted without persistence, noticed at the next sweep): read and
    re-sent as it is, the run's progress kept in the broker itself, so a recovery cut short
    goes on where it stopped and a new loss starts it over;
  - once the run's queue is drained, queued decisions older than ``requeue_after_s`` (a
    message lost some other way: a producer that died between its commit and its publish, the
    last second of an AOF), stamped again as they are re-sent.

``sweep_once`` is called periodically by ``SweeperThread`` (started in every worker's main
process) and once by a resume (``app.runs.resume``, for its run, waiting for the lock). The
embedded executor, which has no broker, expires leases with the same ``expire_dead_leases``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from app.broker.epoch import (
    BrokerEpoch,
    broker_epoch,
    mark_recovered,
    record_recovery_progress,
    recovery_progress,
)
from app.broker.names import SWEEP_LOCK_ID, queue_of_run
from app.broker.publish import Sender, publish_chunks, queue_backlog
from app.errors import PublishError
from app.runs.periodic import PeriodicThread
from app.runs.reports import SweepReport
from app.runs.unpublish import unpublish
from app.store.admin import settle_cancelled
from app.store.db import session_scope
from app.store.dialects import advisory_lock
from app.store.models import DecisionStatus, OutcomeKind
from app.store.queue import (
    database_now,
    expire_leases,
    queued_page,
    stamp_page,
    utcnow,
)
from app.store.runs import RunInfo, open_runs
from app.store.types import SessionFactory
from app.telemetry.worker import record_sweep

__all__ = ["ISOLATE_KINDS", "RESUME_LOCK_WAIT_S", "SweepPolicy", "SweepReport", "SweeperThread",
           "expire_dead_leases", "run_queue", "sweep_once"]

log = logging.getLogger("dreads.sweeper")

#: Rows stamped and published per transaction.
PAGE = 10_000
#: How long a resume waits for a worker's sweep in progress before sweeping itself.
RESUME_LOCK_WAIT_S = 120.0
#: The isolation rule: a decision whose last attempt ended this way is re-published alone in
#: its message, so a decision that kills its worker only takes itself down from then on.
ISOLATE_KINDS = frozenset({OutcomeKind.WORKER_LOST})


@dataclass(frozen=True)
class SweepPolicy:
    """How a sweep treats what it finds (``app.runs.settings.sweep_policy`` builds it from
    ``DREADS_*``)."""

    max_attempts: int = 5  #: an expired lease at this many attempts fails (``poison``)
    requeue_after_s: float = 600.0  #: a queued row this old, its queue drained, is re-sent
    chunk_size: int = 32  #: decisions per message
    max_backlog: int = 0  #: a queue "drained": at most this many messages waiting


@dataclass
class _Tally:
    published: int = 0
    messages: int = 0
    backlogs: dict[str, int | None] = field(default_factory=dict)
    #: messages published per run in this sweep (they number the run's chunks: 1, 2, ...)
    chunks: dict[int, int] = field(default_factory=dict)


def run_queue(run: RunInfo) -> str:
    """The queue of ``run``'s chunks: its model and canvas, or the answers queue for a run
    answered by a decision endpoint (``app.broker.names.queue_of_run``)."""
    return queue_of_run(run.settings)


def sweep_once(session_factory: SessionFactory, publisher: Sender | None,
               policy: SweepPolicy, *, run_id: int | None = None,
               wait_lock_s: float = 0.0) -> SweepReport:
    """Expire dead leases and publish what has no live message (of run ``run_id``, or of
    every run). With ``publisher`` None the database is swept and nothing is published (the
    rows stay pending for the next sweep). ``wait_lock_s``: how long to wait for another
    sweeper to finish (0: skip at once).

    Raises StoreError when the database is unreachable.
    """
    with _sweep_lock(session_factory, wait_lock_s) as locked:
        if not locked:
            return SweepReport(skipped=True)
        lost, poisoned = expire_dead_leases(session_factory, policy.max_attempts, run_id)
        _settle_cancelled(session_factory)
        report = SweepReport(lost=lost, poisoned=poisoned)
        if publisher is not None:
            report = _publish_due(session_factory, publisher, report, policy, run_id=run_id)
    record_sweep(lost=report.lost, poisoned=report.poisoned, published=report.published)
    if report.lost or report.poisoned or report.published or report.error:
        log.info("sweep: %d lease(s) lost, %d poisoned, %d decision(s) in %d message(s)%s%s",
                 report.lost, report.poisoned, report.published, report.messages,
                 "; the broker had lost its data" if report.broker_lost else "",
                 f"; publish failed: {report.error}" if report.error else "")
    return report


@contextmanager
def _sweep_lock(factory: SessionFactory, wait_s: float) -> Iterator[bool]:
    """One sweeper at a time on PostgreSQL (a session advisory lock held on a session of its
    own across the sweep's transactions); SQLite has a single writer."""
    with session_scope(factory, what="sweep") as session, \
            advisory_lock(session, SWEEP_LOCK_ID, wait_s) as locked:
        yield locked


def _settle_cancelled(factory: SessionFactory) -> None:
    """One page of what ``cancel`` left: not-started rows of cancelled runs (a million-row
    cancel is settled in the background over a hundred sweeps, never in one long UPDATE)."""
    with session_scope(factory) as session:
        settled = settle_cancelled(session, limit=PAGE)
    if settled:
        log.debug("sweep: %d decision(s) of cancelled runs settled", settled)


def expire_dead_leases(factory: SessionFactory, max_attempts: int,
                       run_id: int | None = None) -> tuple[int, int]:
    """Every expired lease (of run ``run_id``, or of every run) back to pending with a
    ``worker_lost`` attempt, or failed with a ``poison`` one at ``max_attempts``, a page per
    transaction; (lost, poisoned). The sweeper's first step, and the embedded executor's."""
    lost = poisoned = 0
    now = utcnow()
    while True:
        with session_scope(factory) as session:
            result = expire_leases(session, now=now, max_attempts=max_attempts, run_id=run_id,
                                   limit=PAGE)
        lost, poisoned = lost + result.lost, poisoned + result.poisoned
        if result.lost + result.poisoned < PAGE:
            return lost, poisoned


def _publish_due(factory: SessionFactory, publisher: Sender, report: SweepReport,
                 policy: SweepPolicy, *, run_id: int | None) -> SweepReport:
    with session_scope(factory) as session:
        now = database_now(session)
        runs = open_runs(session, run_id)
    try:
        epoch = broker_epoch(publisher, now.timestamp())
    except PublishError as exc:
        return _replace(report, error=exc.message)
    stale = now - timedelta(seconds=policy.requeue_after_s)
    tally = _Tally()
    for run in runs:
        queue = run_queue(run)
        passes = _passes(publisher, queue, epoch, stale, policy.max_backlog, tally)
        error = _publish_run(factory, publisher, run, queue, passes, policy.chunk_size, tally)
        if error:
            return _replace(report, published=tally.published, messages=tally.messages,
                            error=error, broker_lost=epoch.needs_recovery)
    if run_id is None and epoch.needs_recovery:
        mark_recovered(publisher, epoch, now.timestamp())
    backlogs = [b for b in tally.backlogs.values() if b is not None]
    return _replace(report, published=tally.published, messages=tally.messages,
                    backlog=sum(backlogs) if backlogs else None,
                    broker_lost=epoch.needs_recovery)


def _replace(report: SweepReport, **changes: Any) -> SweepReport:
    return SweepReport(**{**report.__dict__, **changes})


@dataclass(frozen=True)
class _Pass:
    """Which rows of a run one pass publishes."""

    status: str
    #: queued rows stamped before this (None: every row in ``status``)
    before: datetime | None = None
    #: queued rows stamped at or after this (None: no lower bound)
    since: datetime | None = None
    #: the broker-loss recovery: rows re-published as they are, progress kept in the broker
    recovery: BrokerEpoch | None = None


def _passes(publisher: Sender, queue: str, epoch: BrokerEpoch, stale: datetime,
            max_backlog: int, tally: _Tally) -> list[_Pass]:
    """Pending rows; queued rows stamped before the broker's epoch began, when it lost its
    data; and, once the queue is drained, queued rows older than the requeue window (a
    message lost some other way). Rows the recovery re-published within the window are not
    stale: it re-sends them without stamping them again."""
    passes = [_Pass(DecisionStatus.PENDING)]
    since = datetime.fromtimestamp(epoch.since, UTC)
    if epoch.needs_recovery:
        passes.append(_Pass(DecisionStatus.QUEUED, before=since, recovery=epoch))
    if queue not in tally.backlogs:
        tally.backlogs[queue] = queue_backlog(publisher, queue)
    backlog = tally.backlogs[queue]
    if backlog is not None and backlog <= max_backlog:
        recent = epoch.recovered_after(stale.timestamp())
        passes.append(_Pass(DecisionStatus.QUEUED, before=stale,
                            since=since if recent else None))
    return passes


def _publish_run(factory: SessionFactory, publisher: Sender, run: RunInfo, queue: str,
                 passes: list[_Pass], chunk_size: int, tally: _Tally) -> str | None:
    """Page through the run's due rows, pass by pass. The error that stopped it."""
    for due in passes:
        try:
            if due.recovery is not None:
                _recover(factory, publisher, run, queue, due.recovery, chunk_size, tally)
            else:
                _stamp_and_publish(factory, publisher, run, queue, due, chunk_size, tally)
        except PublishError as exc:
            return exc.message
    return None


def _stamp_and_publish(factory: SessionFactory, publisher: Sender, run: RunInfo, queue: str,
                       due: _Pass, chunk_size: int, tally: _Tally) -> None:
    """Stamp a page queued, commit, publish; a failed publish puts the page back to pending."""
    after = 0
    while True:
        with session_scope(factory) as session:
            rows = stamp_page(session, run_id=run.id, status=due.status, after_id=after,
                              limit=PAGE, queued_before=due.before, queued_since=due.since)
        if not rows:
            return
        after = rows[-1][0]
        try:
            _send_page(publisher, run, queue, rows, chunk_size, tally)
        except PublishError:
            unpublish(factory, [did for did, _ in rows])
            raise


def _recover(factory: SessionFactory, publisher: Sender, run: RunInfo, queue: str,
             epoch: BrokerEpoch, chunk_size: int, tally: _Tally) -> None:
    """Re-publish the run's queued rows the broker lost, a page at a time from where the last
    recovery of this epoch stopped. Their rows are read, not rewritten: a million-row run is
    re-sent at the broker's speed."""
    before = datetime.fromtimestamp(epoch.since, UTC)
    after = recovery_progress(publisher, epoch, run.id)
    while True:
        with session_scope(factory) as session:
            rows = queued_page(session, run_id=run.id, after_id=after, limit=PAGE,
                               queued_before=before)
        if not rows:
            return
        _send_page(publisher, run, queue, rows, chunk_size, tally)
        after = rows[-1][0]
        record_recovery_progress(publisher, epoch, run.id, after)


def _send_page(publisher: Sender, run: RunInfo, queue: str, rows: list[tuple[int, str | None]],
               chunk_size: int, tally: _Tally) -> None:
    alone = [did for did, kind in rows if kind in ISOLATE_KINDS]
    together = [did for did, kind in rows if kind not in ISOLATE_KINDS]
    for ids, size in ((together, chunk_size), (alone, 1)):
        if ids:
            before = tally.chunks.get(run.id, 0)
            sent = publish_chunks(publisher, run.id, ids, size, run_name=run.name,
                                  queue=queue, first_chunk=before + 1, by="sweeper")
            tally.chunks[run.id] = before + sent
            tally.messages += sent
            tally.published += len(ids)


class SweeperThread(PeriodicThread):
    """Calls ``sweep`` every ``interval_s`` until ``stop()``; errors are logged, never fatal."""

    def __init__(self, sweep: Callable[[], SweepReport], *, interval_s: float) -> None:
        super().__init__(sweep, interval_s=interval_s, name="dreads-sweeper", what="sweep",
                         log=log)

    def started(self) -> None:
        log.info("sweeper running every %.1f s", self._interval_s)
