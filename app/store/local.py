"""The queries of the embedded executor (``dreads run``, the API's local executor): leases of
a dead or interrupted local process, what a claim could win now, progress and draws made."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import case, func, insert, select, update
from sqlalchemy.orm import Session

from app.errors import OutcomeKind
from app.store import dialects
from app.store.models import (
    Answer,
    Attempt,
    Decision,
    DecisionStatus,
    Draw,
    Run,
    RunStatus,
)
from app.store.queue import claimable, run_active
from app.store.states import settled_statuses

__all__ = ["claimable_ids", "draws_used", "expire_leases_of", "release_leases_of",
           "settled_count"]


def expire_leases_of(session: Session, run_id: int, *, owner_prefix: str,
                     now: datetime) -> None:
    """Mark every lease of run ``run_id`` held by an owner starting with ``owner_prefix``
    expired at ``now`` (the next sweep takes them over)."""
    session.execute(
        update(Decision)
        .where(Decision.run_id == run_id, Decision.status == DecisionStatus.LEASED,
               Decision.lease_owner.startswith(owner_prefix))
        .values(lease_expires_at=now - timedelta(seconds=1))
        .execution_options(synchronize_session=False))


def release_leases_of(session: Session, run_id: int, *, owner: str, detail: str) -> int:
    """``owner``'s leases of run ``run_id`` back to pending, each with a ``cancelled`` attempt
    (``detail``) and its claim not counted against the attempt cap; how many."""
    rows = session.execute(
        update(Decision)
        .where(Decision.run_id == run_id, Decision.status == DecisionStatus.LEASED,
               Decision.lease_owner == owner)
        .values(status=DecisionStatus.PENDING, lease_token=None, lease_expires_at=None,
                attempts=dialects.greatest(session, Decision.attempts - 1, 0))
        .returning(Decision.id, Decision.lease_token)
        .execution_options(synchronize_session=False)).all()
    if rows:
        session.execute(insert(Attempt), [
            {"run_id": run_id, "decision_id": did, "outcome": OutcomeKind.CANCELLED,
             "detail": detail, "worker": owner, "lease_token": token, "n_reads": 0}
            for did, token in rows])
    return len(rows)


def _run_status(session: Session, run_id: int) -> str:
    return str(session.scalar(select(Run.status).where(Run.id == run_id)) or RunStatus.ACTIVE)


def claimable_ids(session: Session, run_id: int, *, max_attempts: int,
                  now: datetime) -> list[int]:
    """Decisions a claim could win at ``now`` (pending, queued, expired lease, under the cap);
    none once the run is cancelled."""
    stmt = (select(Decision.id).where(Decision.run_id == run_id, claimable(now),
                                      Decision.attempts < max_attempts, run_active())
            .order_by(Decision.id))
    return list(session.scalars(stmt))


def settled_count(session: Session, run_id: int) -> tuple[int, int]:
    """(settled, total) decisions of the run (a cancelled run's not started ones are)."""
    statuses = settled_statuses(_run_status(session, run_id))
    settled = func.sum(case((Decision.status.in_(statuses), 1), else_=0))
    row = session.execute(select(settled, func.count()).where(Decision.run_id == run_id)).one()
    return int(row[0] or 0), int(row[1])


def draws_used(session: Session, run_id: int) -> dict[str, Any]:
    """Draws (one question read once: a row of ``draws``), and the mean draws per answered
    question. Reads, the requests sent to the model server, are the run's spend."""
    draws = session.scalar(select(func.count(Draw.id)).join(
        Decision, Decision.id == Draw.decision_id).where(Decision.run_id == run_id)) or 0
    mean = session.scalar(select(func.avg(Answer.draws)).where(Answer.run_id == run_id))
    return {"draw_rows": int(draws), "mean_draws_per_answer": float(mean or 0.0)}
