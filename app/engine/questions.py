"""Job lines -> ``Decision``: the Jev question shapes, canvas labels, expected answers.

Two line shapes are accepted:

- dreads: ``{"id", "cell"?, "state", "questions": {qid: spec}, "expected"?: {qid: value},
  "images"?: [ref, ...]}``
- OpenAI batch: ``{"custom_id", "body": {"state", "questions", "images"?, ...}}`` with ``cell``
  and ``expected`` at the top level, inside ``body`` or inside a ``metadata`` object.

``images`` are references (http(s) URLs, ``file://`` URLs, data URLs), checked here for their
form only; ``app.images`` fetches and checks them. A decision with images may have a null
state (the questions are about the pictures).

Question shapes (Jev): ``noul`` (labels yes/no, optional ``criteria: {"true", "false"}``),
``choice`` (``criteria``: option name -> description or null; labels A, B, ... by position)
and ``score`` (``criteria``: ordered level descriptions; labels 1..9, letters past 9 levels).
As in Jev, instructions and descriptions may be text or any JSON object or array (written into
the prompt as JSON), and instructions may be left out of a choice or score question, or of a
noul question whose criteria describe an outcome.
"""

from __future__ import annotations

import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import orjson

from app.engine.fields import (
    BATCH_BODY_FIELDS,
    BATCH_LINE_FIELDS,
    LINE_FIELDS,
    QUESTION_FIELDS,
    check_fields,
)
from app.engine.openai.shapes import QuestionShape, shape_from_json
from app.engine.prompt import serialize_state
from app.engine.types import Decision, Question, QuestionType
from app.errors import BadLine, InputError

__all__ = [
    "QuestionsMemo",
    "SpecsMemo",
    "answer_label",
    "build_decision",
    "decision_from_payload",
    "decision_payload",
    "line_id",
    "parse_decision",
    "parse_images",
    "parse_question",
    "questions_spec",
]

MAX_LABELS = 26
LETTERS = tuple(string.ascii_uppercase)
DIGITS = tuple(str(i) for i in range(1, 10))
_TYPES = ", ".join(repr(t.value) for t in QuestionType)
_NOUL_TRUE = {"yes", "true", "y", "1"}
_NOUL_FALSE = {"no", "false", "n", "0"}


def _check_id(kind: str, value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"{kind} id must be a non-empty string, got {value!r}")
    if ":" in value or "\n" in value or "\r" in value:
        raise InputError(f"{kind} id {value!r} contains ':' or a newline; remove them")
    return value


def _as_text(value: Any, what: str) -> str | None:
    """Text as is; a JSON object or array as its JSON text (Jev content); None stays None."""
    if value is None:
        return None
    if not isinstance(value, (str, dict, list)):
        raise InputError(f"{what} must be text, a JSON object or array, or null; got "
                         f"{type(value).__name__}")
    return serialize_state(value)


def _noul(criteria: Any) -> tuple[tuple[str, ...], tuple[str | None, ...]]:
    if criteria is None:
        return ("yes", "no"), (None, None)
    if not isinstance(criteria, Mapping) or set(criteria) - {"true", "false"}:
        raise InputError('noul criteria must be {"true": text, "false": text}')
    descs = (_as_text(criteria.get("true"), "criteria 'true'"),
             _as_text(criteria.get("false"), "criteria 'false'"))
    return ("yes", "no"), descs


def _count_ok(n: int, noun: str) -> None:
    if not 1 <= n <= MAX_LABELS:
        raise InputError(f"{noun} needs 1 to {MAX_LABELS} entries in 'criteria', got {n}")


def _choice(criteria: Any) -> tuple[tuple[str, ...], tuple[str | None, ...]]:
    if isinstance(criteria, Mapping):
        names = [str(k) for k in criteria]
        descs = tuple(_as_text(v, f"description of option {k!r}") for k, v in criteria.items())
    elif isinstance(criteria, list) and all(isinstance(x, str) for x in criteria):
        names, descs = list(criteria), tuple(None for _ in criteria)
    else:
        raise InputError("choice criteria must map option name -> description (or null)")
    _count_ok(len(names), "choice")
    if len(set(names)) != len(names):
        raise InputError("choice option names must be distinct")
    return tuple(names), descs


def _score(criteria: Any) -> tuple[tuple[str, ...], tuple[str | None, ...]]:
    if not isinstance(criteria, list) or not all(isinstance(x, (str, dict, list))
                                                  for x in criteria):
        raise InputError("score criteria must be an ordered list of level descriptions")
    _count_ok(len(criteria), "score")
    levels = tuple(serialize_state(x) for x in criteria)
    if len(set(levels)) != len(levels):
        raise InputError("score levels must be distinct")
    return levels, levels


def score_labels(n: int) -> tuple[str, ...]:
    """Canvas labels of an n-level score: 1..9, letters when there are more than 9 levels."""
    return DIGITS[:n] if n <= len(DIGITS) else LETTERS[:n]


_SHAPES: dict[QuestionType, Callable[[Any], tuple[tuple[str, ...], tuple[str | None, ...]]]] = {
    QuestionType.NOUL: _noul, QuestionType.CHOICE: _choice, QuestionType.SCORE: _score,
}


def _question_type(spec: Mapping[str, Any]) -> QuestionType:
    raw = spec.get("type")
    try:
        return QuestionType(raw if isinstance(raw, str) else "")
    except ValueError:
        raise InputError(f"unknown type {raw!r}; use one of {_TYPES}") from None


def _build_question(qid: str, spec: Any) -> Question:
    if not isinstance(spec, Mapping):
        raise InputError("must be an object with 'type' and 'instructions'")
    check_fields(spec, QUESTION_FIELDS, what="a question")
    qtype = _question_type(spec)
    if qtype is not QuestionType.NOUL and spec.get("criteria") is None:
        raise InputError(f"a {qtype.value} question needs 'criteria'")
    options, descs = _SHAPES[qtype](spec.get("criteria"))
    instructions = _instructions(qtype, spec.get("instructions"), descs)
    if qtype is QuestionType.CHOICE:
        labels = LETTERS[: len(options)]
    elif qtype is QuestionType.SCORE:
        labels = score_labels(len(options))
    else:
        labels = options
    return Question(id=qid, type=qtype, instructions=instructions, labels=labels,
                    options=options, descriptions=descs)


def _instructions(qtype: QuestionType, raw: Any, descs: tuple[str | None, ...]) -> str:
    """The user's question text (JSON content as JSON); "" when left out (Jev allows it)."""
    text = _as_text(raw, "'instructions'")
    if text is not None and not text.strip():
        raise InputError("'instructions' must not be blank; leave it out or write the question")
    if text is not None:
        return text
    if qtype is QuestionType.NOUL and all(d is None for d in descs):
        raise InputError("a noul question needs 'instructions', or 'criteria' describing what "
                         "counts as yes or no")
    return ""


def parse_question(qid: str, spec: Mapping[str, Any]) -> Question:
    """Parse one Jev question spec (``noul``, ``choice``, ``score``).

    Args:
        qid: the user's question id (no ':' or newline).
        spec: ``{"type", "instructions", "criteria"?}``.

    Returns:
        The question with its canvas labels, option names and descriptions.

    Raises:
        InputError: the message names the question and the problem.
    """
    qid = _check_id("question", qid)
    try:
        return _build_question(qid, spec)
    except InputError as exc:
        raise InputError(f"question {qid!r}: {exc.message}") from None


def _noul_expected(value: Any) -> str | None:
    if isinstance(value, bool):
        return "yes" if value else "no"
    text = str(value).strip().lower()
    return "yes" if text in _NOUL_TRUE else "no" if text in _NOUL_FALSE else None


def _indexed_expected(question: Question, value: Any) -> str | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and question.type is QuestionType.SCORE:
        return question.labels[value] if 0 <= value < len(question.labels) else None
    if not isinstance(value, str):
        return None
    if value in question.options:
        return question.labels[question.options.index(value)]
    return value if value in question.labels else None


def normalize_expected(question: Question, value: Any) -> str:
    """The canvas label of an expected value (label, option name, level text or index)."""
    if question.type is QuestionType.NOUL:
        label = _noul_expected(value)
    else:
        label = _indexed_expected(question, value)
    if label is None:
        allowed = ", ".join(repr(o) for o in question.options)
        raise InputError(f"expected value {value!r} of question {question.id!r} is not among "
                         f"its labels {list(question.labels)} or options ({allowed})")
    return label


_PREDICATE = {"yes": "true", "no": "false", True: "true", False: "false"}


def answer_label(question: Question, value: Any) -> str:
    """The canvas label a given answer names (an answer key's): the label itself, else what
    ``normalize_expected`` reads (option name, level text, index); yes/no (or a boolean) name
    the options of a true/false choice, an OpenAI predicate. Labels first, so that a label
    read again is the same label.

    Raises:
        InputError: the value is none of the question's labels or options.
    """
    if isinstance(value, str) and value in question.labels:
        return value
    if set(question.options) == {"true", "false"} and isinstance(value, str | bool):
        value = _PREDICATE.get(value.lower() if isinstance(value, str) else value, value)
    return normalize_expected(question, value)


#: Parsed question sets by their JSON text: a job file asks the same few question sets of
#: many states, and a set's parse depends on its JSON alone. The caller owns the memo.
QuestionsMemo = dict[bytes, tuple[Question, ...]]


def _parse_questions(raw: Any, memo: QuestionsMemo | None = None) -> tuple[Question, ...]:
    if not isinstance(raw, Mapping) or not raw:
        raise InputError("'questions' must be a non-empty object {question id: spec}")
    if memo is None:
        return tuple(parse_question(qid, spec) for qid, spec in raw.items())
    key = orjson.dumps(raw)  # key order kept: the questions' order is part of the set
    parsed = memo.get(key)
    if parsed is None:
        parsed = memo[key] = tuple(parse_question(qid, spec) for qid, spec in raw.items())
    return parsed


def _parse_expected(raw: Any, questions: tuple[Question, ...]) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise InputError("'expected' must be an object {question id: label or option}")
    by_id = {q.id: q for q in questions}
    out: dict[str, str] = {}
    for qid, value in raw.items():
        if qid not in by_id:
            raise InputError(f"'expected' names question {qid!r}, which is not among the "
                             f"questions {list(by_id)}")
        if value is not None:
            out[qid] = normalize_expected(by_id[qid], value)
    return out


_IMAGE_SCHEMES = ("http://", "https://", "file://", "data:")


def _image_ref(index: int, ref: Any) -> str:
    if not isinstance(ref, str) or not ref.strip():
        raise InputError(f"'images'[{index}] must be a URL string, got {ref!r:.60}")
    if not ref[:8].lower().startswith(_IMAGE_SCHEMES):
        raise InputError(f"'images'[{index}] {ref[:60]!r} is not an http(s), file:// or data: "
                         "URL; give each image as one of those")
    return ref


def parse_images(raw: Any) -> tuple[str, ...]:
    """A line's ``images``: a list of http(s), ``file://`` or data URLs (their form only);
    () when absent.

    Raises:
        InputError: not a list of such URLs.
    """
    if raw is None:
        return ()
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list):
        raise InputError("'images' must be a list of image URLs (http(s), file:// or data:)")
    return tuple(_image_ref(i, ref) for i, ref in enumerate(raw))


def build_decision(did: Any, state: Any, questions: Any, cell: Any = None,
                   expected: Any = None, images: Any = None) -> Decision:
    """A decision from dreads' parts: id, state, ``{question id: spec}``, cell, expected,
    images (references).

    Raises:
        InputError: the message names the decision and question and says what is wrong.
    """
    return _build(did, state, questions, cell, expected, images=images)


def _build(did: Any, state: Any, questions: Any, cell: Any, expected: Any,
           memo: QuestionsMemo | None = None, *, images: Any = None) -> Decision:
    did = _check_id("decision", did)
    try:
        refs = parse_images(images)
        if state is None and not refs:
            raise InputError("missing 'state' (a string or any JSON value; it may be null "
                             "only for a decision with 'images')")
        if cell is not None and not isinstance(cell, str):
            raise InputError(f"'cell' must be a string, got {type(cell).__name__}")
        parsed = _parse_questions(questions, memo)
        return Decision(id=did, state=state, questions=parsed, cell=cell,
                        expected=_parse_expected(expected, parsed), images=refs)
    except InputError as exc:
        raise InputError(f"decision {did!r}: {exc.message}") from None


def _pick(key: str, *sources: Any) -> Any:
    for src in sources:
        if isinstance(src, Mapping) and src.get(key) is not None:
            return src[key]
    return None


def _from_line(obj: Mapping[str, Any], line_no: int | None,
               memo: QuestionsMemo | None) -> Decision:
    if not isinstance(obj, Mapping):
        raise InputError("a line must be a JSON object")
    if "url" in obj or "body" in obj or "input" in obj:  # maybe OpenAI's Decisions shape
        from app.engine.openai.lines import is_decisions_line, parse_decisions_line

        if is_decisions_line(obj):
            return parse_decisions_line(obj, line_no=line_no)
    if "custom_id" in obj or "body" in obj:
        check_fields(obj, BATCH_LINE_FIELDS, what="an OpenAI-batch line")
        body = obj.get("body")
        if not isinstance(body, Mapping):
            raise InputError("an OpenAI-batch line needs 'body': {\"state\", \"questions\"}")
        check_fields(body, BATCH_BODY_FIELDS, what="an OpenAI-batch line's body")
        sources = (obj, body, obj.get("metadata"), body.get("metadata"))
        return _build(obj.get("custom_id"), body.get("state"), body.get("questions"),
                      _pick("cell", *sources), _pick("expected", *sources), memo,
                      images=body.get("images"))
    if "id" not in obj:
        raise InputError("missing 'id' (or 'custom_id' for an OpenAI-batch line)")
    check_fields(obj, LINE_FIELDS, what="a line")
    return _build(obj["id"], obj.get("state"), obj.get("questions"), obj.get("cell"),
                  obj.get("expected"), memo, images=obj.get("images"))


def line_id(obj: Any) -> str | None:
    """The decision id a job line gives (``id``, ``custom_id`` or ``metadata.id``), as text,
    even when the rest of the line is not a decision (None: it gives none)."""
    if not isinstance(obj, Mapping):
        return None
    body = obj.get("body")
    sources = (obj, obj, obj.get("metadata"), body.get("metadata") if isinstance(body, Mapping)
               else None)
    for source, key in zip(sources, ("custom_id", "id", "id", "id"), strict=True):
        value = source.get(key) if isinstance(source, Mapping) else None
        if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value):
            return str(value)
    return None


def parse_decision(obj: Mapping[str, Any], *, line_no: int | None = None,
                   memo: QuestionsMemo | None = None) -> Decision:
    """Parse one job line (dreads or OpenAI-batch shape) into a Decision. With ``memo`` (one
    per job file), each distinct question set is parsed and checked once.

    Example::

        parse_decision({"id": "d1", "state": "...",
                        "questions": {"c": {"type": "noul", "instructions": "Conflict?"}}})

    Raises:
        BadLine: when ``line_no`` is given; ``InputError`` otherwise. The message names the
            decision and question and says what is wrong.
    """
    try:
        return _from_line(obj, line_no, memo)
    except InputError as exc:
        if line_no is None:
            raise
        raise BadLine(exc.message, line_no=line_no) from None


def _spec_of(question: Question) -> dict[str, Any]:
    spec: dict[str, Any] = {"type": question.type.value}
    if question.instructions:
        spec["instructions"] = question.instructions
    if question.type is QuestionType.CHOICE:
        spec["criteria"] = dict(zip(question.options, question.descriptions, strict=True))
    elif question.type is QuestionType.SCORE:
        spec["criteria"] = list(question.options)
    elif any(d is not None for d in question.descriptions):
        spec["criteria"] = {"true": question.descriptions[0], "false": question.descriptions[1]}
    return spec


#: Question sets' stored specs, by the (frozen) questions; the caller owns the memo.
SpecsMemo = dict[tuple[Question, ...], dict[str, Any]]


def questions_spec(questions: tuple[Question, ...]) -> dict[str, Any]:
    """``{question id: spec}`` as stored and as sent to a decision endpoint."""
    return {q.id: _spec_of(q) for q in questions}


def _image_records(decision: Decision, images: Sequence[Mapping[str, Any]] | None
                   ) -> list[Mapping[str, Any]]:
    """The stored records of the decision's images: those given (``app.images``' records of
    the images checked at submit, one per reference, in order), else the bare references."""
    if images is None:
        return [{"ref": ref} for ref in decision.images]
    refs = tuple(record.get("ref") for record in images)
    if refs != decision.images:
        raise ValueError(f"decision {decision.id!r}: the image records do not match its "
                         "images")
    return list(images)


def decision_payload(decision: Decision, *, images: Sequence[Mapping[str, Any]] | None = None,
                     memo: SpecsMemo | None = None) -> dict[str, Any]:
    """JSON-able payload for storage: ``{"state", "questions", "expected"}``, ``"openai"``
    for a decision asked in OpenAI's Decisions shape, and ``"images"`` for a decision with
    images: ``images`` (its records as checked at submit: ``{"ref", "sha256", "media_type",
    "width", "height", "bytes"}``), else ``{"ref"}`` alone. With ``memo``, decisions asking the
    same questions share one (unmodified) spec object.

    ``decision_from_payload(decision.id, decision.cell, payload)`` gives the decision back.
    """
    specs = memo.get(decision.questions) if memo is not None else None
    if specs is None:
        specs = questions_spec(decision.questions)
        if memo is not None:
            memo[decision.questions] = specs
    payload = {
        "state": decision.state,
        "questions": specs,
        "expected": dict(decision.expected),
    }
    if decision.openai is not None:
        payload["openai"] = {"questions": [shape.to_json() for shape in decision.openai]}
    if decision.images:
        payload["images"] = _image_records(decision, images)
    return payload


def _stored_refs(payload: Mapping[str, Any]) -> list[Any] | None:
    """The references of a payload's ``images`` records (a record may be a bare string)."""
    raw = payload.get("images")
    if not isinstance(raw, list):
        return raw
    return [item.get("ref") if isinstance(item, Mapping) else item for item in raw]


def _stored_expected(decision: Decision, raw: Any) -> dict[str, str]:
    """Stored expected values are canvas labels: read as labels first (a score level whose
    text is a digit, or a choice option named like a letter, is not taken for another)."""
    if not isinstance(raw, Mapping):
        return dict(_parse_expected(raw, decision.questions))
    by_id = {q.id: q for q in decision.questions}
    out: dict[str, str] = {}
    for qid, value in raw.items():
        question = by_id.get(qid)
        if question is not None and isinstance(value, str) and value in question.labels:
            out[qid] = value
        elif value is not None:
            out.update(_parse_expected({qid: value}, decision.questions))
    return out


def decision_from_payload(key: str, cell: str | None, payload: Mapping[str, Any]) -> Decision:
    """Inverse of ``decision_payload``.

    Raises:
        InputError: the payload is not a valid decision.
    """
    decision = _build(key, payload.get("state"), payload.get("questions"), cell, None,
                      images=_stored_refs(payload))
    try:
        expected = _stored_expected(decision, payload.get("expected"))
    except InputError as exc:
        raise InputError(f"decision {decision.id!r}: {exc.message}") from None
    return replace(decision, expected=expected, openai=_stored_shapes(decision, payload))


def _stored_shapes(decision: Decision, payload: Mapping[str, Any]
                   ) -> tuple[QuestionShape, ...] | None:
    """The stored ``{"openai": {"questions": [...]}}`` as typed shapes, one per question."""
    openai = payload.get("openai")
    if not isinstance(openai, Mapping):
        return None
    raw = openai.get("questions")
    if not isinstance(raw, list) or len(raw) != len(decision.questions):
        raise InputError(f"decision {decision.id!r}: the stored OpenAI shapes do not match "
                         "its questions")
    try:
        return tuple(shape_from_json(shape) for shape in raw)
    except InputError as exc:
        raise InputError(f"decision {decision.id!r}: {exc.message}") from None
