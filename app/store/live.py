"""What the live run page adds to ``run_status``: the latest reason of each failure kind and
the rejected decisions with their reasons (read-only, small queries)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.store.models import Attempt, Decision, DecisionStatus, OutcomeKind

__all__ = ["LatestFailure", "Rejected", "latest_failures", "rejected_decisions"]


@dataclass(frozen=True)
class LatestFailure:
    kind: str
    detail: str
    decision: str  #: the decision's key
    at: datetime | None


@dataclass(frozen=True)
class Rejected:
    decision: str
    cell: str | None
    reason: str


def latest_failures(session: Session, run_id: int) -> dict[str, LatestFailure]:
    """The most recent failed attempt of each kind, by kind."""
    latest = (select(func.max(Attempt.id))
              .where(Attempt.run_id == run_id, Attempt.outcome != OutcomeKind.OK)
              .group_by(Attempt.outcome))
    stmt = (select(Attempt.outcome, Attempt.detail, Decision.key, Attempt.ended_at)
            .join(Decision, Decision.id == Attempt.decision_id)
            .where(Attempt.id.in_(latest.scalar_subquery())))
    return {kind: LatestFailure(kind, detail or "", key, at)
            for kind, detail, key, at in session.execute(stmt)}


def rejected_decisions(session: Session, run_id: int, *, limit: int) -> list[Rejected]:
    """Up to ``limit`` rejected decisions (most recent first) with the reason each was
    refused."""
    stmt = (select(Decision.key, Decision.cell, Decision.last_error)
            .where(Decision.run_id == run_id, Decision.status == DecisionStatus.REJECTED)
            .order_by(Decision.id.desc()).limit(limit))
    return [Rejected(key, cell, reason or "") for key, cell, reason in session.execute(stmt)]
