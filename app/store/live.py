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
    """A rejected line of the job file (its decision id), once, with the replicates that
    were rejected for one reason."""

    decision: str
    cell: str | None
    reason: str
    replicates: tuple[int, ...] = (0,)


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
    """Up to ``limit`` rejected lines (decision ids, most recent first), each once per reason
    with its rejected replicates."""
    rejected = (Decision.run_id == run_id, Decision.status == DecisionStatus.REJECTED)
    latest = func.max(Decision.id)
    keys = [key for key, _ in session.execute(
        select(Decision.key, latest).where(*rejected).group_by(Decision.key)
        .order_by(latest.desc()).limit(limit))]
    stmt = (select(Decision.key, Decision.cell, Decision.last_error, Decision.replicate)
            .where(*rejected, Decision.key.in_(keys)).order_by(Decision.replicate))
    grouped: dict[tuple[str, str], tuple[str | None, list[int]]] = {}
    for key, cell, reason, replicate in session.execute(stmt):
        grouped.setdefault((key, reason or ""), (cell, []))[1].append(replicate)
    order = {key: i for i, key in enumerate(keys)}
    return [Rejected(key, cell, reason, tuple(replicates))
            for (key, reason), (cell, replicates)
            in sorted(grouped.items(), key=lambda item: order[item[0][0]])]
