"""dreads as the client of another ``POST /v1/decisions`` endpoint. Pure: no I/O.

    Decision     --decisions_request--> a request asking every question at once
    its response --read_decisions-----> EndpointAnswers (one draw per question, refusals)

The questions are asked in the decision's OpenAI shapes (``openai_questions``): a request's
own, or a dreads line's as predicate, choice and score. ``app.sources`` sends the request.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from app.engine.endpoint import (
    EndpointAnswers,
    one_draw,
    optional_flag,
    optional_number,
    refusal_of,
    usage_of,
)
from app.engine.kinds import CHOICE
from app.engine.openai.answers import openai_questions
from app.engine.types import Answer, Decision, DrawRecord, Question, Refusal
from app.engine.values import serialize_state
from app.errors import MalformedResponse

__all__ = ["decisions_request", "read_decisions", "reader_decision", "reader_options"]


def decisions_request(decision: Decision, model: str, *,
                      image_urls: Sequence[str] | None = None) -> dict[str, Any]:
    """The ``POST /v1/decisions`` body that asks every question of ``decision`` at once: the
    request's own shapes for a decision that came as one, else noul -> predicate, choice ->
    string values, score -> levels. A state that is not text is written as JSON. Images
    (``image_urls``, by default the decision's references) go as OpenAI's ``input_image``
    parts of one user message, before the text (vLLM 0.33's ``/v1/decisions`` refuses them)."""
    shapes = openai_questions(decision)
    return {"model": model, "input": _input(decision, image_urls),
            "questions": [shape.asked(q)
                          for q, shape in zip(decision.questions, shapes, strict=True)]}


def _input(decision: Decision, image_urls: Sequence[str] | None) -> Any:
    urls = decision.images if image_urls is None else image_urls
    if not urls:
        return serialize_state(decision.state)
    parts: list[dict[str, Any]] = [{"type": "input_image", "image_url": u} for u in urls]
    if decision.state is not None:
        parts.append({"type": "input_text", "text": serialize_state(decision.state)})
    return [{"role": "user", "content": parts}]


def reader_decision(decision: Decision, model: str) -> Decision:
    """The decision vLLM's reader reads from ``decisions_request(decision, model)``: the input
    as the state, and each question as a choice of its request options (a predicate: false,
    true; a choice: its values as JSON; a score: its level labels), with their descriptions.
    What ``--dry-run`` counts the endpoint's tokens on."""
    body = decisions_request(decision, model)
    questions = tuple(_reader_question(i, asked) for i, asked in enumerate(body["questions"]))
    return Decision(id=decision.id, state=serialize_state(decision.state),
                    questions=questions)


def reader_options(asked: Mapping[str, Any]) -> list[tuple[str, str | None]]:
    """The options (name, description) vLLM's reader reads a ``/v1/decisions`` question as:
    a predicate: false, true; a choice: its values as JSON; a score: its level labels."""
    if asked["type"] == "predicate":
        return [("false", None), ("true", None)]
    if asked["type"] == "choice":
        return [(json.dumps(c["value"], ensure_ascii=False), c.get("description"))
                for c in asked["choices"]]
    return [(level["label"], level.get("description")) for level in asked["levels"]]


def _reader_question(index: int, asked: Mapping[str, Any]) -> Question:
    options = reader_options(asked)
    names = tuple(n for n, _ in options)
    return Question(id=str(index), type=CHOICE.name, instructions=asked["instructions"],
                    labels=CHOICE.labels(names), options=names,
                    descriptions=tuple(d or None for _, d in options))


def _dreads_diagnostics(body: Mapping[str, Any], qid: str) -> Mapping[str, Any]:
    """Another dreads serve's per-question diagnostics (its ``dreads`` extension)."""
    ext = body.get("dreads")
    questions = ext.get("questions") if isinstance(ext, Mapping) else None
    found = questions.get(qid) if isinstance(questions, Mapping) else None
    return found if isinstance(found, Mapping) else {}


def _answers(body: Mapping[str, Any], decision: Decision) -> list[Any]:
    raw_answers = body.get("answers")
    if not isinstance(raw_answers, list) or len(raw_answers) != len(decision.questions):
        got = len(raw_answers) if isinstance(raw_answers, list) else "no"
        raise MalformedResponse(f"the /v1/decisions response has {got} answers for "
                                f"{len(decision.questions)} questions")
    return raw_answers


def read_decisions(decision: Decision, body: Mapping[str, Any], *,
                   latency_ms: float = 0.0) -> EndpointAnswers:
    """The answers, draws and refusals of a ``/v1/decisions`` response to
    ``decisions_request(decision, ...)``: answers in question order; ``confidence`` and
    ``usage`` kept as the endpoint gave them; label mass unavailable unless the endpoint is a
    dreads serve (its ``dreads`` extension).

    Raises:
        MalformedResponse: answers missing, of another count, or unreadable.
    """
    raw_answers = _answers(body, decision)
    answers: list[Answer] = []
    draws: list[DrawRecord] = []
    refusals: list[Refusal] = []
    shapes = openai_questions(decision)
    for index, (question, shape, raw) in enumerate(zip(decision.questions, shapes, raw_answers,
                                                       strict=True)):
        if not isinstance(raw, Mapping):
            raise MalformedResponse(f"answer {index} is not an object")
        refusal = refusal_of(question, raw)
        if refusal is not None:
            refusals.append(refusal)
            continue
        diag = _dreads_diagnostics(body, question.id)
        answer, draw = one_draw(
            question, index, shape.read_probs(question, raw),
            label_mass=optional_number(diag.get("label_mass")),
            argmax_is_label=optional_flag(diag.get("argmax_is_label")),
            confidence=optional_number(raw.get("confidence")), latency_ms=latency_ms)
        answers.append(answer)
        draws.append(draw)
    return EndpointAnswers(tuple(answers), tuple(draws), tuple(refusals), usage_of(body))
