"""The report's reads: a run by name or id, its decisions and answers as plain column rows
(a run has tens of thousands), and per-cell read and attempt counts."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from app.store.models import Answer, Attempt, Decision, DecisionPayload, Draw, Run

__all__ = ["answer_rows", "attempt_counts_by_cell", "decision_rows", "find_run_by_ref",
           "read_counts_by_cell", "run_by_id"]

# Plain column rows, not ORM objects; ``app.report.load`` unpacks them in this order.
_ANSWER_COLUMNS = (
    Answer.decision_id, Answer.question_id, Answer.question_type, Answer.label, Answer.p_yes,
    Answer.probs, Answer.expected_level, Answer.label_mass, Answer.argmax_is_label,
    Answer.stderr, Answer.draws, Answer.stop_reason, Answer.expected,
)


def find_run_by_ref(session: Session, ref: str) -> Run | None:
    """The run named ``ref``, else the run whose id is ``ref`` (digits), else None."""
    if "\x00" in ref:  # no database stores one (PostgreSQL would fail): no such run
        return None
    run = session.scalars(select(Run).where(Run.name == ref)).first()
    if run is None and ref.isdigit():
        run = session.get(Run, int(ref))
    return run


def run_by_id(session: Session, run_id: int) -> Run | None:
    """The run with id ``run_id``, or None."""
    return session.get(Run, run_id)


def decision_rows(session: Session, run_id: int) -> Iterator[Any]:
    """(id, key, replicate, cell, payload, status, last_error_kind) of every decision of the
    run, by id (in this order: ``app.report.load`` unpacks them)."""
    query = (
        select(Decision.id, Decision.key, Decision.replicate, Decision.cell,
               DecisionPayload.payload, Decision.status, Decision.last_error_kind)
        .join(DecisionPayload, DecisionPayload.decision_id == Decision.id)
        .where(Decision.run_id == run_id)
        .order_by(Decision.id)
    )
    yield from session.execute(query)


def answer_rows(session: Session, run_id: int) -> Iterator[Any]:
    """Every answer of the run as a row of the answer columns the report reads."""
    yield from session.execute(select(*_ANSWER_COLUMNS).where(Answer.run_id == run_id))


def read_counts_by_cell(session: Session, run_id: int
                        ) -> Iterator[tuple[str | None, int, int, int, int, int]]:
    """Per cell: (cell, draws, label mass < 0.5, argmax not a label, draws with a known
    mass, draws with a known argmax); NULL diagnostics (a source that did not say) are not
    counted as low or wrong."""
    query = (
        select(
            Decision.cell,
            func.count(Draw.id),
            func.sum(case((Draw.label_mass < 0.5, 1), else_=0)),
            func.sum(case((Draw.argmax_is_label.is_(False), 1), else_=0)),
            func.count(Draw.label_mass),
            func.count(Draw.argmax_is_label),
        )
        .join(Decision, Decision.id == Draw.decision_id)
        .where(Decision.run_id == run_id)
        .group_by(Decision.cell)
    )
    for cell, n, low, bad, mass, label in session.execute(query):
        yield cell, int(n), int(low or 0), int(bad or 0), int(mass), int(label)


def attempt_counts_by_cell(session: Session, run_id: int
                           ) -> Iterator[tuple[str | None, str, int]]:
    """(cell, outcome kind, attempts) of the run."""
    query = (
        select(Decision.cell, Attempt.outcome, func.count(Attempt.id))
        .join(Decision, Decision.id == Attempt.decision_id)
        .where(Attempt.run_id == run_id)
        .group_by(Decision.cell, Attempt.outcome)
    )
    for cell, outcome, count in session.execute(query):
        yield cell, str(outcome), int(count)
