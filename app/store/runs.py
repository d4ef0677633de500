"""Runs and their decisions in SQL: creation with the settings check, bulk insert, and the
read-only queries behind ``dreads runs``, ``status``, ``export`` and the embedded summary.

Repositories flush, never commit: the caller's ``session_scope`` owns the transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import groupby
from typing import Any

import orjson
from sqlalchemy import Select, and_, case, func, insert, select, update
from sqlalchemy.dialects import sqlite
from sqlalchemy.orm import Session

from app.engine import ServerFingerprint
from app.errors import InputError, RunSettingsMismatch
from app.store.models import Answer, Attempt, Decision, DecisionStatus, OutcomeKind, Run, RunStatus

__all__ = [
    "ANSWER_FIELDS",
    "CellStats",
    "DecisionRow",
    "RunInfo",
    "RunOverview",
    "RunStatusReport",
    "cancel_run",
    "compare_fingerprint",
    "compare_settings",
    "ensure_run",
    "find_run",
    "insert_decisions",
    "iter_export",
    "list_runs",
    "pending_ids",
    "question_ids",
    "record_fingerprint",
    "require_run",
    "reset_failed",
    "resume_preview",
    "run_status",
    "status_counts",
]

ACTIVE = (DecisionStatus.PENDING, DecisionStatus.QUEUED, DecisionStatus.LEASED)
SETTLED = (DecisionStatus.DONE, DecisionStatus.FAILED, DecisionStatus.REJECTED)
#: Answer columns exported per question, in order.
ANSWER_FIELDS = (
    "label", "option", "probs", "p_yes", "expected_level", "confidence", "top_prob", "stderr",
    "agreement", "draws", "stop_reason", "label_mass", "min_label_mass", "argmax_is_label",
    "entropy",
)
LOW_MASS = 0.5
_BATCH = 2000


@dataclass(frozen=True)
class RunInfo:
    """A run as the commands see it."""

    id: int
    name: str
    status: str
    settings: Mapping[str, Any]
    settings_hash: str
    fingerprint: Mapping[str, Any] | None
    upstream: str
    engine: str
    source: str | None
    replicates: int
    created_at: datetime | None


@dataclass(frozen=True)
class DecisionRow:
    """One decision (one replicate) to insert."""

    key: str
    replicate: int
    cell: str | None
    line_no: int | None
    payload: Mapping[str, Any]
    n_questions: int
    rejected_reason: str | None = None


def _info(run: Run) -> RunInfo:
    return RunInfo(id=run.id, name=run.name, status=run.status, settings=run.settings,
                   settings_hash=run.settings_hash, fingerprint=run.fingerprint,
                   upstream=run.upstream, engine=run.engine, source=run.source,
                   replicates=run.replicates, created_at=run.created_at)


def find_run(session: Session, name: str) -> RunInfo | None:
    run = session.scalars(select(Run).where(Run.name == name)).one_or_none()
    return _info(run) if run is not None else None


def require_run(session: Session, name: str) -> RunInfo:
    info = find_run(session, name)
    if info is None:
        raise InputError(f"no run named {name!r} in this database; `dreads runs` lists them")
    return info


def compare_settings(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """Human-readable differences ``name: old -> new`` between two settings dicts."""
    names = sorted(set(old) | set(new))
    return [f"{n}: {old.get(n)!r} -> {new.get(n)!r}" for n in names if old.get(n) != new.get(n)]


def compare_fingerprint(old: Mapping[str, Any] | None, new: ServerFingerprint) -> list[str]:
    """Differences that make a run's earlier answers incomparable: model id, canvas length."""
    if not old:
        return []
    diffs = []
    for name in ("model_id", "canvas_length"):
        if old.get(name) != getattr(new, name):
            diffs.append(f"{name}: {old.get(name)!r} -> {getattr(new, name)!r}")
    return diffs


def ensure_run(
    session: Session,
    *,
    name: str,
    settings: Mapping[str, Any],
    settings_hash: str,
    upstream: str,
    engine: str,
    source: str | None,
    replicates: int,
    fingerprint: Mapping[str, Any] | None,
) -> tuple[RunInfo, bool]:
    """The run ``name``, created if new. Returns (run, created).

    Raises:
        RunSettingsMismatch: the run exists with other settings or another replicate count.
    """
    run = session.scalars(select(Run).where(Run.name == name)).one_or_none()
    if run is None:
        run = Run(name=name, status=RunStatus.ACTIVE, settings=dict(settings),
                  settings_hash=settings_hash, fingerprint=_json(fingerprint), upstream=upstream,
                  engine=engine, source=source, replicates=replicates)
        session.add(run)
        session.flush()
        return _info(run), True
    _check_same(run, settings, settings_hash, replicates)
    if run.fingerprint is None and fingerprint is not None:
        run.fingerprint = _json(fingerprint)
    return _info(run), False


def _check_same(run: Run, settings: Mapping[str, Any], digest: str, replicates: int) -> None:
    diffs = [] if run.settings_hash == digest else compare_settings(run.settings, settings)
    if run.settings_hash != digest and not diffs:
        diffs = [f"settings hash {run.settings_hash[:12]} -> {digest[:12]}"]
    if run.replicates != replicates:
        diffs.append(f"replicates: {run.replicates} -> {replicates}")
    if diffs:
        raise RunSettingsMismatch(
            f"run {run.name!r} exists with other settings ({'; '.join(diffs)}); "
            "submit under a new --run name, or repeat the run's own settings"
        )


def _json(value: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return dict(value) if value is not None else None


def record_fingerprint(session: Session, run_id: int, fingerprint: Mapping[str, Any]) -> None:
    session.execute(update(Run).where(Run.id == run_id).values(fingerprint=dict(fingerprint)))


_COLUMNS = ("run_id", "key", "replicate", "cell", "line_no", "payload", "n_questions", "status",
            "attempts", "last_error_kind", "last_error", "finished_at")
_STAGING = """CREATE TEMP TABLE IF NOT EXISTS dreads_incoming (
    run_id bigint, key varchar(500), replicate int, cell varchar(200), line_no int,
    payload json, n_questions int, status varchar(16), attempts int,
    last_error_kind varchar(32), last_error text, finished_at timestamptz) ON COMMIT DROP"""
_FROM_STAGING = (f"INSERT INTO decisions ({', '.join(_COLUMNS)}) "
                 f"SELECT {', '.join(_COLUMNS)} FROM dreads_incoming "
                 "ON CONFLICT (run_id, key, replicate) DO NOTHING RETURNING id, key, replicate")
BatchWriter = Callable[[Session, int, Sequence["DecisionRow"]], list[tuple[int, str, int]]]


def insert_decisions(
    session: Session, run_id: int, rows: Iterable[DecisionRow], *, batch_size: int = _BATCH
) -> list[tuple[int, DecisionRow]]:
    """Insert in batches; rows already there (same run, key, replicate) are skipped.

    PostgreSQL: COPY into a temporary table, then one INSERT ... SELECT ... ON CONFLICT DO
    NOTHING per batch; SQLite: an executemany INSERT ... ON CONFLICT DO NOTHING.
    Returns (database id, row) of the rows actually inserted. Rejected rows (a template
    problem found at submit) get status ``rejected`` and a ``rejected`` attempt row.
    """
    writer = _batch_writer(session)
    inserted: list[tuple[int, DecisionRow]] = []
    batch: list[DecisionRow] = []
    for row in rows:
        batch.append(row)
        if len(batch) >= batch_size:
            inserted += _write_batch(session, writer, run_id, batch)
            batch = []
    if batch:
        inserted += _write_batch(session, writer, run_id, batch)
    return inserted


def _batch_writer(session: Session) -> BatchWriter:
    name = session.get_bind().dialect.name
    if name == "postgresql":
        return _copy_batch
    if name == "sqlite":
        return _insert_batch
    raise InputError(f"dreads stores runs in PostgreSQL or SQLite, not {name}")


def _write_batch(session: Session, writer: BatchWriter, run_id: int,
                 batch: Sequence[DecisionRow]) -> list[tuple[int, DecisionRow]]:
    by_key = {(row.key, row.replicate): row for row in batch}
    won = [(rid, by_key[(key, rep)]) for rid, key, rep in writer(session, run_id, batch)]
    rejected = [{"run_id": run_id, "decision_id": rid, "outcome": OutcomeKind.REJECTED,
                 "detail": row.rejected_reason, "worker": "submit", "n_reads": 0}
                for rid, row in won if row.rejected_reason is not None]
    if rejected:
        session.execute(insert(Attempt), rejected)
    return won


def _insert_batch(session: Session, run_id: int,
                  batch: Sequence[DecisionRow]) -> list[tuple[int, str, int]]:
    stmt = (sqlite.insert(Decision)
            .on_conflict_do_nothing(index_elements=["run_id", "key", "replicate"])
            .returning(Decision.id, Decision.key, Decision.replicate))
    values = [_row_values(run_id, row) for row in batch]
    # executemany: SQLAlchemy's "insertmanyvalues" batches it with one cached compile
    return [(r[0], r[1], r[2]) for r in session.connection().execute(stmt, values)]


def _copy_batch(session: Session, run_id: int,
                batch: Sequence[DecisionRow]) -> list[tuple[int, str, int]]:
    raw = session.connection().connection.driver_connection
    assert raw is not None
    with raw.cursor() as cur:
        cur.execute(_STAGING)
        cur.execute("TRUNCATE dreads_incoming")
        with cur.copy(f"COPY dreads_incoming ({', '.join(_COLUMNS)}) FROM STDIN") as copy:
            for row in batch:
                values = _row_values(run_id, row)
                values["payload"] = orjson.dumps(values["payload"]).decode()
                copy.write_row([values[c] for c in _COLUMNS])
        cur.execute(_FROM_STAGING)
        return [tuple(r) for r in cur.fetchall()]


def _row_values(run_id: int, row: DecisionRow) -> dict[str, Any]:
    rejected = row.rejected_reason is not None
    return {
        "run_id": run_id, "key": row.key, "replicate": row.replicate, "cell": row.cell,
        "line_no": row.line_no, "payload": dict(row.payload), "n_questions": row.n_questions,
        "status": DecisionStatus.REJECTED if rejected else DecisionStatus.PENDING,
        "attempts": 0, "last_error_kind": OutcomeKind.REJECTED if rejected else None,
        "last_error": row.rejected_reason,
        "finished_at": datetime.now(UTC) if rejected else None,
    }


def pending_ids(session: Session, run_id: int) -> list[int]:
    stmt = (select(Decision.id).where(Decision.run_id == run_id,
                                      Decision.status == DecisionStatus.PENDING)
            .order_by(Decision.id))
    return list(session.scalars(stmt))


def reset_failed(session: Session, run_id: int) -> int:
    """``failed`` -> ``pending`` with a fresh attempt budget (history stays in ``attempts``)."""
    result = session.execute(
        update(Decision)
        .where(Decision.run_id == run_id, Decision.status == DecisionStatus.FAILED)
        .values(status=DecisionStatus.PENDING, attempts=0, lease_owner=None, lease_token=None,
                lease_expires_at=None, finished_at=None)
    )
    return int(getattr(result, "rowcount", 0) or 0)


def cancel_run(session: Session, run_id: int) -> int:
    """Mark the run cancelled; its decisions not yet settled become ``cancelled``."""
    session.execute(update(Run).where(Run.id == run_id).values(status=RunStatus.CANCELLED))
    result = session.execute(
        update(Decision)
        .where(Decision.run_id == run_id, Decision.status.in_(ACTIVE))
        .values(status=DecisionStatus.CANCELLED, lease_owner=None, lease_token=None,
                lease_expires_at=None, finished_at=datetime.now(UTC))
    )
    return int(getattr(result, "rowcount", 0) or 0)


def status_counts(session: Session, run_id: int) -> dict[str, int]:
    stmt = (select(Decision.status, func.count()).where(Decision.run_id == run_id)
            .group_by(Decision.status))
    return {status: int(n) for status, n in session.execute(stmt)}


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
class RunStatusReport:
    run: RunInfo
    counts: dict[str, int]
    cells: list[CellStats]
    finished_1m: int
    finished_5m: int

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def remaining(self) -> int:
        return sum(self.counts.get(s, 0) for s in ACTIVE)

    @property
    def rate_per_s(self) -> float:
        """Decisions finished per second over the last 5 minutes (1 minute when busier)."""
        return max(self.finished_1m / 60.0, self.finished_5m / 300.0)

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
                "cells": [c.as_dict() for c in self.cells]}


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
    return RunStatusReport(
        run=run, counts=status_counts(session, run.id),
        cells=[cells[k] for k in sorted(cells)],
        finished_1m=_finished_since(session, run.id, now - timedelta(minutes=1)),
        finished_5m=_finished_since(session, run.id, now - timedelta(minutes=5)),
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


def _finished_since(session: Session, run_id: int, since: datetime) -> int:
    stmt = select(func.count()).where(Decision.run_id == run_id,
                                      Decision.status == DecisionStatus.DONE,
                                      Decision.finished_at >= since)
    return int(session.scalar(stmt) or 0)


@dataclass(frozen=True)
class RunOverview:
    run: RunInfo
    counts: dict[str, int]


def list_runs(session: Session) -> list[RunOverview]:
    runs = [_info(r) for r in session.scalars(select(Run).order_by(Run.id))]
    stmt = select(Decision.run_id, Decision.status, func.count()).group_by(
        Decision.run_id, Decision.status)
    counts: dict[int, dict[str, int]] = {}
    for run_id, status, n in session.execute(stmt):
        counts.setdefault(run_id, {})[status] = int(n)
    return [RunOverview(run=r, counts=counts.get(r.id, {})) for r in runs]


def question_ids(session: Session, run_id: int) -> list[str]:
    """Every question id of the run's decisions, in first-seen order (streams payloads)."""
    seen: dict[str, None] = {}
    stmt = (select(Decision.payload).where(Decision.run_id == run_id, Decision.replicate == 0)
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
                   Decision.payload, Answer.question_id, Answer.expected, *answer_cols)
            .outerjoin(Answer, and_(Answer.decision_id == Decision.id))
            .where(Decision.run_id == run_id)
            .order_by(Decision.id, Answer.id)
            .execution_options(yield_per=1000))


def iter_export(session: Session, run_id: int) -> Iterator[dict[str, Any]]:
    """One dict per decision, streamed: its identity, status and per question the answer
    with every diagnostic and the expected label (None where unanswered)."""
    rows = session.execute(_export_stmt(run_id))
    for _, group in groupby(rows, key=lambda r: r.id):
        yield _export_record(list(group))


def _export_record(rows: Sequence[Any]) -> dict[str, Any]:
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
            "status": first.status, "error_kind": first.last_error_kind,
            "error": first.last_error, "answers": answers}


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
    ).where(Decision.run_id == run_id)
    row = session.execute(stmt).one()
    names = ("expired_leases", "failed", "pending", "stale_queued")
    return {name: int(value or 0) for name, value in zip(names, row, strict=True)}
