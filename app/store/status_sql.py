"""The run list and a run's status as plain SQL, over any ``Reader``.

One text per query, the same on PostgreSQL and SQLite, and one function turning its rows into
what the commands show. Two readers run them: a SQLAlchemy session (``app.store.views``, for
the API, the metrics and the live page) and a bare DB-API connection (``app.store.plain``),
which lets ``dreads status`` and ``dreads runs`` answer without loading SQLAlchemy.

    report = run_status(reader, find_run(reader, "r1"))
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import orjson

from app.engine import redacted_values, without_credentials
from app.errors import INFRASTRUCTURE_KINDS, OutcomeKind
from app.store.infrastructure import InfrastructureEvents, infrastructure_events
from app.store.records import DecisionStatus, RunInfo
from app.store.spend_sql import RunSpendTotals, all_spend, run_spend
from app.store.states import (
    OPEN,
    RunState,
    has_ended,
    pause_view,
    quoted,
    run_state,
    settled_statuses,
    shown_status,
    unanswered_count,
)

__all__ = ["LOW_MASS", "CellStats", "Reader", "ReasonGroup", "RunOverview", "RunStatusReport",
           "aware", "cell_key", "cell_stats", "failure_reasons", "find_run", "is_settled",
           "list_runs", "run_from_row", "run_status", "status_counts"]

#: An answer whose label mass is below this is counted as low mass.
LOW_MASS = 0.5
#: The shortest span a rate is measured over (a first burst of answers is not a rate).
_MIN_SPAN_S = 1.0


class Reader(Protocol):
    """Runs one SQL text with ``:name`` parameters and returns its rows."""

    @property
    def dialect(self) -> str:
        """``postgresql`` or ``sqlite``."""

    def rows(self, sql: str, params: Mapping[str, Any]) -> Sequence[Sequence[Any]]: ...


_ENDED_BADLY = quoted((DecisionStatus.FAILED, DecisionStatus.REJECTED))
_RUN_COLUMNS = ("id, name, status, settings, settings_hash, fingerprint, upstream, engine, "
                "source, replicates, created_at, pause_kind, pause_reason, paused_at")

FIND_RUN = f"SELECT {_RUN_COLUMNS} FROM runs WHERE name = :name"
ALL_RUNS = f"SELECT {_RUN_COLUMNS} FROM runs ORDER BY id"
COUNTS_BY_RUN = "SELECT run_id, status, count(*) FROM decisions GROUP BY run_id, status"
COUNTS = "SELECT status, count(*) FROM decisions WHERE run_id = :run GROUP BY status"
#: Per cell: decisions, done, questions of settled decisions (``{settled}``: the statuses
#: ``states.settled_statuses`` gives for the run).
CELL_DECISIONS = f"""
SELECT cell, count(*),
       sum(CASE WHEN status = '{DecisionStatus.DONE}' THEN 1 ELSE 0 END),
       sum(CASE WHEN status IN ({{settled}}) THEN n_questions ELSE 0 END)
FROM decisions WHERE run_id = :run GROUP BY cell"""
#: Per cell: answers of settled decisions, low mass, argmax not a label.
CELL_ANSWERS = """
SELECT d.cell, count(a.id),
       sum(CASE WHEN a.label_mass < :low_mass THEN 1 ELSE 0 END),
       sum(CASE WHEN a.argmax_is_label IS FALSE THEN 1 ELSE 0 END)
FROM answers AS a JOIN decisions AS d ON d.id = a.decision_id
WHERE a.run_id = :run AND d.status IN ({settled}) GROUP BY d.cell"""
#: Per cell: failed attempts of the read's own kinds (the infrastructure's are the run's, not a
#: cell's: ``app.store.infrastructure``).
CELL_FAILURES = f"""
SELECT d.cell, a.outcome, count(*)
FROM attempts AS a JOIN decisions AS d ON d.id = a.decision_id
WHERE a.run_id = :run AND a.outcome <> '{OutcomeKind.OK}'
  AND a.outcome NOT IN ({quoted(INFRASTRUCTURE_KINDS)}) GROUP BY d.cell, a.outcome"""
FINISHED_SINCE = f"""
SELECT sum(CASE WHEN finished_at >= :since_1m THEN 1 ELSE 0 END),
       sum(CASE WHEN finished_at >= :since_5m THEN 1 ELSE 0 END)
FROM decisions WHERE run_id = :run AND status = '{DecisionStatus.DONE}'"""
#: For each window, the start of the earliest attempt that ended in it.
ACTIVE_SINCE = """
SELECT min(CASE WHEN ended_at >= :since_1m THEN coalesce(started_at, ended_at) END),
       min(CASE WHEN ended_at >= :since_5m THEN coalesce(started_at, ended_at) END)
FROM attempts WHERE run_id = :run"""
REASONS = f"""
SELECT last_error_kind, last_error, count(*) FROM decisions
WHERE run_id = :run AND status IN ({_ENDED_BADLY}) GROUP BY last_error_kind, last_error"""
#: One probe of the open-rows index (``ix_decisions_open``).
ANY_OPEN = "SELECT 1 FROM decisions WHERE run_id = :run AND status IN ({statuses}) LIMIT 1"


@dataclass
class CellStats:
    """What went wrong (and right) in one cell."""

    cell: str
    total: int = 0
    done: int = 0
    questions: int = 0  #: questions of settled decisions
    unanswered: int = 0  #: of those, questions with no answer (``states``)
    failures: dict[str, int] = field(default_factory=dict)  #: the read's failed attempts by kind
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
    spend: RunSpendTotals = field(default_factory=RunSpendTotals)
    #: what the infrastructure did to the run: never a cell's
    infrastructure: InfrastructureEvents = field(default_factory=InfrastructureEvents)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def state(self) -> RunState:
        return run_state(self.run.status, self.counts)

    @property
    def remaining(self) -> int:
        return sum(self.counts.get(s, 0) for s in OPEN)

    @property
    def unanswered(self) -> int:
        return sum(c.unanswered for c in self.cells)

    @property
    def ended(self) -> bool:
        """Nothing about the run changes any more (``states.has_ended``)."""
        return has_ended(self.state, self.remaining)

    @property
    def rate_per_s(self) -> float:
        """Decisions finished per second of work over the last 5 minutes (the last minute when
        busier); a run that started 10 s ago is measured over those 10 s, not over 60."""
        return max(self.finished_1m / self.active_1m_s, self.finished_5m / self.active_5m_s)

    @property
    def eta_s(self) -> float | None:
        """Seconds left at the current rate; None while nothing finishes (a paused run)."""
        if self.remaining == 0:
            return 0.0
        if self.state is RunState.PAUSED:
            return None
        return self.remaining / self.rate_per_s if self.rate_per_s > 0 else None

    @property
    def spend_line(self) -> str:
        """What the run spent so far and its projected total, in a line."""
        return self.spend.line(self.counts.get(DecisionStatus.DONE, 0), self.total)

    @property
    def pause(self) -> dict[str, Any] | None:
        """Why the run is paused (``pause_view``), or None."""
        return pause_view(self.run, self.state)

    def as_dict(self) -> dict[str, Any]:
        return {"run": self.run.name, "status": self.state.value, "paused": self.pause,
                "simulator": self.run.simulator, "total": self.total,
                "counts": dict(sorted(self.counts.items())), "remaining": self.remaining,
                "unanswered": self.unanswered,
                "finished_last_1m": self.finished_1m, "finished_last_5m": self.finished_5m,
                "rate_per_s": round(self.rate_per_s, 3), "eta_s": self.eta_s,
                "cells": [c.as_dict() for c in self.cells],
                "reasons": [r.as_dict() for r in self.reasons],
                "infrastructure": self.infrastructure.as_dict(),
                "spend": self.spend.as_dict(done=self.counts.get(DecisionStatus.DONE, 0),
                                            total=self.total)}


@dataclass(frozen=True)
class RunOverview:
    run: RunInfo
    counts: dict[str, int]
    spend: RunSpendTotals = field(default_factory=RunSpendTotals)

    @property
    def state(self) -> RunState:
        return run_state(self.run.status, self.counts)

    def as_dict(self) -> dict[str, Any]:
        """As ``dreads runs --json`` and ``GET /v1/runs`` show it."""
        run = self.run
        return {"name": run.name, "status": self.state.value,
                "paused": pause_view(run, self.state),
                "created": run.created_at.isoformat() if run.created_at else None,
                "settings": redacted_values(run.settings), "settings_hash": run.settings_hash,
                "fingerprint": run.fingerprint, "upstream": run.upstream,
                "simulator": run.simulator, "replicates": run.replicates, "counts": self.counts,
                "spend": self.spend.as_dict(done=self.counts.get(DecisionStatus.DONE, 0),
                                            total=sum(self.counts.values()))}


def run_from_row(row: Sequence[Any]) -> RunInfo:
    """A ``runs`` row of ``_RUN_COLUMNS`` as a ``RunInfo`` (JSON and times as the driver
    returns them: text on SQLite)."""
    (run_id, name, status, settings, digest, fingerprint, upstream, engine, source,
     replicates, created_at, pause_kind, pause_reason, paused_at) = row
    return RunInfo(id=int(run_id), name=name, status=status, settings=_json(settings) or {},
                   settings_hash=digest, fingerprint=_json(fingerprint),
                   upstream=without_credentials(upstream),
                   engine=engine, source=source, replicates=int(replicates),
                   created_at=_parsed(created_at), pause_kind=pause_kind,
                   pause_reason=pause_reason, paused_at=_parsed(paused_at))


def find_run(reader: Reader, name: str) -> RunInfo | None:
    found = reader.rows(FIND_RUN, {"name": name})
    return run_from_row(found[0]) if found else None


def list_runs(reader: Reader) -> list[RunOverview]:
    runs = [run_from_row(row) for row in reader.rows(ALL_RUNS, {})]
    rows: dict[int, list[tuple[str, int]]] = {}
    for run_id, status, n in reader.rows(COUNTS_BY_RUN, {}):
        rows.setdefault(int(run_id), []).append((status, n))
    spend = all_spend(reader)
    return [RunOverview(run=r, counts=_shown_counts(rows.get(r.id, []), r.status),
                        spend=spend.get(r.id, RunSpendTotals())) for r in runs]


def status_counts(reader: Reader, run: RunInfo) -> dict[str, int]:
    """Decisions of the run by status, as a user sees them (``shown_status``)."""
    return _shown_counts(reader.rows(COUNTS, {"run": run.id}), run.status)


def is_settled(reader: Reader, run_id: int, *, count_failed: bool) -> bool:
    """No decision of the run is pending, queued or leased (nor failed, with
    ``count_failed``): resume has nothing to publish or repair."""
    statuses = (*OPEN, DecisionStatus.FAILED) if count_failed else OPEN
    return not reader.rows(ANY_OPEN.format(statuses=quoted(statuses)), {"run": run_id})


def run_status(reader: Reader, run: RunInfo, *, now: datetime | None = None) -> RunStatusReport:
    """Counts by status, per-cell diagnostics and throughput, from SQL only."""
    now = now or datetime.now(UTC)
    params = {"run": run.id}
    windows = {"since_1m": now - timedelta(minutes=1), "since_5m": now - timedelta(minutes=5)}
    stamps = {key: _stamp(reader, moment) for key, moment in windows.items()}
    finished_1m, finished_5m = (int(n or 0) for n in
                                reader.rows(FINISHED_SINCE, {**params, **stamps})[0])
    firsts = reader.rows(ACTIVE_SINCE, {**params, **stamps})[0]
    active_1m, active_5m = (_span(now, window, first)
                            for window, first in zip((60.0, 300.0), firsts, strict=True))
    return RunStatusReport(
        run=run, counts=status_counts(reader, run), cells=cell_stats(reader, run),
        finished_1m=finished_1m, finished_5m=finished_5m, active_1m_s=active_1m,
        active_5m_s=active_5m, reasons=failure_reasons(reader, run.id),
        spend=run_spend(reader, run.id), infrastructure=infrastructure_events(reader, run.id))


def cell_stats(reader: Reader, run: RunInfo) -> list[CellStats]:
    """Per cell, by name: decisions, done, questions of settled decisions and those with no
    answer (``states``), the read's failed attempts by kind, low mass, argmax not a label."""
    cells: dict[str, CellStats] = {}

    def cell(name: str | None) -> CellStats:
        return cells.setdefault(cell_key(name), CellStats(cell=cell_key(name)))

    params = {"run": run.id}
    settled = quoted(settled_statuses(run.status))
    for name, total, done, settled_questions in reader.rows(
            CELL_DECISIONS.format(settled=settled), params):
        stats = cell(name)
        stats.total, stats.done = int(total), int(done or 0)
        stats.questions = stats.unanswered = int(settled_questions or 0)
    for name, answered, low_mass, not_label in reader.rows(
            CELL_ANSWERS.format(settled=settled), {**params, "low_mass": LOW_MASS}):
        stats = cell(name)
        stats.unanswered = unanswered_count(settled_questions=stats.questions,
                                            answered=int(answered))
        stats.low_mass, stats.argmax_not_label = int(low_mass or 0), int(not_label or 0)
    for name, outcome, n in reader.rows(CELL_FAILURES, params):
        cell(name).failures[outcome] = int(n)
    return [cells[k] for k in sorted(cells)]


_NUMBER = re.compile(r"\d[\d,._]*")


def failure_reasons(reader: Reader, run_id: int, *, limit: int = 10) -> list[ReasonGroup]:
    """Why decisions ended failed or rejected, grouped by kind and reason (numbers blanked),
    most frequent first, each with one example message."""
    groups: dict[tuple[str, str], list[Any]] = {}
    for kind, error, n in reader.rows(REASONS, {"run": run_id}):
        text = (error or "no reason recorded").strip()
        key = (kind or "unknown", _NUMBER.sub("#", text))
        group = groups.setdefault(key, [0, text])
        group[0] += int(n)
    ranked = sorted(groups.items(), key=lambda item: (-item[1][0], item[0]))
    return [ReasonGroup(kind, count, example) for (kind, _), (count, example) in ranked[:limit]]


def cell_key(cell: str | None) -> str:
    """A decision's cell as shown: "-" for none."""
    return cell if cell is not None else "-"


def _shown_counts(rows: Iterable[Sequence[Any]], run_status: str) -> dict[str, int]:
    """``(status, count)`` rows as a user sees them: a cancelled run's not started rows are
    counted cancelled (``shown_status``)."""
    counts: dict[str, int] = {}
    for status, n in rows:
        shown = shown_status(status, run_status)
        counts[shown] = counts.get(shown, 0) + int(n)
    return counts


def _span(now: datetime, window: float, first: Any) -> float:
    """How long the run has been working in a window: from the start of its earliest attempt
    that ended in it (the window itself when it worked all through it)."""
    start = aware(first)
    span = window if start is None else min(window, (now - start).total_seconds())
    return max(span, _MIN_SPAN_S)


def _stamp(reader: Reader, moment: datetime) -> Any:
    """A timestamp parameter as the column holds it: aware on PostgreSQL; on SQLite the UTC
    text SQLAlchemy writes there, which compares as text."""
    if reader.dialect == "postgresql":
        return moment
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


def _parsed(value: Any) -> datetime | None:
    """A timestamp as the ORM reads it back (SQLite's text parsed, naive as it was stored)."""
    return datetime.fromisoformat(value) if isinstance(value, str) else value


def aware(value: Any) -> datetime | None:
    """A timestamp read back from SQL as an aware UTC datetime (SQLite returns text)."""
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _json(value: Any) -> dict[str, Any] | None:
    """A JSON column as the driver returns it: parsed on PostgreSQL, text on SQLite."""
    if isinstance(value, str | bytes):
        value = orjson.loads(value)
    return dict(value) if value is not None else None
