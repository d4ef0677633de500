"""The lease protocol: claim / renew / finish / fail / sweep, on PostgreSQL and SQLite alike.

A decision moves ``pending -> queued -> leased -> done`` (or ``failed`` / ``rejected``)::

    claim_decisions   one guarded UPDATE ... RETURNING: only the rows won are processed, so a
                      redelivered or duplicated chunk message whose decisions are done or held
                      elsewhere is a cheap no-op.
    renew_leases      the holder extends its leases (guarded by the lease token).
    finish_decision   attempt + draws + answers (INSERT ... ON CONFLICT DO NOTHING) + status done,
                      in the caller's transaction: the first finished attempt wins.
    fail_decision     an attempt row with the outcome kind; permanent -> rejected, transient ->
                      pending (re-published by the sweeper) or failed at the attempt cap.
    sweep             expired leases -> a ``worker_lost`` attempt and pending (``poison`` and
                      failed at the cap); pending and stale queued rows -> returned to publish.

Times come from the caller's clock (UTC); the caller's ``session_scope`` owns the transaction.
Foreign SQL errors are translated into ``StoreError`` by ``translate_db_errors``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import and_, exists, insert, or_, select, update
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.orm import Session

from app.engine.types import Answer as EngineAnswer
from app.engine.types import DrawRecord
from app.errors import StoreError
from app.store.models import (
    Answer,
    Attempt,
    Decision,
    DecisionStatus,
    Draw,
    OutcomeKind,
    Run,
    RunStatus,
)

__all__ = [
    "AttemptInfo",
    "Claimed",
    "SweepResult",
    "claim_decisions",
    "fail_decision",
    "finish_decision",
    "mark_pending",
    "mark_queued",
    "renew_leases",
    "sweep",
    "translate_db_errors",
    "utcnow",
]

_CLAIMABLE = (DecisionStatus.PENDING, DecisionStatus.QUEUED)
#: Decisions re-published one per message after a worker loss, so a poison decision only takes
#: itself down from then on.
_ISOLATE_KINDS = (OutcomeKind.WORKER_LOST,)


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Claimed:
    """A decision this holder won, with its lease token."""

    id: int
    run_id: int
    key: str
    replicate: int
    cell: str | None
    payload: Mapping[str, Any]
    lease_token: str
    attempts: int  #: claims so far, this one included


@dataclass(frozen=True)
class AttemptInfo:
    """Who ran an attempt and what it cost (the non-outcome columns of ``attempts``)."""

    worker: str | None = None
    task_id: str | None = None
    redelivered: bool = False
    n_reads: int = 0
    latency_ms: float | None = None
    started_at: datetime | None = None


@dataclass
class SweepResult:
    """What one sweep did and what its caller must publish (run id -> decision ids)."""

    lost: int = 0  #: expired leases turned back to pending (``worker_lost`` attempts)
    poisoned: int = 0  #: expired leases at the attempt cap (``poison`` attempts, failed)
    to_publish: dict[int, list[int]] = field(default_factory=dict)
    to_isolate: dict[int, list[int]] = field(default_factory=dict)  #: one per message

    @property
    def n_publish(self) -> int:
        return sum(map(len, self.to_publish.values())) + sum(map(len, self.to_isolate.values()))


@contextmanager
def translate_db_errors(what: str) -> Iterator[None]:
    """Turn SQLAlchemy connection/operational errors into ``StoreError`` (kind ``db_error``)."""
    try:
        yield
    except (OperationalError, DBAPIError) as exc:
        raise StoreError(f"{what}: the database failed ({type(exc.orig).__name__}: "
                         f"{str(exc.orig).strip()[:300]}); it is retried when it is back") from exc


def _run_active() -> Any:
    return ~exists().where(Run.id == Decision.run_id, Run.status == RunStatus.CANCELLED)


def claim_decisions(session: Session, *, decision_ids: Sequence[int], owner: str, lease_s: float,
                    max_attempts: int = 5, now: datetime | None = None) -> list[Claimed]:
    """Lease the claimable decisions among ``decision_ids``; return only the rows won."""
    if not decision_ids:
        return []
    now = now or utcnow()
    token = uuid.uuid4().hex
    claimable = or_(
        Decision.status.in_(_CLAIMABLE),
        and_(Decision.status == DecisionStatus.LEASED, Decision.lease_expires_at < now),
    )
    stmt = (
        update(Decision)
        .where(Decision.id.in_(list(decision_ids)), claimable,
               Decision.attempts < max_attempts, _run_active())
        .values(status=DecisionStatus.LEASED, lease_owner=owner[:200], lease_token=token,
                lease_expires_at=now + timedelta(seconds=lease_s),
                attempts=Decision.attempts + 1, updated_at=now)
        .returning(Decision.id, Decision.run_id, Decision.key, Decision.replicate,
                   Decision.cell, Decision.payload, Decision.lease_token, Decision.attempts)
        .execution_options(synchronize_session=False)
    )
    rows = session.execute(stmt).all()
    return sorted((Claimed(*row) for row in rows), key=lambda c: decision_ids.index(c.id))


def renew_leases(session: Session, *, claims: Sequence[Claimed], lease_s: float,
                 now: datetime | None = None) -> set[int]:
    """Extend the leases still held by these claims; return the ids actually renewed."""
    now = now or utcnow()
    renewed: set[int] = set()
    for token, ids in _by_token(claims).items():
        stmt = (
            update(Decision)
            .where(Decision.id.in_(ids), Decision.lease_token == token,
                   Decision.status == DecisionStatus.LEASED)
            .values(lease_expires_at=now + timedelta(seconds=lease_s), updated_at=now)
            .returning(Decision.id)
            .execution_options(synchronize_session=False)
        )
        renewed.update(session.execute(stmt).scalars())
    return renewed


def _by_token(claims: Sequence[Claimed]) -> dict[str, list[int]]:
    groups: dict[str, list[int]] = {}
    for claim in claims:
        groups.setdefault(claim.lease_token, []).append(claim.id)
    return groups


def _insert_attempt(session: Session, *, claim: Claimed, outcome: str, info: AttemptInfo,
                    detail: str | None = None, now: datetime) -> int:
    stmt = insert(Attempt).values(
        run_id=claim.run_id, decision_id=claim.id, outcome=outcome, detail=detail,
        worker=info.worker, task_id=info.task_id, redelivered=info.redelivered,
        lease_token=claim.lease_token, n_reads=info.n_reads, latency_ms=info.latency_ms,
        won=False, started_at=info.started_at, ended_at=now,
    ).returning(Attempt.id)
    return int(session.execute(stmt).scalar_one())


def _insert_ignore(session: Session) -> Any:
    """``INSERT ... ON CONFLICT DO NOTHING`` into answers, for the session's dialect."""
    if session.get_bind().dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as dialect_insert
    else:
        from sqlalchemy.dialects.sqlite import insert as dialect_insert
    return dialect_insert(Answer).on_conflict_do_nothing(
        index_elements=["decision_id", "question_id"])


def _answer_row(claim: Claimed, attempt_id: int, answer: EngineAnswer,
                expected: Mapping[str, str]) -> dict[str, Any]:
    return {
        "run_id": claim.run_id, "decision_id": claim.id, "attempt_id": attempt_id,
        "question_id": answer.question_id, "question_type": str(answer.question_type),
        "label": answer.label, "option": answer.option, "probs": dict(answer.probs),
        "p_yes": answer.p_yes, "expected_level": answer.expected_level,
        "confidence": answer.confidence, "top_prob": answer.top_prob, "stderr": answer.stderr,
        "agreement": answer.agreement, "draws": answer.draws,
        "stop_reason": str(answer.stop_reason), "label_mass": answer.label_mass,
        "min_label_mass": answer.min_label_mass, "argmax_is_label": answer.argmax_is_label,
        "entropy": answer.entropy, "expected": expected.get(answer.question_id),
    }


def _draw_row(claim: Claimed, attempt_id: int, draw: DrawRecord,
              question_ids: Sequence[str]) -> dict[str, Any]:
    read = draw.read
    return {
        "attempt_id": attempt_id, "decision_id": claim.id,
        "question_id": question_ids[read.question_index], "unit": draw.unit, "draw": draw.draw,
        "seed": draw.seed, "label_logprobs": list(read.label_logprobs), "probs": list(read.probs),
        "argmax_id": read.argmax_id, "argmax_is_label": read.argmax_is_label,
        "label_mass": read.label_mass, "entropy": read.entropy, "latency_ms": draw.latency_ms,
        "prompt_tokens": draw.prompt_tokens, "cached_tokens": draw.cached_tokens,
    }


def finish_decision(session: Session, *, claim: Claimed, answers: Sequence[EngineAnswer],
                    draws: Sequence[DrawRecord], attempt: AttemptInfo,
                    question_ids: Sequence[str], expected: Mapping[str, str] | None = None,
                    now: datetime | None = None) -> bool:
    """Record a finished attempt; return True when its answers are the ones kept (it won).

    A stale holder (its lease expired and was taken over) still wins if nothing was recorded
    before it; otherwise its attempt row records the lost race and its answers are dropped.
    """
    now = now or utcnow()
    attempt_id = _insert_attempt(session, claim=claim, outcome=OutcomeKind.OK, info=attempt,
                                 now=now)
    if draws:
        session.execute(insert(Draw), [_draw_row(claim, attempt_id, d, question_ids)
                                       for d in draws])
    rows = [_answer_row(claim, attempt_id, a, expected or {}) for a in answers]
    inserted = session.execute(_insert_ignore(session).values(rows).returning(Answer.id)).all()
    won = bool(inserted)
    if won:
        session.execute(update(Attempt).where(Attempt.id == attempt_id).values(won=True))
    session.execute(
        update(Decision).where(Decision.id == claim.id)
        .values(status=DecisionStatus.DONE, finished_at=now, lease_token=None,
                lease_expires_at=None, updated_at=now)
        .execution_options(synchronize_session=False)
    )
    return won


def fail_decision(session: Session, *, claim: Claimed, kind: str, detail: str, permanent: bool,
                  attempt: AttemptInfo | None = None, max_attempts: int = 5,
                  now: datetime | None = None) -> str | None:
    """Record a failed attempt; move the decision on if this claim still holds it.

    Returns the new status, or None when the lease was lost (only the attempt row is written).
    """
    now = now or utcnow()
    _insert_attempt(session, claim=claim, outcome=kind, info=attempt or AttemptInfo(),
                    detail=detail[:2000], now=now)
    if permanent:
        status = DecisionStatus.REJECTED
    elif claim.attempts >= max_attempts:
        status = DecisionStatus.FAILED
    else:
        status = DecisionStatus.PENDING
    stmt = (
        update(Decision)
        .where(Decision.id == claim.id, Decision.lease_token == claim.lease_token,
               Decision.status == DecisionStatus.LEASED)
        .values(status=status, last_error_kind=kind, last_error=detail[:2000],
                lease_token=None, lease_expires_at=None, updated_at=now,
                finished_at=now if status != DecisionStatus.PENDING else None)
        .returning(Decision.id)
        .execution_options(synchronize_session=False)
    )
    return str(status) if session.execute(stmt).first() else None


def mark_queued(session: Session, ids: Sequence[int], *, now: datetime | None = None) -> int:
    """Stamp decisions whose chunk message is (being) published; leased/done rows are left."""
    if not ids:
        return 0
    now = now or utcnow()
    stmt = (
        update(Decision)
        .where(Decision.id.in_(list(ids)), Decision.status.in_(_CLAIMABLE))
        .values(status=DecisionStatus.QUEUED, enqueued_at=now, updated_at=now)
        .execution_options(synchronize_session=False)
    )
    return int(session.execute(stmt).rowcount)  # type: ignore[attr-defined]


def mark_pending(session: Session, ids: Sequence[int], *, now: datetime | None = None) -> int:
    """Undo ``mark_queued`` after a failed publish, so the next sweep publishes them again."""
    if not ids:
        return 0
    now = now or utcnow()
    stmt = (
        update(Decision)
        .where(Decision.id.in_(list(ids)), Decision.status == DecisionStatus.QUEUED)
        .values(status=DecisionStatus.PENDING, enqueued_at=None, updated_at=now)
        .execution_options(synchronize_session=False)
    )
    return int(session.execute(stmt).rowcount)  # type: ignore[attr-defined]


def sweep(session: Session, *, now: datetime | None = None, lease_s: float = 120.0,
          max_attempts: int = 5, requeue_after_s: float = 600.0,
          republish_queued: bool = True, run_id: int | None = None,
          limit: int = 100_000) -> SweepResult:
    """Expire dead leases and collect what must be (re-)published, all in the caller's
    transaction. Rows are locked ``FOR UPDATE SKIP LOCKED`` on PostgreSQL, so two sweepers never
    handle the same row. ``lease_s`` is unused by the queries (leases carry their own expiry)
    and kept for symmetry with the worker's settings.
    """
    del lease_s
    now = now or utcnow()
    result = SweepResult()
    _expire_leases(session, now=now, max_attempts=max_attempts, run_id=run_id, limit=limit,
                   result=result)
    _collect_unpublished(session, now=now, requeue_after_s=requeue_after_s,
                         republish_queued=republish_queued, run_id=run_id, limit=limit,
                         result=result)
    return result


def _scope(stmt: Any, run_id: int | None) -> Any:
    return stmt if run_id is None else stmt.where(Decision.run_id == run_id)


def _expire_leases(session: Session, *, now: datetime, max_attempts: int, run_id: int | None,
                   limit: int, result: SweepResult) -> None:
    stmt = _scope(
        select(Decision.id, Decision.run_id, Decision.lease_token, Decision.lease_owner,
               Decision.attempts)
        .where(Decision.status == DecisionStatus.LEASED, Decision.lease_expires_at < now)
        .order_by(Decision.id).limit(limit).with_for_update(skip_locked=True, of=Decision),
        run_id,
    )
    rows = session.execute(stmt).all()
    if not rows:
        return
    attempts, lost, poisoned = [], [], []
    for did, rid, token, owner, n in rows:
        capped = n >= max_attempts
        (poisoned if capped else lost).append(did)
        kind = OutcomeKind.POISON if capped else OutcomeKind.WORKER_LOST
        detail = (f"lease of {owner} expired without a result (attempt {n} of {max_attempts})"
                  + ("; attempt cap reached" if capped else ""))
        attempts.append({"run_id": rid, "decision_id": did, "outcome": kind, "detail": detail,
                         "worker": owner, "lease_token": token, "ended_at": now,
                         "redelivered": False, "n_reads": 0, "won": False})
    session.execute(insert(Attempt), attempts)
    _set_lost(session, lost, DecisionStatus.PENDING, OutcomeKind.WORKER_LOST, now)
    _set_lost(session, poisoned, DecisionStatus.FAILED, OutcomeKind.POISON, now)
    result.lost += len(lost)
    result.poisoned += len(poisoned)


def _set_lost(session: Session, ids: list[int], status: str, kind: str, now: datetime) -> None:
    if not ids:
        return
    session.execute(
        update(Decision).where(Decision.id.in_(ids))
        .values(status=status, last_error_kind=kind, lease_token=None, lease_expires_at=None,
                last_error=f"{kind}: lease expired without a result", updated_at=now,
                finished_at=now if status == DecisionStatus.FAILED else None)
        .execution_options(synchronize_session=False)
    )


def _collect_unpublished(session: Session, *, now: datetime, requeue_after_s: float,
                         republish_queued: bool, run_id: int | None, limit: int,
                         result: SweepResult) -> None:
    due = Decision.status == DecisionStatus.PENDING
    if republish_queued:
        stale = now - timedelta(seconds=requeue_after_s)
        due = or_(due, and_(Decision.status == DecisionStatus.QUEUED,
                            or_(Decision.enqueued_at.is_(None), Decision.enqueued_at < stale)))
    stmt = _scope(
        select(Decision.id, Decision.run_id, Decision.last_error_kind)
        .where(due, _run_active()).order_by(Decision.id).limit(limit)
        .with_for_update(skip_locked=True, of=Decision),
        run_id,
    )
    for did, rid, kind in session.execute(stmt).all():
        target = result.to_isolate if kind in _ISOLATE_KINDS else result.to_publish
        target.setdefault(rid, []).append(did)
