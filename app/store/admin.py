"""Run administration: cancel what has not started (saying what is still in flight; a run
finished or cancelled already is left as it is), delete a run with everything it recorded,
and drop the run a file of only bad lines created.

Repositories flush, never commit: the caller's ``session_scope`` owns the transaction.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Protocol, cast

from sqlalchemy import Table, and_, delete, func, select, update
from sqlalchemy.orm import Session

from app.store import dialects
from app.store.models import (
    Answer,
    Attempt,
    Decision,
    DecisionPayload,
    DecisionStatus,
    Draw,
    Run,
    RunSource,
    RunSpend,
    RunStatus,
)
from app.store.states import NOT_STARTED, RunState, run_state
from app.store.views import status_counts

__all__ = ["CancelOutcome", "RunContents", "cancel_not_started", "cancel_run", "delete_run",
           "discard_empty_run", "may_be_empty", "run_contents", "settle_cancelled"]


@dataclass(frozen=True)
class CancelOutcome:
    """What ``cancel`` did: decisions cancelled, and those a worker holds now (they finish
    and keep their answers, or are left pending if their worker fails)."""

    cancelled: int
    in_flight: int
    state: RunState = RunState.CANCELLED  #: the run's state after the call
    #: False: the run was finished or cancelled already, and nothing was changed
    changed: bool = True
    counts: dict[str, int] = field(default_factory=dict)  #: decisions by status, after

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "state": self.state.value}


def _live_lease(now: datetime) -> Any:
    return and_(Decision.status == DecisionStatus.LEASED, Decision.lease_expires_at >= now)


def cancel_run(session: Session, run_id: int, *, now: datetime | None = None
               ) -> CancelOutcome:
    """Cancel an active or paused run (``cancel_not_started``); a run that is finished or
    cancelled already is left as it is (``changed`` False), and the outcome says which."""
    now = now or datetime.now(UTC)
    stored = str(session.scalar(select(Run.status).where(Run.id == run_id)))
    state = run_state(stored, status_counts(session, run_id))
    if state in (RunState.ACTIVE, RunState.PAUSED):
        outcome = cancel_not_started(session, run_id, now=now)
    else:
        outcome = CancelOutcome(cancelled=0, in_flight=_in_flight(session, run_id, now),
                                state=state, changed=False)
    return replace(outcome, counts=status_counts(session, run_id))


def _in_flight(session: Session, run_id: int, now: datetime) -> int:
    return int(session.scalar(select(func.count()).where(Decision.run_id == run_id,
                                                         _live_lease(now))) or 0)


def cancel_not_started(session: Session, run_id: int, *, now: datetime | None = None
                       ) -> CancelOutcome:
    """Mark the run cancelled and cancel its decisions no worker holds: pending, queued, and
    leased with an expired lease.

    Marking the run is what stops the work: no worker claims a decision of a cancelled run,
    and its rows not started are cancelled as far as every view is concerned
    (``shown_status``). Rewriting them is left to the sweeper (``settle_cancelled``, a page
    per sweep): a single UPDATE of a million rows took 12 s, the count over the open-rows
    index takes a fraction of one. Expired leases (few) are settled here.
    """
    now = now or datetime.now(UTC)
    session.execute(update(Run).where(Run.id == run_id).values(status=RunStatus.CANCELLED))
    dead_lease = and_(Decision.status == DecisionStatus.LEASED,
                      Decision.lease_expires_at < now)
    result = session.execute(
        update(Decision).where(Decision.run_id == run_id, dead_lease)
        .values(status=DecisionStatus.CANCELLED, lease_owner=None, lease_token=None,
                lease_expires_at=None, finished_at=now)
        .execution_options(synchronize_session=False))
    not_started = session.scalar(
        select(func.count()).select_from(_not_started(run_id).subquery()))
    cancelled = int(getattr(result, "rowcount", 0) or 0) + int(not_started or 0)
    return CancelOutcome(cancelled=cancelled, in_flight=_in_flight(session, run_id, now))


def _not_started(run_id: Any) -> Any:
    """The ids of the run's decisions no worker started (over the open-rows index)."""
    return select(Decision.id).where(Decision.run_id == run_id,
                                     Decision.status.in_(NOT_STARTED))


def settle_cancelled(session: Session, *, limit: int, now: datetime | None = None) -> int:
    """Rewrite up to ``limit`` not-started rows of cancelled runs as ``cancelled`` (what
    ``cancel`` left for later); the number rewritten. Rows another transaction holds are
    skipped, for the next call. Only cancelled runs with rows left are visited (a probe of
    the open-rows index each): a sweep after everything is settled writes nothing."""
    now = now or datetime.now(UTC)
    settled = 0
    for run_id in session.scalars(select(Run.id).where(Run.status == RunStatus.CANCELLED,
                                                       _not_started(Run.id).exists())):
        page = (_not_started(run_id)
                .limit(limit - settled).with_for_update(skip_locked=True, of=Decision))
        result = session.execute(
            update(Decision).where(Decision.id.in_(page.scalar_subquery()))
            .values(status=DecisionStatus.CANCELLED, finished_at=now)
            .execution_options(synchronize_session=False))
        settled += int(getattr(result, "rowcount", 0) or 0)
        if settled >= limit:
            break
    return settled


@dataclass(frozen=True)
class RunContents:
    """What deleting a run removes, and what is still running."""

    decisions: int
    answers: int
    attempts: int
    draws: int
    in_flight: int  #: decisions a worker holds now (a live lease)

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def _count(session: Session, model: Any, run_id: int) -> int:
    if model is Draw:
        stmt = select(func.count(Draw.id)).join(Decision, Decision.id == Draw.decision_id)
        return int(session.scalar(stmt.where(Decision.run_id == run_id)) or 0)
    return int(session.scalar(select(func.count()).where(model.run_id == run_id)) or 0)


def run_contents(session: Session, run_id: int, *, now: datetime | None = None) -> RunContents:
    """Counts of what the run holds (for the confirmation before ``delete_run``)."""
    now = now or datetime.now(UTC)
    return RunContents(decisions=_count(session, Decision, run_id),
                       answers=_count(session, Answer, run_id),
                       attempts=_count(session, Attempt, run_id),
                       draws=_count(session, Draw, run_id),
                       in_flight=_in_flight(session, run_id, now))


def delete_run(session: Session, run_id: int) -> None:
    """Delete the run and everything it recorded (answers, draws, attempts, payloads,
    decisions, spend, the files it was submitted from).

    Workers committing answers of the run are fenced: the run's row is locked first
    (PostgreSQL ``FOR UPDATE``), which waits for the commits in flight (each holds a share of
    it from its first row that references the run) and holds back new ones until this
    transaction ends; SQLite's one writer takes turns the same way."""
    dialects.fence_row(session, cast(Table, Run.__table__), run_id)
    decisions = select(Decision.id).where(Decision.run_id == run_id).scalar_subquery()
    session.execute(delete(Answer).where(Answer.run_id == run_id))
    session.execute(delete(Draw).where(Draw.decision_id.in_(decisions)))
    session.execute(delete(DecisionPayload).where(DecisionPayload.decision_id.in_(decisions)))
    session.execute(delete(Attempt).where(Attempt.run_id == run_id))
    session.execute(delete(Decision).where(Decision.run_id == run_id))
    session.execute(delete(RunSpend).where(RunSpend.run_id == run_id))
    session.execute(delete(RunSource).where(RunSource.run_id == run_id))
    session.execute(delete(Run).where(Run.id == run_id))


class _Submitted(Protocol):
    """What ``discard_empty_run`` reads of a submit report (``app.runs.submit.SubmitReport``)."""

    run: Any
    created: bool
    inserted: int


def may_be_empty(report: _Submitted) -> bool:
    """Whether the submission created its run and inserted nothing: only then may the run be
    empty (``discard_empty_run``), so only then need the caller open a transaction."""
    return report.created and report.run is not None and not report.inserted


def discard_empty_run(session: Session, report: _Submitted) -> bool:
    """A file of only bad lines creates no run: delete the run this submission created if it
    holds no decision (submit streams, so the run exists before the first line is read), and
    say so in ``report`` (its run None). True when it was discarded."""
    if not may_be_empty(report):
        return False
    left = session.scalar(select(func.count()).where(Decision.run_id == report.run.id))
    if left:
        return False
    delete_run(session, report.run.id)
    report.run, report.created = None, False
    return True
