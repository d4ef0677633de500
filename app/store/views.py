"""Read-only views of runs in SQL: the queries behind ``dreads runs``, ``status``, ``export``,
``resume --dry-run`` and the embedded summary.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import groupby
from typing import Any

from sqlalchemy import Select, and_, case, func, select
from sqlalchemy.orm import Session

from app.store.models import (
    Answer,
    Attempt,
    Decision,
    DecisionPayload,
    DecisionStatus,
    OutcomeKind,
    Run,
    RunStatus,
    shown_status,
)
from app.store.runs import ACTIVE, RunInfo, run_info

__all__ = [
    "ANSWER_FIELDS",
    "CellStats",
    "ReasonGroup",
    "RunOverview",
    "RunStatusReport",
    "failure_reasons",
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

SETTLED = (DecisionStatus.DONE, DecisionStatus.FAILED, DecisionStatus.REJECTED)
_OPEN = (*ACTIVE, DecisionStatus.FAILED)
#: Answer columns exported per question, in order.
ANSWER_FIELDS = (
    "label", "option", "probs", "p_yes", "expected_level", "confidence", "top_prob", "stderr",
    "agreement", "draws", "stop_reason", "label_mass", "min_label_mass", "argmax_is_label",
    "entropy", "endpoint_confidence",
)
LOW_MASS = 0.5


def status_counts(session: Session, run_id: int) -> dict[str, int]:
    """Decisions of the run by status, as a user sees them (``shown_status``)."""
    stmt = (select(Decision.status, func.count()).where(Decision.run_id == run_id)
            .group_by(Decision.status))
    return _shown_counts(session.execute(stmt), _run_status(session, run_id))


def status_by_cell(session: Session, run_id: int) -> dict[tuple[str, str], int]:
    """Decisions of the run by (cell, status); a decision without a cell is in cell "-"."""
    stmt = (select(Decision.cell, Decision.status, func.count()).where(Decision.run_id == run_id)
            .group_by(Decision.cell, Decision.status))
    run_status = _run_status(session, run_id)
    counts: dict[tuple[str, str], int] = {}
    for cell, status, n in session.execute(stmt):
        key = (_cell_key(cell), shown_status(status, run_status))
        counts[key] = counts.get(key, 0) + int(n)
    return counts


def _run_status(session: Session, run_id: int) -> str:
    return str(session.scalar(select(Run.status).where(Run.id == run_id)) or RunStatus.ACTIVE)


def _shown_counts(rows: Iterable[Any], run_status: str) -> dict[str, int]:
    """``(status, count)`` rows as a user sees them: a cancelled run's not started rows are
    counted cancelled (``shown_status``)."""
    counts: dict[str, int] = {}
    for status, n in rows:
        shown = shown_status(status, run_status)
        counts[shown] = counts.get(shown, 0) + int(n)
    return counts


def recent_runs(session: Session, limit: int) -> list[RunInfo]:
    """The ``limit`` most recently created runs that are not cancelled, newest first."""
    stmt = (select(Run).where(Run.status != RunStatus.CANCELLED).order_by(Run.id.desc())
            .limit(limit))
    return [run_info(r) for r in session.scalars(stmt)]


@dataclass
class CellStats:
    """What went wrong (and right) in one cell (design.md principle 6)."""

    cell: str
    total: int = 0
    done: int = 0
    questions: int = 0
    unanswered: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    low_mass: int = 0
    argmax_not_label: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"cell": self.cell, "total": self.total, "done": self.done,
                "questions": self.questions, "unanswered": self.unanswered,
                "failures": dict(sorted(self.failures.items())), "low_mass": self.low_mass,
                "argmax_not_label": self.argmax_not_label}


@dataclass(frozen=True)
class ReasonGroup:
    """Decisions that failed or were rejected for one reason (numbers aside), with an example.

    ``prompt of 2,949,288 tokens, max context 8192`` and ``prompt of 10,007 tokens, max context
    8192`` are one group: the reasons are compared with their numbers blanked out."""

    kind: str
    count: int
    example: str

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "count": self.count, "example": self.example}


@dataclass(frozen=True)
class RunStatusReport:
    run: RunInfo
    counts: dict[str, int]
    cells: list[CellStats]
    finished_1m: int
    finished_5m: int
    #: seconds of each window the run was working in (shorter than the window when the run
    #: started or resumed within it), for the rate
    active_1m_s: float = 60.0
    active_5m_s: float = 300.0
    reasons: list[ReasonGroup] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def remaining(self) -> int:
        return sum(self.counts.get(s, 0) for s in ACTIVE)

    @property
    def rate_per_s(self) -> float:
        """Decisions finished per second of work over the last 5 minutes (the last minute when
        busier); a run that started 10 s ago is measured over those 10 s, not over 60."""
        return max(self.finished_1m / self.active_1m_s, self.finished_5m / self.active_5m_s)

    @property
    def eta_s(self) -> float | None:
        if self.remaining == 0:
            return 0.0
        return self.remaining / self.rate_per_s if self.rate_per_s > 0 else None

    def as_dict(self) -> dict[str, Any]:
        return {"run": self.run.name, "status": self.run.status, "total": self.total,
                "counts": dict(sorted(self.counts.items())), "remaining": self.remaining,
                "finished_last_1m": self.finished_1m, "finished_last_5m": self.finished_5m,
                "rate_per_s": round(self.rate_per_s, 3), "eta_s": self.eta_s,
                "cells": [c.as_dict() for c in self.cells],
                "reasons": [r.as_dict() for r in self.reasons]}


def _cell_key(cell: str | None) -> str:
    return cell if cell is not None else "-"


def run_status(session: Session, run: RunInfo, *, now: datetime | None = None) -> RunStatusReport:
    """Counts by status, per-cell diagnostics and throughput, from SQL only."""
    now = now or datetime.now(UTC)
    cells: dict[str, CellStats] = {}

    def cell(name: str | None) -> CellStats:
        return cells.setdefault(_cell_key(name), CellStats(cell=_cell_key(name)))

    _fill_decision_counts(session, run.id, cell)
    _fill_answer_counts(session, run.id, cell)
    _fill_failures(session, run.id, cell)
    finished_1m, finished_5m = _finished_since(
        session, run.id, now - timedelta(minutes=1), now - timedelta(minutes=5))
    active_1m, active_5m = _active_spans(session, run.id, now, (60.0, 300.0))
    return RunStatusReport(
        run=run, counts=status_counts(session, run.id),
        cells=[cells[k] for k in sorted(cells)],
        finished_1m=finished_1m, finished_5m=finished_5m,
        active_1m_s=active_1m, active_5m_s=active_5m,
        reasons=failure_reasons(session, run.id),
    )


def _fill_decision_counts(session: Session, run_id: int, cell: Any) -> None:
    settled = Decision.status.in_(SETTLED)
    stmt = (select(Decision.cell, func.count(),
                   func.sum(case((Decision.status == DecisionStatus.DONE, 1), else_=0)),
                   func.sum(case((settled, Decision.n_questions), else_=0)))
            .where(Decision.run_id == run_id).group_by(Decision.cell))
    for name, total, done, settled_questions in session.execute(stmt):
        stats = cell(name)
        stats.total, stats.done = int(total), int(done or 0)
        stats.questions = int(settled_questions or 0)
        stats.unanswered = stats.questions


def _fill_answer_counts(session: Session, run_id: int, cell: Any) -> None:
    stmt = (select(Decision.cell, func.count(Answer.id),
                   func.sum(case((Answer.label_mass < LOW_MASS, 1), else_=0)),
                   func.sum(case((Answer.argmax_is_label.is_(False), 1), else_=0)))
            .join(Decision, Decision.id == Answer.decision_id)
            .where(Answer.run_id == run_id, Decision.status.in_(SETTLED))
            .group_by(Decision.cell))
    for name, answered, low_mass, not_label in session.execute(stmt):
        stats = cell(name)
        stats.unanswered = max(stats.questions - int(answered), 0)
        stats.low_mass, stats.argmax_not_label = int(low_mass or 0), int(not_label or 0)


def _fill_failures(session: Session, run_id: int, cell: Any) -> None:
    stmt = (select(Decision.cell, Attempt.outcome, func.count())
            .join(Decision, Decision.id == Attempt.decision_id)
            .where(Attempt.run_id == run_id, Attempt.outcome != OutcomeKind.OK)
            .group_by(Decision.cell, Attempt.outcome))
    for name, outcome, n in session.execute(stmt):
        cell(name).failures[outcome] = int(n)


def _finished_since(session: Session, run_id: int, *since: datetime) -> tuple[int, ...]:
    """Done decisions finished at or after each of ``since``, in one query."""
    stmt = select(*(func.sum(case((Decision.finished_at >= t, 1), else_=0)) for t in since)
                  ).where(Decision.run_id == run_id, Decision.status == DecisionStatus.DONE)
    return tuple(int(n or 0) for n in session.execute(stmt).one())


#: the shortest span a rate is measured over (a first burst of answers is not a rate)
_MIN_SPAN_S = 1.0


def _active_spans(session: Session, run_id: int, now: datetime,
                  windows: Sequence[float]) -> tuple[float, ...]:
    """For each window (seconds back from ``now``): how long the run has been working in it,
    from the start of the earliest attempt that ended in the window (the window itself when
    the run worked all through it)."""
    began = func.coalesce(Attempt.started_at, Attempt.ended_at)
    since = [now - timedelta(seconds=w) for w in windows]
    stmt = select(*(func.min(case((Attempt.ended_at >= t, began), else_=None)) for t in since)
                  ).where(Attempt.run_id == run_id)
    spans = []
    for window, first in zip(windows, session.execute(stmt).one(), strict=True):
        start = _aware(first)
        span = window if start is None else min(window, (now - start).total_seconds())
        spans.append(max(span, _MIN_SPAN_S))
    return tuple(spans)


def _aware(value: Any) -> datetime | None:
    """A timestamp read back from SQL as an aware UTC datetime (SQLite returns naive ones, or
    text from an aggregate)."""
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


_NUMBER = re.compile(r"\d[\d,._]*")


def failure_reasons(session: Session, run_id: int, *, limit: int = 10) -> list[ReasonGroup]:
    """Why decisions ended failed or rejected, grouped by kind and reason (numbers blanked),
    most frequent first, each with one example message."""
    stmt = (select(Decision.last_error_kind, Decision.last_error, func.count())
            .where(Decision.run_id == run_id,
                   Decision.status.in_((DecisionStatus.FAILED, DecisionStatus.REJECTED)))
            .group_by(Decision.last_error_kind, Decision.last_error))
    groups: dict[tuple[str, str], list[Any]] = {}
    for kind, error, n in session.execute(stmt):
        text = (error or "no reason recorded").strip()
        key = (kind or "unknown", _NUMBER.sub("#", text))
        group = groups.setdefault(key, [0, text])
        group[0] += int(n)
    ranked = sorted(groups.items(), key=lambda item: (-item[1][0], item[0]))
    return [ReasonGroup(kind, count, example) for (kind, _), (count, example) in ranked[:limit]]


@dataclass(frozen=True)
class RunOverview:
    run: RunInfo
    counts: dict[str, int]

    def as_dict(self) -> dict[str, Any]:
        """As ``dreads runs --json`` and ``GET /v1/runs`` show it."""
        run = self.run
        return {"name": run.name, "status": run.status,
                "created": run.created_at.isoformat() if run.created_at else None,
                "settings": dict(run.settings), "settings_hash": run.settings_hash,
                "fingerprint": run.fingerprint, "upstream": run.upstream,
                "replicates": run.replicates, "counts": self.counts}


def list_runs(session: Session) -> list[RunOverview]:
    runs = [run_info(r) for r in session.scalars(select(Run).order_by(Run.id))]
    stmt = select(Decision.run_id, Decision.status, func.count()).group_by(
        Decision.run_id, Decision.status)
    rows: dict[int, list[tuple[str, int]]] = {}
    for run_id, status, n in session.execute(stmt):
        rows.setdefault(run_id, []).append((status, n))
    return [RunOverview(run=r, counts=_shown_counts(rows.get(r.id, []), r.status)) for r in runs]


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


def iter_export(session: Session, run_id: int) -> Iterator[dict[str, Any]]:
    """One dict per decision, streamed: its identity, status and per question the answer
    with every diagnostic and the expected label (None where unanswered)."""
    run_status = _run_status(session, run_id)
    rows = session.execute(_export_stmt(run_id))
    for _, group in groupby(rows, key=lambda r: r.id):
        yield _export_record(list(group), run_status)


def _export_record(rows: Sequence[Any], run_status: str) -> dict[str, Any]:
    first = rows[0]
    expected = first.payload.get("expected") or {}
    answers: dict[str, Any] = {
        qid: {"answered": False, "expected": expected.get(qid)}
        for qid in _payload_questions(first.payload)
    }
    for row in rows:
        if row.question_id is not None:
            answer = {name: getattr(row, name) for name in ANSWER_FIELDS}
            exp = row.expected if row.expected is not None else expected.get(row.question_id)
            answers[row.question_id] = {"answered": True, **answer, "expected": exp}
    return {"id": first.key, "cell": first.cell, "replicate": first.replicate,
            "status": shown_status(first.status, run_status),
            "error_kind": first.last_error_kind,
            "error": first.last_error, "answers": answers}


def is_settled(session: Session, run_id: int, *, count_failed: bool) -> bool:
    """No decision of the run is pending, queued or leased (nor failed, with
    ``count_failed``): resume has nothing to publish or repair. One probe of the open-rows
    index."""
    statuses = _OPEN if count_failed else ACTIVE
    stmt = select(Decision.id).where(Decision.run_id == run_id,
                                     Decision.status.in_(statuses)).limit(1)
    return session.execute(stmt).first() is None


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
