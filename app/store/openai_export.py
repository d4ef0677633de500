"""A run's results as OpenAI's Batch output file (``dreads export --format openai-batch``).

One line per decision, as the Batch API writes them::

    {"id": "batch_req_...", "custom_id": KEY,
     "response": {"status_code": 200, "request_id": "...", "body": <Decision>},
     "error": null}

The body is OpenAI's Decision (answers in question order, ``model``, ``usage``) plus dreads'
diagnostics in the ``dreads`` field, which OpenAI's SDK ignores. A decision asked in OpenAI's
Decisions shape gets its own question names and typed choice values back; a dreads line is
written as predicate (noul), choice (options as string values) and score (levels by text). A
decision that did not end with answers (failed, rejected, cancelled, not run yet) has
``"response": null`` and ``"error": {"code", "message"}`` with the reason.

Streamed from SQL in decision order (answers and the first draw of each canvas, merged), so
memory stays flat in the run's size.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from functools import lru_cache
from itertools import groupby
from typing import Any

import orjson
from sqlalchemy import Select, and_, func, select
from sqlalchemy.orm import Session

from app.engine import Decision, decision_from_payload
from app.engine.openai.answers import openai_answer, openai_questions
from app.errors import InputError
from app.store.models import (
    Answer,
    Attempt,
    DecisionPayload,
    DecisionStatus,
    Draw,
    Run,
    shown_status,
)
from app.store.models import Decision as DecisionRow
from app.store.views import ANSWER_FIELDS

__all__ = ["iter_openai_batch"]

_UNFINISHED = {DecisionStatus.PENDING, DecisionStatus.QUEUED, DecisionStatus.LEASED}


def _answers_stmt(run_id: int) -> Select[Any]:
    cols = [getattr(Answer, name) for name in ANSWER_FIELDS]
    return (select(DecisionRow.id, DecisionRow.key, DecisionRow.cell, DecisionRow.replicate,
                   DecisionRow.status, DecisionRow.last_error_kind, DecisionRow.last_error,
                   DecisionPayload.payload, Answer.question_id, Answer.expected, *cols)
            .join(DecisionPayload, DecisionPayload.decision_id == DecisionRow.id)
            .outerjoin(Answer, Answer.decision_id == DecisionRow.id)
            .where(DecisionRow.run_id == run_id)
            .order_by(DecisionRow.id, Answer.id)
            .execution_options(yield_per=1000))


def _usage_stmt(run_id: int) -> Select[int, int, int | None, int | None]:
    """Per decision and canvas, the first draw's prompt and cached tokens (a canvas's
    questions share them) of the attempt whose answers were kept."""
    return (select(Draw.decision_id, Draw.unit, func.max(Draw.prompt_tokens),
                   func.max(Draw.cached_tokens))
            .join(Attempt, and_(Attempt.id == Draw.attempt_id, Attempt.won.is_(True)))
            .where(Attempt.run_id == run_id, Draw.draw == 0)
            .group_by(Draw.decision_id, Draw.unit)
            .order_by(Draw.decision_id)
            .execution_options(yield_per=1000))


def _usage(units: Sequence[Any]) -> dict[str, Any]:
    tokens = sum(int(u[2] or 0) for u in units)
    cached = sum(int(u[3] or 0) for u in units)
    return {"input_tokens": tokens,
            "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
            "output_tokens": 0, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": tokens}


class _UsageCursor:
    """Walks the usage rows alongside the decisions (both in decision id order)."""

    def __init__(self, rows: Iterator[Any]) -> None:
        self._groups = groupby(rows, key=lambda r: r[0])
        self._next: tuple[int, list[Any]] | None = self._advance()

    def _advance(self) -> tuple[int, list[Any]] | None:
        for decision_id, group in self._groups:
            return decision_id, list(group)
        return None

    def take(self, decision_id: int) -> list[Any]:
        while self._next is not None and self._next[0] < decision_id:
            self._next = self._advance()
        if self._next is not None and self._next[0] == decision_id:
            units = self._next[1]
            self._next = self._advance()
            return units
        return []


@lru_cache(maxsize=4096)
def _decision(spec_json: bytes) -> Decision | None:
    payload = orjson.loads(spec_json)
    try:
        return decision_from_payload("export", None, {"state": "", **payload})
    except InputError:
        return None


def _parsed(payload: Mapping[str, Any]) -> Decision | None:
    """The decision's questions and OpenAI shapes (cached: most decisions of a run share
    them)."""
    spec = {"questions": payload.get("questions"), "openai": payload.get("openai")}
    return _decision(orjson.dumps(spec))


def _error(status: str, kind: str | None, message: str | None) -> dict[str, Any]:
    if status in _UNFINISHED:
        return {"code": "not_finished", "message": f"the decision is {status}: the run has not "
                "finished it (dreads status RUN; dreads resume RUN)"}
    if status == DecisionStatus.CANCELLED:
        return {"code": "cancelled", "message": message or "the run was cancelled before this "
                "decision ran"}
    return {"code": kind or status, "message": message or f"the decision ended {status}"}


def _body(decision: Decision, rows: Sequence[Any], model: str,
          units: Sequence[Any]) -> dict[str, Any]:
    by_qid = {r.question_id: r for r in rows if r.question_id is not None}
    answers: list[dict[str, Any]] = []
    for question, shape in zip(decision.questions, openai_questions(decision), strict=True):
        row = by_qid.get(question.id)
        if row is None:
            answers.append({"type": "refusal", "name": shape.name})
        else:
            answers.append(openai_answer(shape, question.labels, row.probs, row.label_mass,
                                         row.endpoint_confidence))
    first = rows[0]
    diagnostics = {qid: {**{name: getattr(r, name) for name in ANSWER_FIELDS},
                         "expected": r.expected} for qid, r in by_qid.items()}
    return {"model": model, "answers": answers, "usage": _usage(units),
            "dreads": {"id": first.key, "cell": first.cell, "replicate": first.replicate,
                       "questions": diagnostics}}


def _line(run_id: int, rows: Sequence[Any], model: str, units: Sequence[Any],
          run_status: str) -> dict[str, Any]:
    first = rows[0]
    line: dict[str, Any] = {"id": f"batch_req_{run_id}_{first.id}", "custom_id": first.key,
                            "response": None, "error": None}
    decision = _parsed(first.payload)
    status = shown_status(first.status, run_status)
    if status != DecisionStatus.DONE:
        line["error"] = _error(status, first.last_error_kind, first.last_error)
    elif decision is None:
        line["error"] = {"code": "unreadable_payload", "message": "the stored decision could "
                         "not be read back as questions"}
    else:
        line["response"] = {"status_code": 200, "request_id": f"dreads_{run_id}_{first.id}",
                            "body": _body(decision, rows, model, units)}
    return line


def iter_openai_batch(session: Session, run_id: int, model: str) -> Iterator[dict[str, Any]]:
    """One OpenAI Batch output line per decision of the run, in decision order."""
    run_status = str(session.scalar(select(Run.status).where(Run.id == run_id)))
    usage = _UsageCursor(iter(session.execute(_usage_stmt(run_id))))
    for decision_id, group in groupby(session.execute(_answers_stmt(run_id)),
                                      key=lambda r: r.id):
        yield _line(run_id, list(group), model, usage.take(decision_id), run_status)
