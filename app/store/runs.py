"""Runs and their decisions in SQL: creation with the settings check, bulk insert, and the
state changes of ``resume --retry-failed`` and ``cancel`` (the read-only views are in
``app.store.views``).

Repositories flush, never commit: the caller's ``session_scope`` owns the transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple

import orjson
from sqlalchemy import insert, select, update
from sqlalchemy.orm import Session

from app.engine import SettingChange, changed_settings, without_credentials
from app.errors import InputError, RunSettingsMismatch, StoreError
from app.store import dialects
from app.store.models import (
    Attempt,
    Decision,
    DecisionPayload,
    DecisionStatus,
    OutcomeKind,
    Run,
    RunStatus,
)
from app.store.records import RunInfo
from app.store.states import NOT_STARTED

__all__ = [
    "DecisionRow",
    "RunInfo",
    "ensure_run",
    "find_run",
    "first_of_each",
    "insert_decisions",
    "open_runs",
    "record_fingerprint",
    "record_rejections",
    "record_settings",
    "require_run",
    "reset_failed",
    "run_info",
]

_UNPUBLISHED = NOT_STARTED  #: what the sweeper may publish
_BATCH = 2000


class DecisionRow(NamedTuple):
    """One decision (one replicate) to insert (a named tuple: submit makes a million)."""

    key: str
    replicate: int
    cell: str | None
    line_no: int | None
    payload: Mapping[str, Any]
    n_questions: int
    rejected_reason: str | None = None
    content_hash: str | None = None  #: ``app.engine.content_digest`` of cell and payload


def run_info(run: Run) -> RunInfo:
    return RunInfo(id=run.id, name=run.name, status=run.status, settings=run.settings,
                   settings_hash=run.settings_hash, fingerprint=run.fingerprint,
                   upstream=without_credentials(run.upstream), engine=run.engine,
                   source=run.source,
                   replicates=run.replicates, created_at=run.created_at,
                   pause_kind=run.pause_kind, pause_reason=run.pause_reason,
                   paused_at=run.paused_at)


def _run_named(session: Session, name: str) -> Run | None:
    if "\x00" in name:  # no database stores one (PostgreSQL would fail): no such run
        return None
    return session.scalars(select(Run).where(Run.name == name)).one_or_none()


def find_run(session: Session, name: str) -> RunInfo | None:
    run = _run_named(session, name)
    return run_info(run) if run is not None else None


def require_run(session: Session, name: str) -> RunInfo:
    info = find_run(session, name)
    if info is None:
        raise InputError(f"no run named {name!r} in this database; `dreads runs` lists them")
    return info


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
    run = _run_named(session, name)
    if run is None:
        values: dict[str, Any] = {
            "name": name, "status": RunStatus.ACTIVE, "settings": dict(settings),
            "settings_hash": settings_hash, "upstream": without_credentials(upstream),
            "engine": engine,
            "source": source, "replicates": replicates}
        if fingerprint is not None:
            values["fingerprint"] = _json(fingerprint)
        new_id = session.execute(_CREATE_RUN[dialects.name(session)].values(**values)).scalar()
        run = session.get(Run, new_id) if new_id is not None else _run_named(session, name)
        if run is None:  # created and deleted again meanwhile
            raise StoreError(f"run {name!r} was deleted while this submission created it; "
                             "submit again")
        if new_id is not None:
            return run_info(run), True
        # another submission created it at the same time: it is found, as an existing run
    _check_same(run, settings, settings_hash, replicates)
    if dict(run.settings) != dict(settings):  # same hash: only the unhashed budget differs
        run.settings = dict(settings)
    if run.fingerprint is None and fingerprint is not None:
        run.fingerprint = _json(fingerprint)
    return run_info(run), False


#: A new run, or nothing when a concurrent submission created one of the same name (its
#: insert waited for that one to commit; the caller reads the run then).
_CREATE_RUN = dialects.insert_ignoring(Run, ["name"], returning=Run.id)


def _check_same(run: Run, settings: Mapping[str, Any], digest: str, replicates: int) -> None:
    """Raises ``RunSettingsMismatch`` with the settings that differ, by field name (each
    entry point words them for its user)."""
    diffs = [] if run.settings_hash == digest else changed_settings(run.settings, settings)
    if run.settings_hash != digest and not diffs:
        diffs = [SettingChange("settings_hash", run.settings_hash[:12], digest[:12])]
    if run.replicates != replicates:
        diffs.append(SettingChange("replicates", run.replicates, replicates))
    if diffs:
        raise RunSettingsMismatch(run=run.name, changes=diffs,
                                  situation="exists with other settings",
                                  advice="submit under a new run name, or repeat the run's "
                                  "own settings")


def _json(value: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return dict(value) if value is not None else None


def record_settings(session: Session, run_id: int, settings: Mapping[str, Any]) -> None:
    """Store new settings of a run whose hash they keep (a new endpoint budget)."""
    session.execute(update(Run).where(Run.id == run_id).values(settings=dict(settings)))


def record_fingerprint(session: Session, run_id: int, fingerprint: Mapping[str, Any]) -> None:
    session.execute(update(Run).where(Run.id == run_id).values(fingerprint=dict(fingerprint)))


#: What ``dreads submit`` sends per row (PostgreSQL: COPY into a temporary table); the rest of
#: a new row is the same for the whole batch and is filled in by the INSERT ... SELECT.
_COPIED = ("key", "replicate", "cell", "line_no", "payload", "n_questions", "rejected",
           "content_hash")
_STAGING = """CREATE TEMP TABLE IF NOT EXISTS dreads_incoming (
    key varchar(500), replicate int, cell varchar(200), line_no int, payload json,
    n_questions int, rejected text, content_hash varchar(32)) ON COMMIT DROP"""
# Queued rows are stamped with the database's clock (compared with the broker's epoch). The
# payloads go to their own table in the same statement, keyed by the ids the insert returns.
_FROM_STAGING = """
WITH fresh AS (
    INSERT INTO decisions (run_id, key, replicate, cell, line_no, n_questions, content_hash,
                           status, attempts, last_error_kind, last_error, finished_at,
                           enqueued_at)
    SELECT %(run_id)s, key, replicate, cell, line_no, n_questions, content_hash,
           CASE WHEN rejected IS NULL THEN %(status)s ELSE %(rejected)s END, 0,
           CASE WHEN rejected IS NOT NULL THEN %(rejected_kind)s END, rejected,
           CASE WHEN rejected IS NOT NULL THEN now() END,
           CASE WHEN rejected IS NULL AND %(status)s = %(queued)s THEN now() END
    FROM dreads_incoming
    ON CONFLICT (run_id, key, replicate) DO NOTHING
    RETURNING id, key, replicate
), payloads AS (
    INSERT INTO decision_payloads (decision_id, payload)
    SELECT fresh.id, incoming.payload FROM fresh
    JOIN dreads_incoming AS incoming USING (key, replicate)
)
SELECT id, key, replicate FROM fresh"""
BatchWriter = Callable[[Session, int, Sequence["DecisionRow"], str],
                       list[tuple[int, str, int]]]


def insert_decisions(
    session: Session, run_id: int, rows: Iterable[DecisionRow], *, batch_size: int = _BATCH,
    status: str = DecisionStatus.PENDING,
) -> list[tuple[int, DecisionRow]]:
    """Insert in batches; rows already there (same run, key, replicate) are skipped.

    ``status`` is what the readable rows start as: ``pending`` (nothing published for them),
    or ``queued`` when the caller publishes their messages right after this transaction
    commits (stamped now: no second write per row, and never a message whose rows are not
    queued yet). PostgreSQL: COPY into a temporary table, then one INSERT ... SELECT ... ON
    CONFLICT DO NOTHING per batch; SQLite: an executemany INSERT ... ON CONFLICT DO NOTHING.
    Returns (database id, row) of the rows actually inserted. Rejected rows (a template
    problem found at submit) get status ``rejected`` and a ``rejected`` attempt row. (A run
    new to its submission goes faster: ``app.store.bulk``.)
    """
    writer = _batch_writer(session)
    inserted: list[tuple[int, DecisionRow]] = []
    batch: list[DecisionRow] = []
    for row in rows:
        batch.append(row)
        if len(batch) >= batch_size:
            inserted += _write_batch(session, writer, run_id, batch, status)
            batch = []
    if batch:
        inserted += _write_batch(session, writer, run_id, batch, status)
    return inserted


def _batch_writer(session: Session) -> BatchWriter:
    name = dialects.name(session)
    if name == dialects.POSTGRESQL:
        return _copy_batch
    if name == dialects.SQLITE:
        return _insert_batch
    raise InputError(f"dreads stores runs in PostgreSQL or SQLite, not {name}")


def _write_batch(session: Session, writer: BatchWriter, run_id: int,
                 batch: Sequence[DecisionRow], status: str) -> list[tuple[int, DecisionRow]]:
    unique = first_of_each(batch)
    by_key = {(row.key, row.replicate): row for row in unique}
    won = [(rid, by_key[(key, rep)]) for rid, key, rep in writer(session, run_id, unique, status)]
    record_rejections(session, run_id, won)
    return won


def first_of_each(rows: Iterable[DecisionRow]) -> list[DecisionRow]:
    """The first row of each (key, replicate), in order (a line repeated within a batch)."""
    first: dict[tuple[str, int], DecisionRow] = {}
    for row in rows:
        first.setdefault((row.key, row.replicate), row)
    return list(first.values())


def record_rejections(session: Session, run_id: int,
                      written: Sequence[tuple[int, DecisionRow]]) -> None:
    """A ``rejected`` attempt row for each written row stored rejected (its template problem
    is the attempt's detail)."""
    rejected = [{"run_id": run_id, "decision_id": rid, "outcome": OutcomeKind.REJECTED,
                 "detail": row.rejected_reason, "worker": "submit", "n_reads": 0}
                for rid, row in written if row.rejected_reason is not None]
    if rejected:
        session.execute(insert(Attempt), rejected)


def _insert_batch(session: Session, run_id: int, batch: Sequence[DecisionRow],
                  status: str) -> list[tuple[int, str, int]]:
    stmt = dialects.insert_ignoring(
        Decision, ["run_id", "key", "replicate"],
        returning=(Decision.id, Decision.key, Decision.replicate))[dialects.SQLITE]
    now = datetime.now(UTC)
    values = [_row_values(run_id, row, status, now) for row in batch]
    # executemany: SQLAlchemy's "insertmanyvalues" batches it with one cached compile
    won = [(r[0], r[1], r[2]) for r in session.connection().execute(stmt, values)]
    by_key = {(row.key, row.replicate): row for row in batch}
    if won:
        session.execute(insert(DecisionPayload), [
            {"decision_id": did, "payload": dict(by_key[(key, rep)].payload)}
            for did, key, rep in won])
    return won


def _copy_batch(session: Session, run_id: int, batch: Sequence[DecisionRow],
                status: str) -> list[tuple[int, str, int]]:
    raw = dialects.driver_connection(session)
    dumps = orjson.dumps
    with raw.cursor() as cur:
        cur.execute(_STAGING)
        cur.execute("TRUNCATE dreads_incoming")
        with cur.copy(f"COPY dreads_incoming ({', '.join(_COPIED)}) FROM STDIN") as copy:
            write = copy.write_row
            for row in batch:
                write((row.key, row.replicate, row.cell, row.line_no,
                       dumps(row.payload).decode(), row.n_questions, row.rejected_reason,
                       row.content_hash))
        cur.execute(_FROM_STAGING, {
            "run_id": run_id, "status": status, "queued": DecisionStatus.QUEUED.value,
            "rejected": DecisionStatus.REJECTED.value,
            "rejected_kind": OutcomeKind.REJECTED.value})
        return [tuple(r) for r in cur.fetchall()]


def _row_values(run_id: int, row: DecisionRow, status: str, now: datetime) -> dict[str, Any]:
    rejected = row.rejected_reason is not None
    return {
        "run_id": run_id, "key": row.key, "replicate": row.replicate, "cell": row.cell,
        "line_no": row.line_no, "n_questions": row.n_questions,
        "content_hash": row.content_hash,
        "status": DecisionStatus.REJECTED if rejected else status,
        "attempts": 0, "last_error_kind": OutcomeKind.REJECTED if rejected else None,
        "last_error": row.rejected_reason,
        "finished_at": now if rejected else None,
        "enqueued_at": now if not rejected and status == DecisionStatus.QUEUED else None,
    }


def open_runs(session: Session, run_id: int | None = None) -> list[RunInfo]:
    """Active runs (or run ``run_id``) with at least one pending or queued decision: one
    probe of ``ix_decisions_open`` per run."""
    has_open = (select(Decision.id).where(Decision.run_id == Run.id,
                                          Decision.status.in_(_UNPUBLISHED)).limit(1).exists())
    stmt = select(Run).where(Run.status == RunStatus.ACTIVE, has_open).order_by(Run.id)
    if run_id is not None:
        stmt = stmt.where(Run.id == run_id)
    return [run_info(r) for r in session.scalars(stmt)]


def reset_failed(session: Session, run_id: int) -> int:
    """``failed`` -> ``pending`` with a fresh attempt budget (history stays in ``attempts``)."""
    result = session.execute(
        update(Decision)
        .where(Decision.run_id == run_id, Decision.status == DecisionStatus.FAILED)
        .values(status=DecisionStatus.PENDING, attempts=0, lease_owner=None, lease_token=None,
                lease_expires_at=None, finished_at=None)
    )
    return int(getattr(result, "rowcount", 0) or 0)
