"""Read-only views of runs in SQL: the queries behind ``dreads runs``, ``status``, ``export``,
``resume --dry-run`` and the embedded summary.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from itertools import groupby
from typing import Any

from sqlalchemy import Select, and_, case, func, select, text
from sqlalchemy.orm import Session

from app.store import dialects, status_sql
from app.store.export_shapes import mean_level, option_of, question_shapes
from app.store.infrastructure import InfrastructureEvents, infrastructure_events
from app.store.models import (
    Answer,
    Decision,
    DecisionPayload,
    DecisionStatus,
    Run,
    RunStatus,
    shown_status,
)
from app.store.runs import RunInfo, run_info
from app.store.states import OPEN
from app.store.status_sql import (
    LOW_MASS,
    CellStats,
    ReasonGroup,
    RunOverview,
    RunStatusReport,
    cell_key,
)

__all__ = [
    "ANSWER_FIELDS",
    "LOW_MASS",
    "CellStats",
    "ReasonGroup",
    "RunOverview",
    "RunStatusReport",
    "SessionReader",
    "failure_reasons",
    "infrastructure",
    "is_settled",
    "iter_export",
    "list_runs",
    "question_ids",
    "recent_runs",
    "resume_preview",
    "run_status",
    "status_by_cell",
    "status_counts",
]

_OPEN = (*OPEN, DecisionStatus.FAILED)
#: Answer columns exported per question, in order.
ANSWER_FIELDS = (
    "label", "option", "probs", "p_yes", "expected_level", "confidence", "top_prob", "stderr",
    "agreement", "draws", "stop_reason", "label_mass", "min_label_mass", "argmax_is_label",
    "entropy", "endpoint_confidence",
)


def status_by_cell(session: Session, run_id: int) -> dict[tuple[str, str], int]:
    """Decisions of the run by (cell, status); a decision without a cell is in cell "-"."""
    stmt = (select(Decision.cell, Decision.status, func.count()).where(Decision.run_id == run_id)
            .group_by(Decision.cell, Decision.status))
    run_status = _run_status(session, run_id)
    counts: dict[tuple[str, str], int] = {}
    for cell, status, n in session.execute(stmt):
        key = (cell_key(cell), shown_status(status, run_status))
        counts[key] = counts.get(key, 0) + int(n)
    return counts


def _run_status(session: Session, run_id: int) -> str:
    return str(session.scalar(select(Run.status).where(Run.id == run_id)) or RunStatus.ACTIVE)


class SessionReader:
    """``app.store.status_sql``'s ``Reader`` over a SQLAlchemy session."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.dialect = dialects.name(session)

    def rows(self, sql: str, params: Mapping[str, Any]) -> Sequence[Sequence[Any]]:
        return self.session.execute(text(sql), dict(params)).all()


def status_counts(session: Session, run_id: int) -> dict[str, int]:
    """Decisions of the run by status, as a user sees them (``shown_status``)."""
    return status_sql.status_counts(SessionReader(session), _run(session, run_id))


def run_status(session: Session, run: RunInfo, *, now: datetime | None = None) -> RunStatusReport:
    """Counts by status, per-cell diagnostics and throughput, from SQL only
    (``app.store.status_sql``)."""
    return status_sql.run_status(SessionReader(session), run, now=now)


def failure_reasons(session: Session, run_id: int, *, limit: int = 10) -> list[ReasonGroup]:
    """Why decisions ended failed or rejected, grouped by kind and reason (numbers blanked)."""
    return status_sql.failure_reasons(SessionReader(session), run_id, limit=limit)


def infrastructure(session: Session, run_id: int) -> InfrastructureEvents:
    """What the infrastructure did to the run: attempts it ended, their decisions' fate, its
    pauses (``app.store.infrastructure``; status shows the same)."""
    return infrastructure_events(SessionReader(session), run_id)


def list_runs(session: Session) -> list[RunOverview]:
    return status_sql.list_runs(SessionReader(session))


def is_settled(session: Session, run_id: int, *, count_failed: bool) -> bool:
    """No decision of the run is pending, queued or leased (nor failed, with
    ``count_failed``): resume has nothing to publish or repair. One probe of the open-rows
    index."""
    return status_sql.is_settled(SessionReader(session), run_id, count_failed=count_failed)


def _run(session: Session, run_id: int) -> RunInfo:
    return run_info(session.get_one(Run, run_id))


def recent_runs(session: Session, limit: int) -> list[RunInfo]:
    """The ``limit`` most recently created runs (cancelled ones too), newest first."""
    stmt = select(Run).order_by(Run.id.desc()).limit(limit)
    return [run_info(r) for r in session.scalars(stmt)]


def question_ids(session: Session, run_id: int) -> list[str]:
    """Every question id of the run's decisions, in first-seen order (streams payloads)."""
    seen: dict[str, None] = {}
    stmt = (select(DecisionPayload.payload)
            .join(Decision, Decision.id == DecisionPayload.decision_id)
            .where(Decision.run_id == run_id, Decision.replicate == 0)
            .order_by(Decision.id).execution_options(yield_per=1000))
    for payload in session.scalars(stmt):
        seen.update(dict.fromkeys(_payload_questions(payload)))
    return list(seen)


def _payload_questions(payload: Mapping[str, Any]) -> list[str]:
    return list((payload.get("questions") or {}).keys())


def _export_stmt(run_id: int) -> Select[Any]:
    answer_cols = [getattr(Answer, name) for name in ANSWER_FIELDS]
    return (select(Decision.id, Decision.key, Decision.cell, Decision.replicate,
                   Decision.status, Decision.last_error_kind, Decision.last_error,
                   DecisionPayload.payload, Answer.question_id, Answer.expected,
                   *answer_cols)
            .join(DecisionPayload, DecisionPayload.decision_id == Decision.id)
            .outerjoin(Answer, and_(Answer.decision_id == Decision.id))
            .where(Decision.run_id == run_id)
            .order_by(Decision.id, Answer.id)
            .execution_options(yield_per=1000))


def iter_export(session: Session, run_id: int, *,
                with_state: bool = False) -> Iterator[dict[str, Any]]:
    """One dict per decision, streamed: its identity, status (and with ``with_state`` its
    state, as stored) and per question the answer with every diagnostic, the expected label
    and the expected answer in the answer's form (``expected_option``); a score's mean level
    in the job file's numbering is ``mean_level`` (``expected_level`` is 0-based)."""
    run_status = _run_status(session, run_id)
    rows = session.execute(_export_stmt(run_id))
    for _, group in groupby(rows, key=lambda r: r.id):
        yield _export_record(list(group), run_status, with_state=with_state)


def _export_record(rows: Sequence[Any], run_status: str, *, with_state: bool) -> dict[str, Any]:
    first = rows[0]
    answers = _export_answers(rows, first.payload)
    record = {"id": first.key, "cell": first.cell, "replicate": first.replicate,
              "status": shown_status(first.status, run_status),
              "error_kind": first.last_error_kind,
              "error": first.last_error, "answers": answers}
    if with_state:
        record["state"] = first.payload.get("state")
    if first.payload.get("images"):  # each image's reference and what submit checked
        record["images"] = first.payload["images"]
    return record


def _export_answers(rows: Sequence[Any], payload: Mapping[str, Any]) -> dict[str, Any]:
    """Question id -> its answer (or ``answered: False``), expected label and option."""
    expected = payload.get("expected") or {}
    shapes = question_shapes(payload)

    def option(qid: str, label: str | None) -> str | None:
        return option_of(shapes.get(qid), label)

    answers: dict[str, Any] = {
        qid: {"answered": False, "expected": expected.get(qid),
              "expected_option": option(qid, expected.get(qid))}
        for qid in _payload_questions(payload)
    }
    for row in rows:
        if row.question_id is not None:
            answer = {name: getattr(row, name) for name in ANSWER_FIELDS}
            exp = row.expected if row.expected is not None else expected.get(row.question_id)
            answers[row.question_id] = {
                "answered": True, **answer, "expected": exp,
                "expected_option": option(row.question_id, exp),
                "mean_level": mean_level(row.expected_level)}
    return answers


def resume_preview(
    session: Session, run_id: int, *, now: datetime | None = None, requeue_after_s: float
) -> dict[str, int]:
    """What ``resume`` would touch: expired leases, failed, pending and stale queued rows."""
    now = now or datetime.now(UTC)
    stale = now - timedelta(seconds=requeue_after_s)
    status = Decision.status
    expired = and_(status == DecisionStatus.LEASED, Decision.lease_expires_at < now)
    stale_queued = and_(status == DecisionStatus.QUEUED,
                        (Decision.enqueued_at.is_(None)) | (Decision.enqueued_at < stale))
    stmt = select(
        func.sum(case((expired, 1), else_=0)),
        func.sum(case((status == DecisionStatus.FAILED, 1), else_=0)),
        func.sum(case((status == DecisionStatus.PENDING, 1), else_=0)),
        func.sum(case((stale_queued, 1), else_=0)),
    ).where(Decision.run_id == run_id, Decision.status.in_(_OPEN))  # ix_decisions_open only
    row = session.execute(stmt).one()
    names = ("expired_leases", "failed", "pending", "stale_queued")
    return {name: int(value or 0) for name, value in zip(names, row, strict=True)}
