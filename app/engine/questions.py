"""Job lines -> ``Decision``: the Jev question shapes, canvas labels, expected answers.

Two line shapes are accepted:

- dreads: ``{"id", "cell"?, "state", "questions": {qid: spec}, "expected"?: {qid: value},
  "images"?: [ref, ...]}``
- OpenAI batch: ``{"custom_id", "body": {"state", "questions", "images"?, ...}}`` with ``cell``
  and ``expected`` at the top level, inside ``body`` or inside a ``metadata`` object.

``images`` are references (http(s) URLs, ``file://`` URLs, data URLs), checked here for their
form only; ``app.images`` fetches and checks them. A decision with images may have a null
state (the questions are about the pictures).

A question's ``type`` names its kind (``app.engine.kinds``), which reads its ``criteria`` and
gives its labels: Jev's ``noul`` (labels yes/no, optional ``criteria: {"true", "false"}``),
``choice`` (``criteria``: option name -> description or null; labels A, B, ... by position)
and ``score`` (``criteria``: ordered level descriptions; labels 1..9, letters past 9 levels),
and any kind registered since.
As in Jev, instructions and descriptions may be text or any JSON object or array (written into
the prompt as JSON), and instructions may be left out of a choice or score question, or of a
noul question whose criteria describe an outcome.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
from app.engine.kinds import QuestionKind, kind_named, kind_of
from app.engine.kinds.base import as_text
from app.engine.limits import MAX_CELL_CHARS, MAX_ID_CHARS, check_json, check_text
from app.engine.openai.shapes import QuestionShape, shape_from_json
from app.engine.types import Decision, Question
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


def _check_id(kind: str, value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"{kind} id must be a non-empty string, got {value!r:.60}")
    if ":" in value or "\n" in value or "\r" in value:
        raise InputError(f"{kind} id {value[:60]!r} contains ':' or a newline; remove them")
    return check_text(f"{kind} id {value[:60]!r}", value, MAX_ID_CHARS)


def _build_question(qid: str, spec: Any) -> Question:
    if not isinstance(spec, Mapping):
        raise InputError("must be an object with 'type' and 'instructions'")
    check_fields(spec, QUESTION_FIELDS, what="a question")
    kind = kind_named(spec.get("type"))
    options, descs = kind.parse_criteria(spec.get("criteria"))
    instructions = _instructions(kind, spec.get("instructions"), descs)
    return Question(id=qid, type=kind.name, instructions=instructions,
                    labels=kind.labels(options), options=options, descriptions=descs)


def _instructions(kind: QuestionKind, raw: Any, descs: tuple[str | None, ...]) -> str:
    """The user's question text (JSON content as JSON); "" when left out (Jev allows it)."""
    text = as_text(raw, "'instructions'")
    if text is not None and not text.strip():
        raise InputError("'instructions' must not be blank; leave it out or write the question")
    if text is not None:
        return text
    kind.check_instructions(descs)
    return ""


def parse_question(qid: str, spec: Mapping[str, Any]) -> Question:
    """Parse one question spec (its ``type`` a registered kind's name).

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


def normalize_expected(question: Question, value: Any) -> str:
    """The canvas label of an expected value (label, option name, level text or index)."""
    label = kind_of(question).expected_label(question, value)
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
    check_text(f"'images'[{index}]", ref, len(ref))
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
        if cell is not None:
            check_text("'cell'", cell, MAX_CELL_CHARS)
        for name, value in (("'state'", state), ("'questions'", questions),
                            ("'expected'", expected)):
            check_json(name, value)
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
                        "questions": {"c": {"type": NOUL.name, "instructions": "Conflict?"}}})

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
    spec: dict[str, Any] = {"type": question.type}
    if question.instructions:
        spec["instructions"] = question.instructions
    criteria = kind_of(question).criteria_of(question)
    if criteria is not None:
        spec["criteria"] = criteria
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
