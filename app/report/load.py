"""SQL -> report rows: one row per (decision, question), answered or not, plus per-cell counts.

The report reads SQL only. Questions and expected labels come from the decision payload, read
by ``app.engine.decision_from_payload`` as at submit (canvas labels: ``yes``/``no``, ``A``..,
``1``..), with the answer's ``expected`` column as a fallback, read as ``expected`` is
(``answer_label``: a label, an option name, yes/no words).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import orjson

from app.engine import Question, decision_from_payload, kind_named
from app.engine.questions import answer_label
from app.errors import InputError, OutcomeKind
from app.images import StoredImage, stored_images
from app.store.models import Run
from app.store.report_rows import (
    answer_rows,
    attempt_counts_by_cell,
    decision_rows,
    find_run_by_ref,
    read_counts_by_cell,
)
from app.store.states import OPEN, RunState, is_unanswered, run_state, shown_status
from app.store.types import Session

__all__ = [
    "IN_FLIGHT",
    "CellCounts",
    "QuestionRow",
    "RunRows",
    "load_run_rows",
    "resolve_run",
]

NO_CELL = "(none)"
#: decision statuses whose answers may still come
IN_FLIGHT = frozenset(OPEN)


@dataclass(slots=True)
class QuestionRow:
    """One question of one decision (one replicate), with its answer if there is one.

    Treated as immutable (``dataclasses.replace`` makes a changed copy); not frozen, because a
    report makes a million of them and a frozen dataclass's ``__init__`` costs four times as
    much."""

    decision_key: str
    replicate: int
    cell: str
    state_key: str  #: canonical JSON of the state: counts distinct states
    status: str  #: decision status
    question_id: str
    question_type: str
    labels: tuple[str, ...]
    expected: str | None  #: canvas label, None when not given or not recognised
    answered: bool
    label: str | None = None
    p_yes: float | None = None
    probs: Mapping[str, float] | None = None
    expected_level: float | None = None
    label_mass: float | None = None
    argmax_is_label: bool | None = None
    stderr: float | None = None
    draws: int | None = None
    stop_reason: str | None = None
    #: the decision's images as stored at submit (reference, sha256); () for text
    images: tuple[StoredImage, ...] = ()
    #: why the decision last failed (``OutcomeKind``), None when it never did
    error_kind: str | None = None

    def with_p_yes(self, p_yes: float) -> QuestionRow:
        """A copy with another P(yes) (a calibrated one): ``dataclasses.replace``'s result,
        made a few times faster (a report calibrates a million rows)."""
        return QuestionRow(
            self.decision_key, self.replicate, self.cell, self.state_key, self.status,
            self.question_id, self.question_type, self.labels, self.expected, self.answered,
            self.label, p_yes, self.probs, self.expected_level, self.label_mass,
            self.argmax_is_label, self.stderr, self.draws, self.stop_reason, self.images,
            self.error_kind)

    @property
    def unanswered(self) -> bool:
        """No answer and none coming: the decision is settled (``states.is_unanswered``)."""
        return not self.answered and is_unanswered(answered=False, shown=self.status)

    @property
    def in_flight(self) -> bool:
        """No answer yet, but the decision is still pending, queued or leased."""
        return not self.answered and self.status in IN_FLIGHT


@dataclass(frozen=True)
class CellCounts:
    """Per-cell counts from the draws and attempts tables."""

    draw_rows: int = 0  #: draws: one question read once (a joint read gives one per question)
    low_mass_draws: int = 0  #: label mass below 0.5
    argmax_not_label_draws: int = 0
    attempts: int = 0
    failures: Mapping[str, int] | None = None  #: outcome kind -> attempts (non-ok)
    #: draws whose label mass / argmax is known (a decision endpoint may not say); None: all
    mass_draws: int | None = None
    label_draws: int | None = None


@dataclass(frozen=True)
class RunRows:
    run: Run
    rows: tuple[QuestionRow, ...]
    cells: Mapping[str, CellCounts]
    counts: Mapping[str, int]  #: decisions by status, as a user sees them

    @property
    def state(self) -> RunState:
        return run_state(self.run.status, self.counts)


def resolve_run(session: Session, ref: str) -> Run:
    """A run by name, or by numeric id; InputError saying how to list runs otherwise."""
    run = find_run_by_ref(session, ref)
    if run is None:
        raise InputError(
            f"no run named {ref!r} in this database; `dreads runs` lists them (check that "
            "--database-url / DREADS_DATABASE_URL points at the database the run was written "
            "to)"
        )
    return run


def load_run_rows(session: Session, run: Run) -> RunRows:
    """Every decision question of ``run`` with its answer, and per-cell read/attempt counts."""
    answers = _answers_by_decision(session, run.id)
    rows: list[QuestionRow] = []
    counts: dict[str, int] = {}
    for decision in decision_rows(session, run.id):
        # decision_rows' order
        decision_id, key, replicate, cell, payload, status, error_kind = decision
        shown = shown_status(status, run.status)
        counts[shown] = counts.get(shown, 0) + 1
        rows.extend(_decision_rows(key, replicate, cell, payload, answers.get(decision_id, {}),
                                   shown, error_kind))
    return RunRows(run=run, rows=tuple(rows), cells=_cell_counts(session, run.id),
                   counts=counts)


def _answers_by_decision(session: Session, run_id: int) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    for answer in answer_rows(session, run_id):
        out.setdefault(answer[0], {})[answer[1]] = answer  # decision_id, question_id
    return out


def _decision_rows(key: str, replicate: int, cell: str | None, payload: Any,
                   answers: Mapping[str, Any], shown: str,
                   error_kind: str | None) -> Iterator[QuestionRow]:
    payload = payload or {}
    # the decision's columns, positional (a million rows: keyword arguments cost)
    common = (key, replicate, cell if cell is not None else NO_CELL,
              _state_key(payload.get("state")), shown)
    images = _images(payload)
    questions, expected = _parsed(payload)
    for question in questions:
        answer = answers.get(question.id)
        given = expected.get(question.id, answer[-1] if answer is not None else None)  # expected
        label = _expected_label(question, given)
        yield _row(common, images, error_kind, question.id, question.type, question.labels,
                   label, answer)
    # Answers for questions the payload does not list still count (defensive: no row lost).
    known = {q.id for q in questions}
    for qid, answer in answers.items():
        if qid not in known:
            label = _expected_label(_answered_question(qid, answer), answer.expected)
            yield _row(common, images, error_kind, qid, answer.question_type,
                       tuple(answer.probs), label, answer)


def _state_key(state: Any) -> str:
    """The state as canonical JSON (sorted keys): equal states, equal keys."""
    return orjson.dumps(state, option=orjson.OPT_SORT_KEYS, default=str).decode()


def _images(payload: Mapping[str, Any]) -> tuple[StoredImage, ...]:
    try:
        return stored_images(payload)
    except InputError:  # a payload written by hand: its images are not shown
        return ()


def _row(common: tuple[str, int, str, str, str], images: tuple[StoredImage, ...],
         error_kind: str | None, qid: str, qtype: str, labels: tuple[str, ...],
         expected: str | None, answer: Any | None) -> QuestionRow:
    if answer is None:
        return QuestionRow(*common, qid, qtype, labels, expected, False, images=images,
                           error_kind=error_kind)
    # answer_rows' columns in their order, unpacked (a million rows: a name lookup per
    # column of a SQL row costs ten times more)
    (_, _, _, label, p_yes, probs, expected_level, label_mass, argmax_is_label, stderr, draws,
     stop_reason, _) = answer
    return QuestionRow(
        *common, qid, qtype, labels, expected, True, label, p_yes,
        dict(zip(probs, map(float, probs.values()), strict=True)), expected_level,
        label_mass, argmax_is_label, stderr, draws, stop_reason, images, error_kind)


def _parsed(payload: Mapping[str, Any]) -> tuple[tuple[Question, ...], Mapping[str, Any]]:
    """The questions as the engine reads the stored payload (parsed once per distinct set of
    questions: most decisions of a run ask the same ones), and the expected values by question
    id (read per question by ``_expected_label``)."""
    expected = payload.get("expected")
    if expected is not None and not isinstance(expected, Mapping):  # written by hand
        return (), {}
    # Key order matters: options are labelled A, B, ... in the order given.
    questions = _parse_questions(orjson.dumps(payload.get("questions"), default=str))
    return questions, expected or {}


@lru_cache(maxsize=4096)
def _parse_questions(questions_json: bytes) -> tuple[Question, ...]:
    # The engine's parser, as at submit; a payload it refuses (written by hand) lists no
    # question, and its answers are reported from the answers alone.
    try:
        decision = decision_from_payload(
            "report", None, {"state": "", "questions": orjson.loads(questions_json)})
    except InputError:
        return ()
    return decision.questions


def _answered_question(qid: str, answer: Any) -> Question | None:
    """The question an answer is of, from the answer alone (its labels its probabilities')."""
    labels = tuple(answer.probs)
    try:
        kind_named(answer.question_type)
    except InputError:
        return None
    return Question(qid, answer.question_type, "", labels, labels, (None,) * len(labels))


def _expected_label(question: Question | None, given: Any) -> str | None:
    """The canvas label an expected value names (as ``expected`` takes it at submit), or
    None when absent or not recognised."""
    if given is None or question is None:
        return None
    try:
        return answer_label(question, given)
    except InputError:
        return None


def _cell_counts(session: Session, run_id: int) -> dict[str, CellCounts]:
    reads = _read_counts(session, run_id)
    attempts = _attempt_counts(session, run_id)
    out: dict[str, CellCounts] = {}
    for cell in set(reads) | set(attempts):
        n, low, not_label, with_mass, with_label = reads.get(cell, (0, 0, 0, 0, 0))
        total, failures = attempts.get(cell, (0, {}))
        out[cell] = CellCounts(draw_rows=n, low_mass_draws=low,
                               argmax_not_label_draws=not_label,
                               attempts=total, failures=failures, mass_draws=with_mass,
                               label_draws=with_label)
    return out


def _read_counts(session: Session, run_id: int) -> dict[str, tuple[int, int, int, int, int]]:
    return {(cell if cell is not None else NO_CELL): (n, low, bad, mass, label)
            for cell, n, low, bad, mass, label in read_counts_by_cell(session, run_id)}


def _attempt_counts(session: Session, run_id: int) -> dict[str, tuple[int, dict[str, int]]]:
    out: dict[str, tuple[int, dict[str, int]]] = {}
    for cell, outcome, count in attempt_counts_by_cell(session, run_id):
        key = cell if cell is not None else NO_CELL
        total, failures = out.get(key, (0, {}))
        if outcome != OutcomeKind.OK:
            failures[outcome] = count
        out[key] = (total + count, failures)
    return out
