"""The lease protocol: claim / renew / finish / fail / sweep, on PostgreSQL and SQLite alike.

A decision moves ``pending -> queued -> leased -> done`` (or ``failed`` / ``rejected``)::

    claim_decisions   one transaction: the claimable rows locked (SELECT ... FOR UPDATE SKIP
                      LOCKED), leased by an UPDATE ... RETURNING that checks the guard again,
                      and a ``worker_lost`` attempt INSERTed for each expired lease taken
                      over. Only the rows won are processed, so a redelivered or duplicated
                      chunk message whose decisions are done or held elsewhere is a cheap no-op.
    renew_leases      the holder extends its leases (guarded by the lease token).
    finish_decisions  attempts + draws + answers (INSERT ... ON CONFLICT DO NOTHING) + status
                      done of finished attempts, a statement per table for all of them, in the
                      caller's transaction: the first finished attempt wins; a question the
                      answer source refused is a ``refused`` attempt row of the winner.
    fail_decision     an attempt row with the outcome kind; permanent -> rejected, transient ->
                      pending (re-published by the sweeper) or failed at the attempt cap.
    release_unserved  the worker's upstream does not serve the run's model (or refuses its
                      key, or the run paused meanwhile): back to pending, the claim not
                      charged (a ``not_served``, ``unauthorized`` or ``paused`` attempt row
                      says so).
    expire_leases     expired leases -> a ``worker_lost`` attempt and pending (``poison`` and
                      failed at the cap): a page of them.
    stamp_page        the sweeper's paging: stamp the next page of due rows of a run
                      ``queued`` (before their message is published) and return their ids;
                      ``queued_page`` reads one without stamping (the broker-loss recovery).
    mark_pending      undo the stamp after a failed publish (``app.runs.unpublish``: in a
                      transaction of its own).

Times come from the caller's clock (UTC); the caller's ``session_scope`` owns the transaction
and turns the database's errors into ``StoreError``.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from sqlalchemy import Table, and_, bindparam, exists, func, insert, or_, select, true, update
from sqlalchemy.orm import Session

from app.engine.types import Answer as EngineAnswer
from app.engine.types import DrawRecord, Refusal
from app.store import dialects
from app.store.models import (
    Answer,
    Attempt,
    Decision,
    DecisionPayload,
    DecisionStatus,
    Draw,
    OutcomeKind,
    Run,
    RunStatus,
)
from app.store.states import NOT_STARTED

__all__ = [
    "AttemptInfo",
    "Claimed",
    "Expired",
    "Finished",
    "claim_decisions",
    "claimable",
    "database_now",
    "expire_leases",
    "fail_decision",
    "finish_decision",
    "finish_decisions",
    "mark_pending",
    "mark_queued",
    "queued_page",
    "release_unserved",
    "renew_leases",
    "run_active",
    "stamp_page",
    "utcnow",
]

_CLAIMABLE = NOT_STARTED  #: (an expired lease is claimable too: ``claimable``)


def utcnow() -> datetime:
    return datetime.now(UTC)


#: A claimed decision's payload, read in the claim's own statement (a correlated subquery in
#: RETURNING: SQLite does not let an UPDATE ... FROM table into RETURNING).
_PAYLOAD = (select(DecisionPayload.payload)
            .where(DecisionPayload.decision_id == Decision.id).scalar_subquery())


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
    usage: Mapping[str, Any] | None = None  #: a decision endpoint's usage object


@dataclass(frozen=True)
class Expired:
    """What one ``expire_leases`` did."""

    lost: int = 0  #: expired leases turned back to pending (``worker_lost`` attempts)
    poisoned: int = 0  #: expired leases at the attempt cap (``poison`` attempts, failed)


def run_active() -> Any:
    """The decision's run is neither cancelled nor paused (no claim takes such a run's
    decisions)."""
    return ~exists().where(Run.id == Decision.run_id,
                           Run.status.in_((RunStatus.CANCELLED, RunStatus.PAUSED)))


def claimable(now: datetime) -> Any:
    """A claim could win the row at ``now``: pending, queued, or leased with its lease expired."""
    return or_(
        Decision.status.in_(_CLAIMABLE),
        and_(Decision.status == DecisionStatus.LEASED, Decision.lease_expires_at < now),
    )


def claim_decisions(session: Session, *, decision_ids: Sequence[int], owner: str, lease_s: float,
                    max_attempts: int = 5, now: datetime | None = None) -> list[Claimed]:
    """Lease the claimable decisions among ``decision_ids``; return only the rows won.

    A lease that expired without a result and is taken over here (a redelivered message came
    back before the sweeper did) gets the sweeper's ``worker_lost`` attempt row in the same
    transaction: every claim charged to a decision has its attempt row, whoever finds it."""
    if not decision_ids:
        return []
    now = now or utcnow()
    # Lock the claimable rows in id order and skip rows another transaction holds (a
    # concurrent claim, finish or sweep of the same decision): overlapping claims of a
    # duplicated message never wait on each other, so they cannot deadlock.
    candidates = session.execute(
        select(Decision.id, Decision.status, Decision.lease_owner, Decision.lease_token,
               Decision.attempts)
        .where(Decision.id.in_(list(decision_ids)), claimable(now),
               Decision.attempts < max_attempts, run_active())
        .order_by(Decision.id)
        .with_for_update(skip_locked=True, of=Decision)
    ).all()
    if not candidates:
        return []
    expired = {row.id: row for row in candidates if row.status == DecisionStatus.LEASED}
    token = uuid.uuid4().hex
    # The guard is checked again: SQLite takes no row lock, and a sweeper that expired one of
    # these leases meanwhile recorded it and re-publishes it (that row is left to it).
    still: Any = Decision.status.in_(_CLAIMABLE)
    if expired:
        still = or_(and_(Decision.id.not_in(list(expired)), still),
                    and_(Decision.status == DecisionStatus.LEASED, Decision.lease_expires_at < now,
                         Decision.lease_token.in_({row.lease_token for row in expired.values()})))
    stmt = (
        update(Decision)
        .where(Decision.id.in_([row.id for row in candidates]), still,
               Decision.attempts < max_attempts, run_active())
        .values(status=DecisionStatus.LEASED, lease_owner=owner[:200], lease_token=token,
                lease_expires_at=now + timedelta(seconds=lease_s),
                attempts=Decision.attempts + 1, updated_at=now)
        .returning(Decision.id, Decision.run_id, Decision.key, Decision.replicate,
                   Decision.cell, _PAYLOAD, Decision.lease_token,
                   Decision.attempts)
        .execution_options(synchronize_session=False)
    )
    won = [Claimed(*row) for row in session.execute(stmt).all()]
    taken = [(claim, expired[claim.id]) for claim in won if claim.id in expired]
    if taken:
        session.execute(insert(Attempt), [
            {"run_id": claim.run_id, "decision_id": claim.id, "outcome": OutcomeKind.WORKER_LOST,
             "detail": (f"lease of {old.lease_owner} expired without a result (attempt "
                        f"{old.attempts} of {max_attempts}); taken over by {owner[:120]}"),
             "worker": old.lease_owner, "lease_token": old.lease_token, "ended_at": now,
             "redelivered": False, "n_reads": 0, "won": False}
            for claim, old in taken])
    order = {did: i for i, did in enumerate(decision_ids)}
    return sorted(won, key=lambda c: order[c.id])


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


_ATTEMPTS = cast(Table, Attempt.__table__)
_DECISIONS = cast(Table, Decision.__table__)
_ANSWERS = cast(Table, Answer.__table__)
#: Prebuilt Core statements of the hot path (compiled once, no ORM bookkeeping per call).
#: Attempt rows, their ids returned in the rows' order (insertmanyvalues).
_INSERT_ATTEMPTS = insert(_ATTEMPTS).returning(_ATTEMPTS.c.id, sort_by_parameter_order=True)
_INSERT_DRAWS = insert(cast(Table, Draw.__table__))
#: The decisions whose answers went in (a decision already answered inserts none of them).
_ANSWERS_IGNORE = dialects.insert_ignoring(_ANSWERS, ["decision_id", "question_id"],
                                           returning=_ANSWERS.c.decision_id)
_ATTEMPT_LOST_RACE = (update(_ATTEMPTS).where(_ATTEMPTS.c.id == bindparam("attempt_id"))
                      .values(won=False))
_DECISION_DONE = (
    update(_DECISIONS).where(_DECISIONS.c.id == bindparam("decision_id"))
    .values(status=DecisionStatus.DONE, finished_at=bindparam("now"), lease_token=None,
            lease_expires_at=None, updated_at=bindparam("now"))
)


#: Settle a decision only if no attempt settled it before (row-locked: one winner).
_FIRST_DONE = (
    update(_DECISIONS)
    .where(_DECISIONS.c.id == bindparam("decision_id"), _DECISIONS.c.status != DecisionStatus.DONE)
    .values(status=DecisionStatus.DONE, finished_at=bindparam("now"), lease_token=None,
            lease_expires_at=None, updated_at=bindparam("now"))
    .returning(_DECISIONS.c.id)
)


def _attempt_row(claim: Claimed, *, outcome: str, info: AttemptInfo, now: datetime,
                 detail: str | None = None, won: bool = False) -> dict[str, Any]:
    return {
        "run_id": claim.run_id, "decision_id": claim.id, "outcome": outcome, "detail": detail,
        "worker": info.worker, "task_id": info.task_id, "redelivered": info.redelivered,
        "lease_token": claim.lease_token, "n_reads": info.n_reads,
        "latency_ms": info.latency_ms, "won": won, "started_at": info.started_at,
        "ended_at": now, "usage": dict(info.usage) if info.usage is not None else None,
    }


def _insert_attempts(conn: Any, rows: Sequence[dict[str, Any]]) -> list[int]:
    """Insert attempt rows; their ids, in the rows' order."""
    return [int(i) for i in conn.execute(_INSERT_ATTEMPTS, list(rows)).scalars()]


def _insert_attempt(session: Session, *, claim: Claimed, outcome: str, info: AttemptInfo,
                    detail: str | None = None, now: datetime, won: bool = False) -> int:
    row = _attempt_row(claim, outcome=outcome, info=info, now=now, detail=detail, won=won)
    return _insert_attempts(session.connection(), [row])[0]


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
        "endpoint_confidence": answer.endpoint_confidence,
    }


def _draw_row(claim: Claimed, attempt_id: int, draw: DrawRecord,
              question_ids: Sequence[str]) -> dict[str, Any]:
    read = draw.read
    return {
        "attempt_id": attempt_id, "decision_id": claim.id,
        "question_id": question_ids[read.question_index], "unit": draw.unit, "draw": draw.draw,
        "seed": draw.seed,
        "label_logprobs": None if read.label_logprobs is None else list(read.label_logprobs),
        "argmax_id": read.argmax_id, "argmax_is_label": read.argmax_is_label,
        "label_mass": read.label_mass, "entropy": read.entropy, "latency_ms": draw.latency_ms,
        "prompt_tokens": draw.prompt_tokens, "cached_tokens": draw.cached_tokens,
    }


@dataclass(frozen=True)
class Finished:
    """An attempt that answered its decision, to be recorded by ``finish_decisions``."""

    claim: Claimed
    answers: Sequence[EngineAnswer]
    draws: Sequence[DrawRecord]
    attempt: AttemptInfo
    question_ids: Sequence[str]
    expected: Mapping[str, str] = field(default_factory=dict)
    refusals: Sequence[Refusal] = ()
    input_tokens: int = 0  #: what the attempt's requests spent (``app.runs.budget``)
    output_tokens: int = 0


def finish_decision(session: Session, *, claim: Claimed, answers: Sequence[EngineAnswer],
                    draws: Sequence[DrawRecord], attempt: AttemptInfo,
                    question_ids: Sequence[str], expected: Mapping[str, str] | None = None,
                    now: datetime | None = None, refusals: Sequence[Refusal] = ()) -> bool:
    """Record a finished attempt; return True when its answers are the ones kept (it won).
    ``finish_decisions`` of one."""
    (won,) = finish_decisions(session, [Finished(
        claim=claim, answers=answers, draws=draws, attempt=attempt, question_ids=question_ids,
        expected=expected or {}, refusals=refusals)], now=now)
    return won


def finish_decisions(session: Session, finished: Sequence[Finished], *,
                     now: datetime | None = None) -> list[bool]:
    """Record finished attempts, a statement per table for all of them; return, for each,
    whether its answers are the ones kept (it won).

    A stale holder (its lease expired and was taken over) still wins if nothing was recorded
    before it; otherwise its attempt row records the lost race and its answers are dropped.
    The winner's ``refusals`` (questions the answer source declined) become one ``refused``
    attempt row each, so they are counted once per question, whatever the redeliveries.
    """
    if not finished:
        return []
    now = now or utcnow()
    conn = session.connection()
    # Optimistic: the attempts are written as winners and corrected in the rare lost race.
    attempt_ids = _insert_attempts(conn, [_attempt_row(
        f.claim, outcome=OutcomeKind.OK, info=f.attempt, now=now, won=True) for f in finished])
    draws = [_draw_row(f.claim, aid, d, f.question_ids)
             for f, aid in zip(finished, attempt_ids, strict=True) for d in f.draws]
    if draws:
        conn.execute(_INSERT_DRAWS, draws)
    answers = [_answer_row(f.claim, aid, a, f.expected)
               for f, aid in zip(finished, attempt_ids, strict=True) for a in f.answers]
    kept: set[int] = set()
    if answers:
        kept = {int(did) for (did,) in conn.execute(_ANSWERS_IGNORE[dialects.name(conn)],
                                                    answers)}
    won = [f.claim.id in kept if f.answers else _first_done(conn, f.claim.id, now)
           for f in finished]
    lost = [{"attempt_id": aid} for aid, w in zip(attempt_ids, won, strict=True) if not w]
    if lost:
        conn.execute(_ATTEMPT_LOST_RACE, lost)
    refused = [_attempt_row(f.claim, outcome=OutcomeKind.REFUSED,
                            info=replace(f.attempt, n_reads=0, latency_ms=None, usage=None),
                            now=now, detail=f"question {r.question_id!r}: {r.reason}"[:2000])
               for f, w in zip(finished, won, strict=True) if w for r in f.refusals]
    if refused:
        _insert_attempts(conn, refused)
    conn.execute(_DECISION_DONE, [{"decision_id": f.claim.id, "now": now} for f in finished])
    return won


def _first_done(conn: Any, decision_id: int, now: datetime) -> bool:
    """Every question refused: the first attempt to settle the decision wins."""
    return conn.execute(_FIRST_DONE, {"decision_id": decision_id, "now": now}).first() is not None


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


#: Ids per UPDATE ... IN (...): PostgreSQL takes at most 65,535 parameters per statement.
_IDS_PER_STATEMENT = 5000


def _update_in_slices(session: Session, ids: Sequence[int], stmt: Any) -> int:
    ids = list(ids)
    total = 0
    for start in range(0, len(ids), _IDS_PER_STATEMENT):
        part = ids[start:start + _IDS_PER_STATEMENT]
        result = session.execute(stmt.where(Decision.id.in_(part))
                                 .execution_options(synchronize_session=False))
        total += int(result.rowcount or 0)  # type: ignore[attr-defined]
    return total


def mark_queued(session: Session, ids: Sequence[int], *, now: datetime | None = None) -> int:
    """Stamp decisions queued *before* their chunk message is published (so a worker never
    finds a message whose rows are still being stamped); leased/done rows are left. The stamp
    is the database's clock unless ``now`` is given (it is compared with the broker's epoch)."""
    stamp: Any = now or func.now()
    stmt = (update(Decision).where(Decision.status.in_(_CLAIMABLE))
            .values(status=DecisionStatus.QUEUED, enqueued_at=stamp, updated_at=stamp))
    return _update_in_slices(session, ids, stmt)


def mark_pending(session: Session, ids: Sequence[int], *, now: datetime | None = None) -> int:
    """Undo ``mark_queued`` after a failed publish, so the next sweep publishes them again."""
    stamp: Any = now or func.now()
    stmt = (update(Decision).where(Decision.status == DecisionStatus.QUEUED)
            .values(status=DecisionStatus.PENDING, enqueued_at=None, updated_at=stamp))
    return _update_in_slices(session, ids, stmt)


def database_now(session: Session) -> datetime:
    """The database's clock (PostgreSQL ``clock_timestamp()``; this process's clock on SQLite):
    the one clock ``enqueued_at`` stamps and the broker's epoch are compared on."""
    return dialects.clock_now(session)


def stamp_page(session: Session, *, run_id: int, status: str, after_id: int, limit: int,
               queued_before: datetime | None = None,
               queued_since: datetime | None = None) -> list[tuple[int, str | None]]:
    """Stamp ``queued`` the next ``limit`` rows of run ``run_id`` in ``status`` (for queued:
    stamped before ``queued_before``, and at or after ``queued_since`` when given) with ids
    above ``after_id``, locked ``SKIP LOCKED``; return (id, last error kind) in id order. The
    caller publishes them after its commit."""
    due = and_(Decision.run_id == run_id, Decision.status == status, Decision.id > after_id)
    if status == DecisionStatus.QUEUED:
        due = and_(due, _stamped_between(queued_since, queued_before))
    page = (select(Decision.id).where(due).order_by(Decision.id).limit(limit)
            .with_for_update(skip_locked=True, of=Decision))
    stmt = (update(Decision).where(Decision.id.in_(page.scalar_subquery()))
            .values(status=DecisionStatus.QUEUED, enqueued_at=func.now(), updated_at=func.now())
            .returning(Decision.id, Decision.last_error_kind)
            .execution_options(synchronize_session=False))
    return sorted((int(did), kind) for did, kind in session.execute(stmt).all())


def queued_page(session: Session, *, run_id: int, after_id: int, limit: int,
                queued_before: datetime) -> list[tuple[int, str | None]]:
    """The next ``limit`` queued rows of run ``run_id`` stamped before ``queued_before`` (or
    never) with ids above ``after_id``, in id order, as (id, last error kind). Read only: the
    broker-loss recovery re-publishes them as they are (a range scan of ``ix_decisions_open``),
    where stamping would rewrite every row of the run."""
    stmt = (select(Decision.id, Decision.last_error_kind)
            .where(Decision.run_id == run_id, Decision.status == DecisionStatus.QUEUED,
                   Decision.id > after_id, _stamped_between(None, queued_before))
            .order_by(Decision.id).limit(limit))
    return [(int(did), kind) for did, kind in session.execute(stmt).all()]


def _stamped_between(since: datetime | None, before: datetime | None) -> Any:
    """Queued rows stamped in [since, before); a row never stamped counts as the oldest."""
    before_ok = (or_(Decision.enqueued_at.is_(None), Decision.enqueued_at < before)
                 if before is not None else true())
    if since is None:
        return before_ok
    return and_(before_ok, Decision.enqueued_at >= since)


def release_unserved(session: Session, *, claim: Claimed, detail: str,
                     attempt: AttemptInfo | None = None, now: datetime | None = None,
                     kind: str = OutcomeKind.NOT_SERVED) -> bool:
    """The worker cannot serve the run (its upstream serves another model: ``not_served``; or
    refuses its API key: ``unauthorized``), or the attempt failed after its run paused
    (``paused``): an attempt row of that kind, and the decision back to pending with the claim
    not counted against the attempt cap (the cause is not the decision). False when the lease
    was lost."""
    now = now or utcnow()
    _insert_attempt(session, claim=claim, outcome=kind,
                    info=attempt or AttemptInfo(), detail=detail[:2000], now=now)
    stmt = (
        update(Decision)
        .where(Decision.id == claim.id, Decision.lease_token == claim.lease_token,
               Decision.status == DecisionStatus.LEASED)
        .values(status=DecisionStatus.PENDING, attempts=Decision.attempts - 1,
                lease_token=None, lease_expires_at=None, updated_at=now)
        .returning(Decision.id)
        .execution_options(synchronize_session=False)
    )
    return session.execute(stmt).first() is not None


def expire_leases(session: Session, *, now: datetime | None = None, max_attempts: int = 5,
                  run_id: int | None = None, limit: int = 10_000) -> Expired:
    """At most ``limit`` expired leases (of run ``run_id``, or of every run) back to pending
    (a ``worker_lost`` attempt each) or failed at the cap (``poison``), locked ``SKIP LOCKED``
    so two sweepers never take the same row. The sweeper (``app.runs.sweep``) pages through
    them."""
    now = now or utcnow()
    stmt = (
        select(Decision.id, Decision.run_id, Decision.lease_token, Decision.lease_owner,
               Decision.attempts)
        .where(Decision.status == DecisionStatus.LEASED, Decision.lease_expires_at < now)
        .order_by(Decision.id).limit(limit).with_for_update(skip_locked=True, of=Decision)
    )
    if run_id is not None:
        stmt = stmt.where(Decision.run_id == run_id)
    rows = session.execute(stmt).all()
    if not rows:
        return Expired()
    attempts: list[dict[str, Any]] = []
    lost: list[int] = []
    poisoned: list[int] = []
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
    return Expired(lost=len(lost), poisoned=len(poisoned))


def _set_lost(session: Session, ids: list[int], status: str, kind: str, now: datetime) -> None:
    if not ids:
        return
    _update_in_slices(session, ids, update(Decision).values(
        status=status, last_error_kind=kind, lease_token=None, lease_expires_at=None,
        last_error=f"{kind}: lease expired without a result", updated_at=now,
        finished_at=now if status == DecisionStatus.FAILED else None))
