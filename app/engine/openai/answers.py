"""dreads' answers written in OpenAI's Decisions shape. Pure: no I/O.

The answers of a decision asked in OpenAI's shape come back in it: its question names, typed
choice values, level labels. A decision from a dreads line is written as predicate (noul),
choice (option names as string values) and score (levels by their text). Used by
``dreads serve``'s ``/v1/decisions`` and by ``dreads export --format openai-batch``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from app.engine.openai.shapes import QuestionShape, shape_for
from app.engine.types import Answer, Decision

__all__ = ["openai_answer", "openai_answers", "openai_questions"]


def openai_questions(decision: Decision) -> tuple[QuestionShape, ...]:
    """Each question's OpenAI shape: the request's own, or for dreads' lines noul ->
    predicate, choice -> string values (the option names), score -> levels by their text."""
    if decision.openai is not None:
        return tuple(decision.openai)
    return tuple(shape_for(q) for q in decision.questions)


def openai_answer(shape: QuestionShape, labels: Sequence[str], probs: Mapping[str, float],
                  label_mass: float | None, confidence: float | None = None) -> dict[str, Any]:
    """One answer in OpenAI's shape from dreads' mean probability per canvas label.

    ``confidence`` is vLLM's: the top probability x the label mass (how much of the model's
    probability fell on the labels at all). An answer from a decision endpoint passes the
    endpoint's own ``confidence``; with neither, the top probability."""
    ps = [float(probs.get(label, 0.0)) for label in labels]
    if confidence is None:
        confidence = max(ps) * (float(label_mass) if label_mass is not None else 1.0)
    return shape.answer(ps, confidence)


def openai_answers(decision: Decision, answers: Iterable[Answer]) -> list[dict[str, Any]]:
    """The decision's answers in OpenAI's shape, in question order."""
    by_id = {a.question_id: a for a in answers}
    out = []
    for question, shape in zip(decision.questions, openai_questions(decision), strict=True):
        answer = by_id[question.id]
        out.append(openai_answer(shape, question.labels, answer.probs, answer.label_mass,
                                 answer.endpoint_confidence))
    return out
