"""An OpenAI Decisions request body -> dreads' ``Decision``, its question shapes kept.

The body is checked against ``DecisionsBody`` (pydantic: what is well-formed), then for what
dreads can ask; both raise ``DecisionsRequestError`` with OpenAI's ``param``. How a request
maps onto dreads' questions (one decision model inside; shapes at the edge):

- ``predicate`` -> a noul question (labels yes/no); its answer's ``probability`` is P(yes).
- ``choice`` -> a choice question whose options are the values written as JSON, labelled A, B,
  ... by position, so ``true`` (the boolean) and ``"true"`` (the string) are distinct options
  (as vLLM 0.33 writes them). The typed values are kept in ``Decision.openai`` and come back
  typed. At most 26 choices: dreads reads a choice by one letter.
- ``score`` -> a score question whose levels are the labels (``"label - description"`` where a
  level has a description); ``score`` is the expected 0-indexed level. At most 10 levels.
- A question's ``name`` is its id; an unnamed question's id is its position (``"0"``, ...).
- ``input`` is a string, or user messages whose content is a string or ``input_text``,
  ``input_json`` and ``input_image`` parts; one JSON part alone is the state as JSON. The
  images (``image_url``: a data URL or an http(s) URL, as OpenAI's hosted API takes them) are
  the decision's images, in order; the model reads them before the text (vLLM's reader's
  layout), wherever they stand among the parts. An input of images alone has a null state.
  Images in a question's instructions are refused: put them in the input.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from pydantic import ValidationError

from app.engine.kinds import CHOICE, LETTERS, NOUL, SCORE
from app.engine.limits import check_json
from app.engine.openai.errors import DecisionsRequestError, fail, request_error
from app.engine.openai.model import (
    ChoiceQuestionIn,
    DecisionsBody,
    InputImageIn,
    InputJsonIn,
    InputTextIn,
    MessageIn,
    PartIn,
    QuestionIn,
    ScoreQuestionIn,
    type_name,
)
from app.engine.openai.shapes import (
    ChoiceShape,
    ChoiceValue,
    PredicateShape,
    QuestionShape,
    ScoreShape,
    same_value,
)
from app.engine.questions import build_decision
from app.engine.types import Decision
from app.engine.values import serialize_state
from app.errors import InputError

__all__ = ["MAX_CHOICES", "decision_from_request"]

MAX_CHOICES = len(LETTERS)  #: dreads reads a choice by one letter, A..Z

Spec = dict[str, Any]  #: a question in dreads' (Jev's) shape, as ``build_decision`` reads it


def decision_from_request(key: str, body: Mapping[str, Any], *, cell: str | None = None,
                          expected: Any = None, extra_keys: Iterable[str] = (),
                          expected_param: str = "metadata.expected") -> Decision:
    """The decision a Decisions request asks, with ``Decision.openai`` = the request's question
    shapes (names, typed values, level labels), for answers and exports in its shape.

    Args:
        key: the decision id (the request id, or a Batch line's ``custom_id``).
        body: the request body as JSON.
        cell: the decision's cell, for per-cell figures.
        expected: question name (or position) -> expected value: a predicate's true/false, a
            choice's typed value, a level's label or 0-based index.
        extra_keys: body fields the caller reads itself (the API's ``dreads`` extension).
        expected_param: where ``expected`` came from, for messages.

    Raises:
        DecisionsRequestError: the message says what to fix; ``param`` names the field.
    """
    try:
        check_json("the request", body)
    except InputError as exc:
        raise DecisionsRequestError(exc.message) from None
    request = _validated(body, set(extra_keys))
    state, images = _state(request.input), _images(request.input)
    specs, shapes = _questions(request.questions)
    if cell is not None and not isinstance(cell, str):
        raise fail("metadata.cell", f"must be a string, got {type_name(cell)}")
    try:
        decision = build_decision(key, state, specs, cell, images=list(images) or None)
    except InputError as exc:
        raise DecisionsRequestError(exc.message) from None
    return replace(decision, expected=_expected(expected, decision, shapes, expected_param),
                   openai=shapes)


def _validated(body: Any, extra_keys: set[str]) -> DecisionsBody:
    if not isinstance(body, Mapping):
        raise fail("body", f"must be an object, got {type_name(body)}")
    try:
        return DecisionsBody.model_validate({k: v for k, v in body.items()
                                             if k not in extra_keys})
    except ValidationError as exc:
        raise request_error(exc, extra_keys=extra_keys) from None


# -- the input and instructions: text ------------------------------------------------------

def _part_text(part: PartIn) -> str:
    if isinstance(part, InputTextIn):
        return part.text
    assert isinstance(part, InputJsonIn)  # images are taken out before
    return serialize_state(part.data)


def _joined(content: str | Sequence[PartIn]) -> str:
    return content if isinstance(content, str) else "\n".join(map(_part_text, content))


def _text_parts(content: str | Sequence[PartIn]) -> str | list[PartIn]:
    return content if isinstance(content, str) else [
        part for part in content if not isinstance(part, InputImageIn)]


def _images(value: str | list[MessageIn]) -> tuple[str, ...]:
    """The input's image URLs, in order."""
    if isinstance(value, str):
        return ()
    return tuple(part.image_url for message in value if not isinstance(message.content, str)
                 for part in message.content if isinstance(part, InputImageIn))


def _state(value: str | list[MessageIn]) -> Any:
    """A string input as is; messages joined (a blank line between messages), their images
    left out; one JSON part alone as JSON (dreads writes it into the prompt as JSON); images
    alone, null."""
    if isinstance(value, str):
        return value
    contents = [c for c in (_text_parts(m.content) for m in value) if c]
    if not contents:
        return None
    if len(contents) == 1 and not isinstance(contents[0], str) and \
            len(contents[0]) == 1 and isinstance(contents[0][0], InputJsonIn):
        return contents[0][0].data
    return "\n\n".join(_joined(content) for content in contents)


def _instructions(value: str | Sequence[PartIn], param: str) -> str:
    if not isinstance(value, str) and any(isinstance(p, InputImageIn) for p in value):
        raise fail(param, "images in a question's instructions are not read by this server: "
                   "put the images in the input (a user message's input_image parts)")
    text = _joined(value)
    if not text.strip():
        raise fail(param, "must not be empty")
    return text


# -- the questions -----------------------------------------------------------------------

def _questions(questions: Sequence[QuestionIn]) -> tuple[dict[str, Spec],
                                                         tuple[QuestionShape, ...]]:
    specs: dict[str, Spec] = {}
    shapes: list[QuestionShape] = []
    for index, question in enumerate(questions):
        qid, spec, shape = _question(index, question)
        if qid in specs:
            first = list(specs).index(qid)
            raise fail(f"questions[{index}].name", f"question id {qid!r} is already taken by "
                       f"questions[{first}] (an unnamed question's id is its position); give "
                       "each question its own name")
        specs[qid] = spec
        shapes.append(shape)
    return specs, tuple(shapes)


def _question(index: int, question: QuestionIn) -> tuple[str, Spec, QuestionShape]:
    """(question id, dreads spec, OpenAI shape) of one question."""
    param = f"questions[{index}]"
    name = question.name
    if name is not None and not name.strip():
        raise fail(f"{param}.name", "must not be empty")
    instructions = _instructions(question.instructions, f"{param}.instructions")
    shape: QuestionShape
    if isinstance(question, ChoiceQuestionIn):
        criteria, shape = _choice(question, param)
        spec: Spec = {"type": CHOICE.name, "instructions": instructions, "criteria": criteria}
    elif isinstance(question, ScoreQuestionIn):
        texts, shape = _score(question, param)
        spec = {"type": SCORE.name, "instructions": instructions, "criteria": texts}
    else:
        spec, shape = {"type": NOUL.name, "instructions": instructions}, PredicateShape(name)
    return (name if name is not None else str(index)), spec, shape


def _choice(question: ChoiceQuestionIn, param: str) -> tuple[dict[str, str | None],
                                                              ChoiceShape]:
    """The options (values as JSON -> description) and the shape of a choice question."""
    where = f"{param}.choices"
    if len(question.choices) > MAX_CHOICES:
        raise fail(where, f"has {len(question.choices)} choices; dreads reads at most "
                   f"{MAX_CHOICES} (one letter A-Z each). Split the question, or group the "
                   "choices.")
    values: list[ChoiceValue] = []
    for i, choice in enumerate(question.choices):
        if any(same_value(choice.value, v) for v in values):
            raise fail(f"{where}[{i}].value", f"duplicate choice {json.dumps(choice.value)}; "
                       "each choice must be unique")
        values.append(choice.value)
    options = [json.dumps(v, ensure_ascii=False) for v in values]
    descriptions = [choice.description or None for choice in question.choices]
    return dict(zip(options, descriptions, strict=True)), ChoiceShape(question.name,
                                                                       tuple(values))


def _score(question: ScoreQuestionIn, param: str) -> tuple[list[str], ScoreShape]:
    """The level texts (``"label - description"``) and the shape of a score question."""
    labels: list[str] = []
    texts: list[str] = []
    for i, level in enumerate(question.levels):
        where = f"{param}.levels[{i}].label"
        if not level.label.strip():
            raise fail(where, "must not be empty")
        if level.label in labels:
            raise fail(where, f"duplicate level label {level.label!r}; labels must be unique")
        labels.append(level.label)
        texts.append(f"{level.label} - {level.description}" if level.description
                     else level.label)
    return texts, ScoreShape(question.name, tuple(labels))


# -- expected answers (the line's metadata, or the API's ``dreads`` extension) ---------------

def _expected(raw: Any, decision: Decision, shapes: Sequence[QuestionShape],
              param: str) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise fail(param, f"must be an object, got {type_name(raw)}")
    by_id = {q.id: (q, shape) for q, shape in zip(decision.questions, shapes, strict=True)}
    out: dict[str, str] = {}
    for qid, value in raw.items():
        if qid not in by_id:
            raise fail(param, f"names question {qid!r}, which is not among the questions "
                       f"{list(by_id)} (a name, or an unnamed question's position)")
        if value is None:
            continue
        question, shape = by_id[qid]
        try:
            out[qid] = shape.expected_label(question, value)
        except ValueError as exc:
            raise fail(f"{param}.{qid}", f"{json.dumps(value)} is {exc}") from None
    return out
