"""Jev's ``/v1/systemone`` in dreads' terms, both ways. Pure: no I/O.

    SystemOneIn --to_decision--> Decision (engine)      Answer --jev_answer--> Jev answer
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from app.api.schemas import BoxIn, ChoiceIn, NoulIn, QuestionIn, ScoreIn, SystemOneIn
from app.engine import Answer, Decision, DrawRecord, QuestionType, parse_decision
from app.errors import InputError

__all__ = [
    "ALIASES",
    "MAX_CHOICES",
    "MAX_QUESTIONS",
    "MAX_SCORE_LEVELS",
    "Unaskable",
    "answers_of",
    "diagnostics",
    "input_tokens",
    "jev_answer",
    "question_spec",
    "to_decision",
]

#: Model names Jev clients send that mean "the served model".
ALIASES = ("jev-latest", "jev-preview")
MAX_SCORE_LEVELS = 10  #: Jev's limit
MAX_CHOICES = 26  #: dreads' canvas labels A..Z
MAX_QUESTIONS = 256  #: per request: more is a run (POST /v1/runs)


class Unaskable(InputError):
    """The request is well formed, but this question cannot be asked (400, plain text)."""


def question_spec(name: str, question: QuestionIn) -> dict[str, Any]:
    """The dreads question spec of a Jev question, or ``Unaskable``."""
    if isinstance(question, BoxIn):
        raise Unaskable(f"Question {name!r} is a box question: boxes need an image and a vision "
                        "model, and this server reads text. Ask noul, choice or score.")
    spec: dict[str, Any] = {"type": question.type}
    if question.instructions is not None:
        spec["instructions"] = question.instructions
    if isinstance(question, ScoreIn) and len(question.criteria) > MAX_SCORE_LEVELS:
        raise Unaskable(f"Too many score levels. Must have at most {MAX_SCORE_LEVELS} levels.")
    if isinstance(question, ChoiceIn) and len(question.criteria) > MAX_CHOICES:
        raise Unaskable(f"Too many choices. Must have at most {MAX_CHOICES} choices (question "
                        f"{name!r} has {len(question.criteria)}).")
    if isinstance(question, (ChoiceIn, ScoreIn)):
        spec["criteria"] = question.criteria
    elif isinstance(question, NoulIn) and question.criteria is not None:
        spec["criteria"] = question.criteria.model_dump()
    return spec


def to_decision(request_id: str, body: SystemOneIn) -> Decision:
    """The decision a request asks, with the record extension's id, cell and expected answers.

    Raises:
        Unaskable: a question dreads cannot ask; the message names it and says why.
    """
    if len(body.questions) > MAX_QUESTIONS:
        raise Unaskable(f"Too many questions. Must have at most {MAX_QUESTIONS} questions per "
                        "request; split them, or submit them as a run (POST /v1/runs).")
    if body.assets:
        raise Unaskable("assets (images) are not supported: this server's model reads text. "
                        "Send the content as text or JSON in 'state'.")
    specs = {name: question_spec(name, q) for name, q in body.questions.items()}
    record = body.dreads
    key = record.id if record and record.id else request_id
    line = {"id": key, "state": body.state, "questions": specs,
            "cell": record.cell if record else None,
            "expected": record.expected if record else None}
    try:
        return parse_decision(line)
    except InputError as exc:  # the request is one decision: its id would only be noise
        raise Unaskable(exc.message.removeprefix(f"decision {key!r}: ")) from exc


def _by_option(answer: Answer, options: tuple[str, ...], labels: tuple[str, ...]
               ) -> dict[str, float]:
    return {option: answer.probs[label] for option, label in zip(options, labels, strict=True)}


def jev_answer(answer: Answer, labels: tuple[str, ...], options: tuple[str, ...]
               ) -> dict[str, Any]:
    """Jev's answer shape: noul P(yes); choice by option name; score 0-indexed."""
    if answer.question_type is QuestionType.NOUL:
        return {"type": "noul", "noul": answer.p_yes}
    if answer.question_type is QuestionType.CHOICE:
        return {"type": "choice", "choice": answer.option, "confidence": answer.confidence,
                "probabilities": _by_option(answer, options, labels)}
    return {"type": "score", "score": answer.expected_level, "confidence": answer.confidence,
            "legend": dict(answer.legend or {}),
            "probabilities": {str(i): answer.probs[label] for i, label in enumerate(labels)}}


def diagnostics(answer: Answer) -> dict[str, Any]:
    """dreads' diagnostics of one answer, beside Jev's answer."""
    return {"label": answer.label, "option": answer.option, "probs": dict(answer.probs),
            "top_prob": answer.top_prob, "stderr": answer.stderr,
            "agreement": answer.agreement, "draws": answer.draws,
            "stop_reason": str(answer.stop_reason), "label_mass": answer.label_mass,
            "min_label_mass": answer.min_label_mass,
            "argmax_is_label": answer.argmax_is_label, "entropy": answer.entropy}


def input_tokens(draws: Iterable[DrawRecord]) -> int:
    """Prompt tokens of each canvas's first draw, summed (later draws re-read a cached
    prompt): the input the model read."""
    first: dict[int, int] = {}
    for draw in draws:
        if draw.draw == 0 and draw.prompt_tokens is not None:
            first[draw.unit] = draw.prompt_tokens
    return sum(first.values())


def answers_of(decision: Decision, answers: Iterable[Answer]) -> dict[str, dict[str, Any]]:
    """Jev answers keyed by question name, in the request's order."""
    by_id: Mapping[str, Answer] = {a.question_id: a for a in answers}
    return {q.id: jev_answer(by_id[q.id], q.labels, q.options) for q in decision.questions}
