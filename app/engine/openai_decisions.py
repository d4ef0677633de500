"""OpenAI's Decisions API (``POST /v1/decisions``) in dreads' terms, both ways. Pure: no I/O.

    request body --decision_from_request--> Decision (engine), its ``openai`` shape kept
    Answer       --openai_answers---------> OpenAI answers, in question order
    Decision     --decisions_request------> a request to another Decisions endpoint
    its response --read_decisions---------> EndpointAnswers (one draw per question)

How a request maps onto dreads' questions (one decision model inside; shapes at the edge):

- ``predicate`` -> a noul question (labels yes/no); its answer's ``probability`` is P(yes).
- ``choice`` -> a choice question whose options are the values written as JSON, labelled A, B,
  ... by position, so ``true`` (the boolean) and ``"true"`` (the string) are distinct options
  (as vLLM 0.33 writes them). The typed values are kept in ``Decision.openai`` and come back
  typed. At most 26 choices: dreads reads a choice by one letter.
- ``score`` -> a score question whose levels are the labels (``"label - description"`` where a
  level has a description); ``score`` is the expected 0-indexed level. At most 10 levels.
- A question's ``name`` is its id; an unnamed question's id is its position (``"0"``, ...).
- ``input`` is a string, or user messages whose content is a string or ``input_text`` and
  ``input_json`` parts; one JSON part alone is the state as JSON. Images are refused.

Job-file lines (``parse_decisions_line``): a bare request body, or an OpenAI Batch line
``{"custom_id", "method": "POST", "url": "/v1/decisions", "body": {...}}``, with ``cell`` and
``expected`` (question name or position -> expected value) in ``metadata``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from app.engine.endpoint import (
    EndpointAnswers,
    number,
    one_draw,
    optional_flag,
    optional_number,
    refusal_of,
    usage_of,
)
from app.engine.prompt import serialize_state
from app.engine.questions import LETTERS, build_decision
from app.engine.types import Answer, Decision, DrawRecord, Question, QuestionType, Refusal
from app.errors import InputError, MalformedResponse

__all__ = [
    "MAX_CHOICES",
    "MAX_LEVELS",
    "MAX_QUESTIONS",
    "DecisionsRequestError",
    "decision_from_request",
    "decisions_request",
    "is_decisions_line",
    "openai_answer",
    "openai_answers",
    "openai_questions",
    "parse_decisions_line",
    "read_decisions",
]

MAX_CHOICES = len(LETTERS)  #: dreads reads a choice by one letter, A..Z
MAX_LEVELS = 10  #: OpenAI's limit, and the ten digits of vLLM's score read
MAX_QUESTIONS = 400  #: OpenAI's limit per request
MAX_OPENAI_CHOICES = 255
_TYPES = ("predicate", "choice", "score")
_REQUEST_KEYS = {"model", "input", "questions", "safety_identifier", "prompt_cache_key",
                 "prompt_cache_options", "metadata"}
_DECISIONS_URL = "/v1/decisions"


class DecisionsRequestError(InputError):
    """A Decisions request dreads cannot read or ask; ``param`` names the field (OpenAI's
    ``error.param``, e.g. ``questions[1].choices``)."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


# -- reading the request ---------------------------------------------------------------------

def _fail(param: str | None, message: str) -> DecisionsRequestError:
    return DecisionsRequestError(f"{param}: {message}" if param else message, param)


def _type_name(value: Any) -> str:
    return "null" if value is None else "boolean" if isinstance(value, bool) else (
        "array" if isinstance(value, list) else "object" if isinstance(value, Mapping)
        else "number" if isinstance(value, (int, float)) else type(value).__name__)


def _string(value: Any, param: str, *, blank_ok: bool = True) -> str:
    if not isinstance(value, str):
        raise _fail(param, f"must be a string, got {_type_name(value)}")
    if not blank_ok and not value.strip():
        raise _fail(param, "must not be empty")
    return value


def _keys(obj: Mapping[str, Any], allowed: set[str], param: str) -> None:
    extra = sorted(set(obj) - allowed)
    if extra:
        where = f"{param}: " if param else ""
        raise DecisionsRequestError(f"{where}unknown field(s) {extra}; allowed: "
                                    f"{sorted(allowed)}", f"{param}.{extra[0]}".lstrip("."))


def _object(value: Any, param: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _fail(param, f"must be an object, got {_type_name(value)}")
    return value


def _list(value: Any, param: str) -> list[Any]:
    if not isinstance(value, list):
        raise _fail(param, f"must be an array, got {_type_name(value)}")
    return value


_IMAGES = ("images are not supported: this server's model reads text. Send the content as "
           "input_text or input_json.")


def _part_text(part: Any, param: str) -> tuple[str, Any]:
    """("text", str) or ("json", data) of one content part."""
    part = _object(part, param)
    kind = part.get("type")
    if kind == "input_image":
        raise _fail(param, _IMAGES)
    if kind == "input_text":
        _keys(part, {"type", "text", "prompt_cache_breakpoint"}, param)
        return "text", _string(part.get("text"), f"{param}.text")
    if kind == "input_json":
        _keys(part, {"type", "data"}, param)
        data = part.get("data")
        if not isinstance(data, (Mapping, list)):
            raise _fail(f"{param}.data", "must be a JSON object or an array of objects, got "
                        f"{_type_name(data)}")
        return "json", data
    raise _fail(f"{param}.type", f"unknown part type {kind!r}; use 'input_text' or "
                "'input_json'")


def _parts(value: Any, param: str) -> list[tuple[str, Any]]:
    if isinstance(value, str):
        return [("text", value)]
    parts = _list(value, param)
    if not parts:
        raise _fail(param, "must not be empty")
    return [_part_text(p, f"{param}[{i}]") for i, p in enumerate(parts)]


def _joined(parts: Sequence[tuple[str, Any]], sep: str = "\n") -> str:
    return sep.join(text if kind == "text" else serialize_state(text) for kind, text in parts)


def _message(message: Any, param: str) -> list[tuple[str, Any]]:
    message = _object(message, param)
    role = message.get("role")
    if role != "user" or message.get("type", "message") != "message":
        what = f"role {role!r}" if role is not None else f"type {message.get('type')!r}"
        raise _fail(param, f"{what} is not supported: send the input as a string or as user "
                    "messages (developer, system and assistant messages and tool calls are "
                    "not read by this server)")
    _keys(message, {"role", "content", "type"}, param)
    return _parts(message.get("content"), f"{param}.content")


def _state(value: Any) -> Any:
    """A string input as is; messages joined (a blank line between messages); one JSON part
    alone as JSON (dreads writes it into the prompt as JSON)."""
    if isinstance(value, str):
        return value
    messages = _list(value, "input")
    if not messages:
        raise _fail("input", "must not be empty")
    blocks = [_message(m, f"input[{i}]") for i, m in enumerate(messages)]
    if len(blocks) == 1 and len(blocks[0]) == 1 and blocks[0][0][0] == "json":
        return blocks[0][0][1]
    return "\n\n".join(_joined(b) for b in blocks)


def _instructions(value: Any, param: str) -> str:
    if value is None:
        raise _fail(param, "is required")
    text = _joined(_parts(value, param))
    if not text.strip():
        raise _fail(param, "must not be empty")
    return text


def _choice_value(value: Any, param: str) -> str | bool:
    if not isinstance(value, (str, bool)):
        raise _fail(param, f"must be a string or a boolean, got {_type_name(value)}")
    return value


def _same(a: Any, b: Any) -> bool:
    """Typed equality: ``True`` and ``"true"`` differ, as do ``1`` and ``True``."""
    return type(a) is type(b) and a == b


def _choices(raw: Any, param: str) -> tuple[list[str | bool], list[str | None]]:
    choices = _list(raw, param)
    if not 2 <= len(choices) <= MAX_OPENAI_CHOICES:
        raise _fail(param, f"must have 2 to {MAX_OPENAI_CHOICES} choices, got {len(choices)}")
    if len(choices) > MAX_CHOICES:
        raise _fail(param, f"has {len(choices)} choices; dreads reads at most {MAX_CHOICES} "
                    "(one letter A-Z each). Split the question, or group the choices.")
    values: list[str | bool] = []
    descriptions: list[str | None] = []
    for i, choice in enumerate(choices):
        where = f"{param}[{i}]"
        choice = _object(choice, where)
        _keys(choice, {"value", "description"}, where)
        value = _choice_value(choice.get("value"), f"{where}.value")
        if any(_same(value, v) for v in values):
            raise _fail(f"{where}.value", f"duplicate choice {json.dumps(value)}; each choice "
                        "must be unique")
        values.append(value)
        desc = choice.get("description")
        descriptions.append(None if desc is None else _string(desc, f"{where}.description")
                            or None)
    return values, descriptions


def _levels(raw: Any, param: str) -> tuple[list[str], list[str]]:
    levels = _list(raw, param)
    if len(levels) > MAX_LEVELS:
        raise _fail(param, f"has {len(levels)} levels; at most {MAX_LEVELS} are allowed")
    if len(levels) < 2:
        raise _fail(param, f"must have 2 to {MAX_LEVELS} levels, got {len(levels)}")
    labels: list[str] = []
    texts: list[str] = []
    for i, level in enumerate(levels):
        where = f"{param}[{i}]"
        level = _object(level, where)
        _keys(level, {"label", "description"}, where)
        label = _string(level.get("label"), f"{where}.label", blank_ok=False)
        if label in labels:
            raise _fail(f"{where}.label", f"duplicate level label {label!r}; labels must be "
                        "unique")
        desc = level.get("description")
        desc = None if desc is None else _string(desc, f"{where}.description")
        labels.append(label)
        texts.append(f"{label} - {desc}" if desc else label)
    return labels, texts


def _question(raw: Any, index: int) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """(question id, dreads spec, OpenAI shape) of one question."""
    param = f"questions[{index}]"
    question = _object(raw, param)
    kind = question.get("type")
    if kind not in _TYPES:
        raise _fail(f"{param}.type", f"unknown question type {kind!r}; use one of "
                    f"{list(_TYPES)}")
    allowed = {"type", "name", "instructions", *({"choices"} if kind == "choice" else ()),
               *({"levels"} if kind == "score" else ())}
    _keys(question, allowed, param)
    name = question.get("name")
    if name is not None:
        name = _string(name, f"{param}.name", blank_ok=False)
    instructions = _instructions(question.get("instructions"), f"{param}.instructions")
    shape: dict[str, Any] = {"type": kind, "name": name}
    if kind == "predicate":
        spec: dict[str, Any] = {"type": "noul", "instructions": instructions}
    elif kind == "choice":
        values, descs = _choices(question.get("choices"), f"{param}.choices")
        options = [json.dumps(v, ensure_ascii=False) for v in values]
        spec = {"type": "choice", "instructions": instructions,
                "criteria": dict(zip(options, descs, strict=True))}
        shape["values"] = values
    else:
        labels, texts = _levels(question.get("levels"), f"{param}.levels")
        spec = {"type": "score", "instructions": instructions, "criteria": texts}
        shape["labels"] = labels
    return (name if name is not None else str(index)), spec, shape


def _questions(raw: Any) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    if raw is None:
        raise _fail("questions", "is required")
    questions = _list(raw, "questions")
    if not 1 <= len(questions) <= MAX_QUESTIONS:
        raise _fail("questions", f"must have 1 to {MAX_QUESTIONS} questions, got "
                    f"{len(questions)}")
    specs: dict[str, dict[str, Any]] = {}
    shapes: list[dict[str, Any]] = []
    for index, item in enumerate(questions):
        qid, spec, shape = _question(item, index)
        if qid in specs:
            first = list(specs).index(qid)
            raise _fail(f"questions[{index}].name", f"question id {qid!r} is already taken by "
                        f"questions[{first}] (an unnamed question's id is its position); "
                        "give each question its own name")
        specs[qid] = spec
        shapes.append(shape)
    return specs, shapes


def _expected_label(question: Question, shape: Mapping[str, Any], value: Any) -> str:
    """The canvas label of an expected answer: a predicate's true/false (or yes/no), a choice's
    typed value, a score level's label or 0-based index."""
    kind = shape["type"]
    if kind == "predicate":
        if isinstance(value, bool):
            return "yes" if value else "no"
        text = str(value).strip().lower()
        if text in {"yes", "true"}:
            return "yes"
        if text in {"no", "false"}:
            return "no"
        raise ValueError("a predicate expects true or false")
    if kind == "choice":
        for i, v in enumerate(shape["values"]):
            if _same(v, value):
                return question.labels[i]
        raise ValueError(f"not among the choices {json.dumps(shape['values'])} (values are "
                         "typed: true and \"true\" differ)")
    labels = shape["labels"]
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(labels):
        return question.labels[value]
    if isinstance(value, str) and value in labels:
        return question.labels[labels.index(value)]
    raise ValueError(f"not a level label {labels} or a 0-based level index")


def _expected(raw: Any, decision: Decision, shapes: Sequence[Mapping[str, Any]],
              param: str) -> dict[str, str]:
    if raw is None:
        return {}
    expected = _object(raw, param)
    by_id = {q.id: (q, shape) for q, shape in zip(decision.questions, shapes, strict=True)}
    out: dict[str, str] = {}
    for qid, value in expected.items():
        if qid not in by_id:
            raise _fail(param, f"names question {qid!r}, which is not among the "
                        f"questions {list(by_id)} (a name, or an unnamed question's position)")
        if value is None:
            continue
        question, shape = by_id[qid]
        try:
            out[qid] = _expected_label(question, shape, value)
        except ValueError as exc:
            raise _fail(f"{param}.{qid}", f"{json.dumps(value)} is {exc}") from None
    return out


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
    body = _object(body, "body")
    _keys(body, _REQUEST_KEYS | set(extra_keys), "")
    model = body.get("model")
    if model is not None:
        _string(model, "model")
    if "input" not in body:
        raise _fail("input", "is required")
    state = _state(body["input"])
    specs, shapes = _questions(body.get("questions"))
    if cell is not None and not isinstance(cell, str):
        raise _fail("metadata.cell", f"must be a string, got {_type_name(cell)}")
    try:
        decision = build_decision(key, state, specs, cell)
    except DecisionsRequestError:
        raise
    except InputError as exc:
        raise DecisionsRequestError(exc.message) from None
    return replace(decision, expected=_expected(expected, decision, shapes, expected_param),
                   openai={"questions": shapes})


# -- job-file lines --------------------------------------------------------------------------

def is_decisions_line(obj: Mapping[str, Any]) -> bool:
    """A bare Decisions request, or a Batch line whose url or body is one."""
    body = obj.get("body")
    if obj.get("url") == _DECISIONS_URL:
        return True
    if isinstance(body, Mapping):
        return "input" in body and "state" not in body
    return "input" in obj and isinstance(obj.get("questions"), list)


def _line_id(obj: Mapping[str, Any], metadata: Mapping[str, Any], line_no: int | None) -> str:
    for source, key in ((obj, "custom_id"), (metadata, "id"), (obj, "id")):
        value = source.get(key)
        if value is not None:
            return str(value) if isinstance(value, int) and not isinstance(value, bool) \
                else value
    if line_no is None:
        raise InputError("a Decisions request needs an id: give 'custom_id' (a Batch line) "
                         "or 'metadata': {\"id\": ...}")
    return f"line-{line_no}"


def parse_decisions_line(obj: Mapping[str, Any], *, line_no: int | None = None) -> Decision:
    """One job line in OpenAI's shape: a Batch line ``{"custom_id", "method", "url", "body",
    "metadata"?}`` or a bare request body (its id ``metadata.id``, else ``line-<number>``).
    ``metadata`` (of the line or of the body) carries ``cell`` and ``expected``.

    Raises:
        InputError: the message names the decision and the field to fix.
    """
    batch = "body" in obj or "custom_id" in obj
    if batch:
        _keys(obj, {"custom_id", "method", "url", "body", "metadata"}, "")
        if obj.get("method", "POST") != "POST":
            raise InputError(f"a Batch line's method must be POST, got {obj.get('method')!r}")
        if obj.get("url", _DECISIONS_URL) != _DECISIONS_URL:
            raise InputError(f"a Decisions Batch line's url must be {_DECISIONS_URL!r}, got "
                             f"{obj.get('url')!r}")
        body = obj.get("body")
        if not isinstance(body, Mapping):
            raise InputError("a Batch line needs 'body': a Decisions request "
                             "{\"model\", \"input\", \"questions\"}")
    else:
        body = obj
    metadata = _metadata(obj, body)
    key = _line_id(obj, metadata, line_no)
    try:
        return decision_from_request(key, body, cell=metadata.get("cell"),
                                     expected=metadata.get("expected"))
    except InputError as exc:
        raise InputError(f"decision {key!r}: {exc.message}") from None


def _metadata(obj: Mapping[str, Any], body: Mapping[str, Any]) -> Mapping[str, Any]:
    merged: dict[str, Any] = {}
    for source in (body.get("metadata"), obj.get("metadata") if obj is not body else None):
        if source is None:
            continue
        if not isinstance(source, Mapping):
            raise InputError(f"'metadata' must be an object, got {_type_name(source)}")
        merged.update(source)
    return merged


# -- answers ---------------------------------------------------------------------------------

def openai_questions(decision: Decision) -> list[dict[str, Any]]:
    """Each question's OpenAI shape: the request's own, or for dreads' lines noul ->
    predicate, choice -> string values (the option names), score -> levels by their text."""
    if decision.openai is not None:
        return list(decision.openai["questions"])
    shapes: list[dict[str, Any]] = []
    for q in decision.questions:
        if q.type is QuestionType.NOUL:
            shapes.append({"type": "predicate", "name": q.id})
        elif q.type is QuestionType.CHOICE:
            shapes.append({"type": "choice", "name": q.id, "values": list(q.options)})
        else:
            shapes.append({"type": "score", "name": q.id, "labels": list(q.options)})
    return shapes


def openai_answer(shape: Mapping[str, Any], labels: Sequence[str], probs: Mapping[str, float],
                  label_mass: float | None, confidence: float | None = None) -> dict[str, Any]:
    """One answer in OpenAI's shape from dreads' mean probability per canvas label.

    ``confidence`` is vLLM's: the top probability x the label mass (how much of the model's
    probability fell on the labels at all). An answer from a decision endpoint passes the
    endpoint's own ``confidence``; with neither, the top probability."""
    ps = [float(probs.get(label, 0.0)) for label in labels]
    name = shape.get("name")
    if shape["type"] == "predicate":
        return {"type": "predicate", "name": name, "probability": ps[0]}
    top = max(range(len(ps)), key=ps.__getitem__)
    if confidence is None:
        confidence = ps[top] * (float(label_mass) if label_mass is not None else 1.0)
    if shape["type"] == "choice":
        values = shape["values"]
        return {"type": "choice", "name": name, "choice": values[top],
                "probabilities": [{"value": v, "probability": p}
                                  for v, p in zip(values, ps, strict=True)],
                "confidence": confidence}
    return {"type": "score", "name": name, "score": sum(i * p for i, p in enumerate(ps)),
            "probabilities": [{"value": i, "label": label, "probability": p}
                              for i, (label, p) in enumerate(zip(shape["labels"], ps,
                                                                 strict=True))],
            "confidence": confidence}


def openai_answers(decision: Decision, answers: Iterable[Answer]) -> list[dict[str, Any]]:
    """The decision's answers in OpenAI's shape, in question order."""
    by_id = {a.question_id: a for a in answers}
    out = []
    for question, shape in zip(decision.questions, openai_questions(decision), strict=True):
        answer = by_id[question.id]
        out.append(openai_answer(shape, question.labels, answer.probs, answer.label_mass,
                                 answer.endpoint_confidence))
    return out



# -- asking a Decisions endpoint (dreads as the client) --------------------------------------

_DEFAULT_INSTRUCTIONS = {"predicate": "Is this true?", "choice": "Choose the option that fits.",
                         "score": "Choose the level that fits."}


def _asked_instructions(question: Question, kind: str) -> str:
    """The question's instructions; a noul's criteria (which OpenAI's predicate has no field
    for) are written after them; OpenAI needs non-empty instructions."""
    text = question.instructions
    if question.type is QuestionType.NOUL and any(question.descriptions):
        yes, no = question.descriptions
        criteria = "; ".join(f"{side}: {desc}" for side, desc in (("true", yes), ("false", no))
                             if desc)
        text = f"{text}\n({criteria})" if text else f"Answer true or false ({criteria})."
    return text or _DEFAULT_INSTRUCTIONS[kind]


def _level_description(label: str, option: str) -> str | None:
    """A level's description from its option text (``"label - description"``)."""
    prefix = f"{label} - "
    return option[len(prefix):] if option.startswith(prefix) else None


def _asked_question(question: Question, shape: Mapping[str, Any]) -> dict[str, Any]:
    kind = shape["type"]
    out: dict[str, Any] = {"type": kind, "instructions": _asked_instructions(question, kind)}
    if shape.get("name") is not None:
        out["name"] = shape["name"]
    if kind == "choice":
        out["choices"] = [{"value": v, **({"description": d} if d else {})}
                          for v, d in zip(shape["values"], question.descriptions, strict=True)]
    elif kind == "score":
        levels = []
        for label, option in zip(shape["labels"], question.options, strict=True):
            text = _level_description(label, option)
            levels.append({"label": label, **({"description": text} if text else {})})
        out["levels"] = levels
    return out


def decisions_request(decision: Decision, model: str) -> dict[str, Any]:
    """The ``POST /v1/decisions`` body that asks every question of ``decision`` at once: the
    request's own shapes for a decision that came as one, else noul -> predicate, choice ->
    string values, score -> levels. A state that is not text is written as JSON."""
    shapes = openai_questions(decision)
    return {"model": model, "input": serialize_state(decision.state),
            "questions": [_asked_question(q, s)
                          for q, s in zip(decision.questions, shapes, strict=True)]}


def _by_value(question: Question, shape: Mapping[str, Any], raw: Mapping[str, Any]
              ) -> list[float]:
    values = shape["values"]
    listed = raw.get("probabilities")
    if isinstance(listed, list):
        probs: list[float | None] = [None] * len(values)
        for item in listed:
            if not isinstance(item, Mapping):
                continue
            for i, v in enumerate(values):
                if _same(v, item.get("value")):
                    probs[i] = number(item.get("probability"), f"{question.id} probability")
        if any(p is None for p in probs):
            raise MalformedResponse(f"question {question.id!r}: probabilities do not cover "
                                    f"every choice {json.dumps(values)}")
        return [p for p in probs if p is not None]
    for i, v in enumerate(values):
        if _same(v, raw.get("choice")):
            return [1.0 if j == i else 0.0 for j in range(len(values))]
    raise MalformedResponse(f"question {question.id!r}: choice {raw.get('choice')!r} is not one "
                            f"of {json.dumps(values)}")


def _by_level(question: Question, raw: Mapping[str, Any]) -> list[float]:
    n = len(question.labels)
    listed = raw.get("probabilities")
    if isinstance(listed, list) and len(listed) == n:
        probs = [0.0] * n
        for pos, item in enumerate(listed):
            item = item if isinstance(item, Mapping) else {}
            index = item.get("value", pos)
            if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < n:
                raise MalformedResponse(f"question {question.id!r}: level {index!r} is not "
                                        f"0..{n - 1}")
            probs[index] = number(item.get("probability"), f"{question.id} probability")
        return probs
    level = round(number(raw.get("score"), f"question {question.id!r}: score"))
    if not 0 <= level < n:
        raise MalformedResponse(f"question {question.id!r}: score {level} is not 0..{n - 1}")
    return [1.0 if i == level else 0.0 for i in range(n)]


def _answer_probs(question: Question, shape: Mapping[str, Any], raw: Mapping[str, Any]
                  ) -> list[float]:
    if shape["type"] == "predicate":
        p_true = number(raw.get("probability"), f"question {question.id!r}: probability")
        return [p_true, 1.0 - p_true]
    if shape["type"] == "choice":
        return _by_value(question, shape, raw)
    return _by_level(question, raw)


def _dreads_diagnostics(body: Mapping[str, Any], qid: str) -> Mapping[str, Any]:
    """Another dreads serve's per-question diagnostics (its ``dreads`` extension)."""
    ext = body.get("dreads")
    questions = ext.get("questions") if isinstance(ext, Mapping) else None
    found = questions.get(qid) if isinstance(questions, Mapping) else None
    return found if isinstance(found, Mapping) else {}


def read_decisions(decision: Decision, body: Mapping[str, Any], *,
                   latency_ms: float = 0.0) -> EndpointAnswers:
    """The answers, draws and refusals of a ``/v1/decisions`` response to
    ``decisions_request(decision, ...)``: answers in question order; ``confidence`` and
    ``usage`` kept as the endpoint gave them; label mass unavailable unless the endpoint is a
    dreads serve (its ``dreads`` extension).

    Raises:
        MalformedResponse: answers missing, of another count, or unreadable.
    """
    raw_answers = body.get("answers")
    if not isinstance(raw_answers, list) or len(raw_answers) != len(decision.questions):
        got = len(raw_answers) if isinstance(raw_answers, list) else "no"
        raise MalformedResponse(f"the /v1/decisions response has {got} answers for "
                                f"{len(decision.questions)} questions")
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
            question, index, _answer_probs(question, shape, raw),
            label_mass=optional_number(diag.get("label_mass")),
            argmax_is_label=optional_flag(diag.get("argmax_is_label")),
            confidence=optional_number(raw.get("confidence")), latency_ms=latency_ms)
        answers.append(answer)
        draws.append(draw)
    return EndpointAnswers(tuple(answers), tuple(draws), tuple(refusals), usage_of(body))
