"""The simulator's ``POST /v1/systemone`` (Jev's shape) and ``POST /v1/decisions`` (OpenAI's
Decisions API), served the way vLLM 0.33 serves them for DiffusionGemma (protocol.md section 10).

One read per question, or per joint canvas with ``joint: true``, and one draw: the read is
planned with dreads' vllm layout (the reproduction of vLLM's reader), sent through the
simulator's own read path (validation, faults, the GPU batch, the scorer and its answer key),
and folded as vLLM folds it. A ``/v1/systemone`` request with ``images`` reads on the chat
endpoint, its images fetched once and put before the text (a bad one is vLLM's 400
``media: ...``); ``audio`` and ``videos`` are refused, as vLLM refuses them for this model.
Request checks and messages follow vLLM's: a malformed body is a
400 "validation error", an unaskable question a 400 ``BadRequestError`` naming it, an unknown
model a 404. ``/v1/decisions`` reads its questions with dreads serve's question, choice and
level models (``app.engine.openai.model``), instructions narrowed to text as vLLM reads them;
one difference from vLLM: a ``description`` may be null. Answers carry vLLM's fields:
``diagnostics`` (``label_mass``, ``argmax_is_label``) and ``joint`` canvases on
``/v1/systemone``; ``confidence`` = top probability x label mass.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Annotated, Any, Literal

import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictStr,
    ValidationError,
    model_validator,
)

from app.engine import (
    Answer,
    Decision,
    DecisionFlow,
    Endpoint,
    Layout,
    PolicyName,
    Question,
    ReadMode,
    ReadSettings,
    ReadUnit,
    encode_body,
    parse_response,
    plan_decision,
)
from app.engine.kinds import CHOICE, kind_named, kind_names, kind_of, reader_text
from app.engine.openai.client import reader_options
from app.engine.openai.model import (
    MAX_LEVELS,
    MAX_OPENAI_CHOICES,
    ChoiceIn,
    ChoiceQuestionIn,
    LevelIn,
    PredicateIn,
    ScoreQuestionIn,
    Text,
)
from app.engine.openai.request import MAX_CHOICES
from app.engine.openai.shapes import ChoiceShape, PredicateShape, ScoreShape
from app.engine.types import ImageData
from app.engine.vllm_rules import VllmBadRequest, error_body
from app.errors import InputError, MalformedResponse, TemplateError
from app.sim.limits import Throttled

if TYPE_CHECKING:
    from app.sim.app import SimApp

__all__ = ["answer_decision_route"]

MAX_QUESTIONS = 64


class DecisionRefused(Exception):
    """vLLM's ``StructuredDecisionError``: a 400 ``BadRequestError`` with this message."""


# -- request models (vLLM's field rules) ----------------------------------------------------

class _Spec(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str
    instructions: Any = ""
    criteria: Any = None


class SystemOneRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str | None = None
    state: Any = Field(...)
    questions: dict[str, _Spec]
    instructions: str | None = None
    images: list[str] | None = None
    audio: list[str] | None = None
    videos: list[str] | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    joint: StrictBool = False
    cache_salt: str | None = None
    priority: int = 0
    request_id: str | None = None


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _InputText(_Strict):
    type: Literal["input_text"]
    text: StrictStr


class _Message(_Strict):
    role: Literal["user"]
    content: StrictStr | list[_InputText]
    type: Literal["message"] = "message"

    @model_validator(mode="before")
    @classmethod
    def _no_images(cls, data: Any) -> Any:
        """vLLM 0.33 reads text only on /v1/decisions: an image part is its value error."""
        if isinstance(data, dict) and isinstance(data.get("content"), list) and any(
                isinstance(part, dict) and part.get("type") == "input_image"
                for part in data["content"]):
            raise ValueError("Decisions supports text input only; images are not supported")
        return data


# The question, choice and level models are dreads serve's (OpenAI's shape), so the two
# readers cannot drift apart; vLLM 0.33 reads a question's instructions as text only, and a
# choice's or level's description as a string (null is a validation error there).

class _Choice(ChoiceIn):
    description: Text = ""


class _Level(LevelIn):
    description: Text = ""


class _Predicate(PredicateIn):
    instructions: Text


class _ChoiceQuestion(ChoiceQuestionIn):
    instructions: Text
    choices: list[_Choice] = Field(  # type: ignore[assignment]
        min_length=2, max_length=MAX_OPENAI_CHOICES)


class _ScoreQuestion(ScoreQuestionIn):
    instructions: Text
    levels: list[_Level] = Field(min_length=2, max_length=MAX_LEVELS)  # type: ignore[assignment]


DecisionQuestion = Annotated[_Predicate | _ChoiceQuestion | _ScoreQuestion,
                             Field(discriminator="type")]


class DecisionsRequest(_Strict):
    model: Text
    input: StrictStr | list[_Message]
    questions: list[DecisionQuestion] = Field(min_length=1, max_length=200)
    safety_identifier: Annotated[StrictStr, Field(max_length=128)] | None = None
    joint: StrictBool = False
    cache_salt: str | None = Field(default=None, min_length=1, max_length=1024)


# -- questions ------------------------------------------------------------------------------

def _question(qid: str, type_name: str, instructions: Any, criteria: Any) -> Question:
    try:
        kind = kind_named(type_name)
    except InputError:
        raise DecisionRefused(f"unknown question type {type_name!r}; supported: "
                              f"{sorted(kind_names())}") from None
    try:
        options = kind.reader_options(criteria)
    except ValueError as exc:
        raise DecisionRefused(f"question {qid!r}: {exc}") from None
    names = tuple(name for name, _ in options)
    if len(set(names)) != len(names):
        raise DecisionRefused(f"question {qid!r}: duplicate option names")
    if len(options) > kind.reader_limit:
        raise DecisionRefused(f"question {qid!r}: at most {kind.reader_limit} options for this "
                              "model")
    return Question(id=qid, type=kind.name, instructions=reader_text(instructions),
                    labels=kind.labels(names), options=names,
                    descriptions=tuple(desc for _, desc in options))


def _choice_question(index: int, instructions: str,
                     options: list[tuple[str, str | None]]) -> Question:
    if len(options) > MAX_CHOICES:
        raise DecisionRefused(f"This model supports at most {MAX_CHOICES} choices per question")
    names = tuple(n for n, _ in options)
    return Question(id=str(index), type=CHOICE.name, instructions=instructions,
                    labels=CHOICE.labels(names), options=names,
                    descriptions=tuple(d or None for _, d in options))


def _decision_question(index: int, question: Any) -> Question:
    return _choice_question(index, question.instructions,
                            reader_options(question.model_dump(mode="json")))


def _input_text(value: str | list[_Message]) -> str:
    if isinstance(value, str):
        return value
    return "\n\n".join(m.content if isinstance(m.content, str)
                       else "\n".join(part.text for part in m.content) for m in value)


# -- reading --------------------------------------------------------------------------------

Read = Callable[[bytes, bool], Awaitable[dict[str, Any]]]  #: (body, chat) -> response


class _Reads:
    """Each unit's one read, with the usage vLLM reports (counted once per canvas)."""

    def __init__(self) -> None:
        self.input_tokens = self.output_tokens = self.cached_tokens = 0
        self.canvases: list[tuple[ReadUnit, tuple[str, ...]]] = []

    def count(self, unit: ReadUnit, response: Mapping[str, Any], qids: tuple[str, ...]) -> None:
        usage = response.get("usage") or {}
        self.input_tokens += int(usage.get("prompt_tokens") or 0)
        self.output_tokens += int(usage.get("completion_tokens") or 0)
        self.cached_tokens += int((usage.get("prompt_tokens_details") or {})
                                  .get("cached_tokens") or 0)
        self.canvases.append((unit, qids))


def _settings(app: SimApp, joint: bool, *, images: bool = False) -> ReadSettings:
    """vLLM's reader's reads: prompt ids on the completions endpoint; with images, the chat
    endpoint (a completions request carries no images)."""
    opts = app.options
    return ReadSettings(model=opts.model, tokenizer=opts.tokenizer,
                        canvas_length=opts.canvas_length, layout=Layout.VLLM,
                        read_mode=ReadMode.JOINT if joint else ReadMode.ISOLATED,
                        policy=PolicyName.FIXED, fixed_draws=1,
                        endpoint=Endpoint.CHAT if images else Endpoint.COMPLETIONS)


def _check_fit(app: SimApp, unit: ReadUnit) -> None:
    thought = len(app.tokenizer.text.info.scaffold_ids)
    prompt, extra = len(unit.prompt_ids) - thought, thought + unit.width
    limit = app.options.max_model_len
    if prompt + extra > limit:
        raise DecisionRefused(f"the prompt has {prompt} tokens and a canvas read adds {extra}, "
                              f"more than max_model_len={limit}")


async def _read_all(app: SimApp, decision: Decision, joint: bool, read: Read,
                    images: tuple[ImageData, ...] = ()) -> tuple[tuple[Answer, ...], _Reads]:
    settings = _settings(app, joint, images=bool(images))
    try:
        plan = plan_decision(decision, settings, app.tokenizer.text, images=images)
    except TemplateError as exc:
        raise DecisionRefused(exc.message) from exc
    for unit in plan.units:
        _check_fit(app, unit)
    flow = DecisionFlow(plan, settings, vocab_size=app.vocab_size)
    requests = flow.next_requests()
    chat = settings.endpoint is Endpoint.CHAT
    responses = await asyncio.gather(*(read(encode_body(r.body), chat) for r in requests))
    reads = _Reads()
    for request, response in zip(requests, responses, strict=True):
        unit = plan.units[request.unit]
        try:
            flow.record(request, parse_response(settings.endpoint, response, request.slots))
        except MalformedResponse as exc:
            raise DecisionRefused(f"Failed to score the question: {exc.message}") from exc
        reads.count(unit, response, tuple(decision.questions[i].id
                                          for i in unit.question_indices))
    return flow.answers(), reads


def _probs(question: Question, answer: Answer) -> list[float]:
    return [answer.probs[label] for label in question.labels]


def _confidence(probs: list[float], answer: Answer) -> float:
    assert answer.label_mass is not None  # the simulator's own reads always fold it
    return max(probs) * answer.label_mass


def _jev_answer(question: Question, answer: Answer) -> dict[str, Any]:
    probs = _probs(question, answer)
    return kind_of(question).reader_answer(question, probs, _confidence(probs, answer))


def _joint_diagnostics(reads: _Reads) -> dict[str, Any]:
    return {"canvases": [{"questions": list(qids), "width": unit.width,
                          "slots": [s.position for s in unit.slots]}
                         for unit, qids in reads.canvases]}


async def _request_images(app: SimApp, urls: list[str] | None) -> tuple[ImageData, ...]:
    """The request's images, each fetched once (vLLM's reader: ``media: ...`` on a bad one)."""
    try:
        loaded = await app.load_images(tuple(urls or ()))
    except VllmBadRequest as exc:
        raise DecisionRefused(f"media: {exc.message}") from exc
    app.counters["images"] += len(loaded)
    return tuple(ImageData(ref=i.url, url=i.data_url, sha256=i.sha256, media_type=i.media_type,
                           width=i.width, height=i.height) for i in loaded)


async def _systemone(app: SimApp, raw: bytes, request_id: str, read: Read) -> dict[str, Any]:
    request = SystemOneRequest.model_validate_json(raw)
    if request.model is not None:
        app.check_model(request.model)
    questions = _systemone_questions(request)
    images = await _request_images(app, request.images)
    decision = Decision(id=request_id, state=request.state, questions=questions,
                        images=tuple(i.ref for i in images))
    joint = request.joint and len(questions) > 1
    answers, reads = await _read_asked(app, decision, joint, read, images)
    return {
        "id": f"decision-{request_id}", "object": "structured_decision",
        "created": int(time.time()), "model": app.options.model,
        "answers": {q.id: _jev_answer(q, answers[q.id]) if q.id in answers else _REFUSAL
                    for q in questions},
        "usage": {"input_tokens": reads.input_tokens, "output_tokens": reads.output_tokens},
        "diagnostics": {a.question_id: {"label_mass": a.label_mass,
                                        "argmax_is_label": a.argmax_is_label}
                        for a in answers.values()},
        "joint": _joint_diagnostics(reads) if joint else None,
    }


#: What a refused question is answered with (``--refuse-marker``: a hosted API's refusal).
_REFUSAL = {"type": "refusal", "refusal": "dreads sim: refused (--refuse-marker)"}


async def _read_asked(app: SimApp, decision: Decision, joint: bool, read: Read,
                      images: tuple[ImageData, ...] = ()) -> tuple[dict[str, Answer], _Reads]:
    """``_read_all`` of the questions not refused (``refuse_marker``), by question id."""
    marker = app.options.refuse_marker
    asked = tuple(q for q in decision.questions if not marker or marker not in q.instructions)
    app.counters["refused"] += len(decision.questions) - len(asked)
    if not asked:
        return {}, _Reads()
    answers, reads = await _read_all(app, replace(decision, questions=asked),
                                     joint and len(asked) > 1, read, images)
    return {a.question_id: a for a in answers}, reads


def _systemone_questions(request: SystemOneRequest) -> tuple[Question, ...]:
    if not request.questions:
        raise DecisionRefused("questions: needs at least one question")
    if len(request.questions) > MAX_QUESTIONS:
        raise DecisionRefused(f"questions: at most {MAX_QUESTIONS} for this model")
    media = [name for name, urls in (("audio", request.audio), ("video", request.videos))
             if urls]
    if media:  # vLLM's DiffusionGemma strategy reads images only
        raise DecisionRefused(f"this model does not take {', '.join(media)} inputs")
    if request.instructions:
        raise DecisionRefused("dreads sim does not simulate top-level instructions (a system "
                              "message); put them in the state or the questions")
    if (request.chat_template_kwargs or {}).get("enable_thinking"):
        raise DecisionRefused("a read is the reply's first token, so thinking must be off")
    questions = []
    for qid, spec in request.questions.items():
        if spec.model_extra:
            raise DecisionRefused(f"question {qid!r}: unknown field(s) {sorted(spec.model_extra)}")
        if not qid:
            raise DecisionRefused("question ids must be non-empty")
        questions.append(_question(qid, spec.type, spec.instructions, spec.criteria))
    return tuple(questions)


def _openai_answer(question: Any, answer: Answer, read_question: Question) -> dict[str, Any]:
    """OpenAI's answer to ``question``, in the shapes of ``app.engine.openai.shapes``."""
    probs = _probs(read_question, answer)
    confidence = _confidence(probs, answer)
    if isinstance(question, _Predicate):  # vLLM's reader asks it as (false, true)
        return PredicateShape(question.name).answer([probs[1], probs[0]], confidence)
    if isinstance(question, _ChoiceQuestion):
        values = tuple(choice.value for choice in question.choices)
        return ChoiceShape(question.name, values).answer(probs, confidence)
    labels = tuple(level.label for level in question.levels)
    return ScoreShape(question.name, labels).answer(probs, confidence)


async def _decisions(app: SimApp, raw: bytes, request_id: str, read: Read) -> dict[str, Any]:
    request = DecisionsRequest.model_validate_json(raw)
    app.check_model(request.model)
    if len(request.questions) > MAX_QUESTIONS:
        raise DecisionRefused(f"questions: at most {MAX_QUESTIONS} for this model")
    questions = tuple(_decision_question(i, q) for i, q in enumerate(request.questions))
    decision = Decision(id=request_id, state=_input_text(request.input), questions=questions)
    answers, reads = await _read_asked(app, decision, request.joint and len(questions) > 1,
                                       read)
    return {
        "model": app.options.model,
        "answers": [_openai_answer(q, answers[rq.id], rq) if rq.id in answers
                    else {**_REFUSAL, "name": q.name}
                    for q, rq in zip(request.questions, questions, strict=True)],
        "usage": {"input_tokens": reads.input_tokens,
                  "input_tokens_details": {"cached_tokens": reads.cached_tokens,
                                           "cache_write_tokens": 0},
                  "output_tokens": reads.output_tokens,
                  "output_tokens_details": {"reasoning_tokens": 0},
                  "total_tokens": reads.input_tokens + reads.output_tokens},
    }


# -- the route ------------------------------------------------------------------------------

#: pydantic's own location segments (a union branch's type), which vLLM leaves out of ``loc``
_INTERNAL_LOC = frozenset({"str", "int", "float", "bool", "list", "dict", "none", "union",
                           "tagged-union", "function-before", "function-after", "nullable"})


def _loc(loc: tuple[Any, ...]) -> str:
    """A location as vLLM writes it: dotted, without pydantic's union-branch segments."""
    parts = [str(p) for p in ("body", *loc)
             if not any(c in str(p) for c in "[](){}") and str(p).lower() not in _INTERNAL_LOC]
    return ".".join(parts)


def _validation_error(exc: ValidationError) -> dict[str, Any]:
    errors = exc.errors(include_url=False, include_input=False)
    label = "error" if len(errors) == 1 else "errors"
    lines = [f"  {{'type': {e['type']!r}, 'loc': {_loc(e['loc'])!r}, 'msg': {e['msg']!r}}}"
             for e in errors[:10]]
    param = _loc(errors[0]["loc"]) if errors else None
    message = f"{len(errors)} validation {label}:\n" + "\n".join(lines)
    return error_body(message, param, kind="Bad Request")


def _request_id(scope: Mapping[str, Any], raw: bytes) -> str:
    headers = dict(scope.get("headers") or ())
    if b"x-request-id" in headers:
        return str(headers[b"x-request-id"].decode("latin-1"))
    try:
        given = orjson.loads(raw).get("request_id")
    except (orjson.JSONDecodeError, AttributeError):
        given = None
    return str(given) if isinstance(given, str) and given else uuid.uuid4().hex


async def answer_decision_route(app: SimApp, path: str, raw: bytes, scope: Mapping[str, Any],
                                receive: Any) -> tuple[int, Any]:
    """``POST /v1/systemone`` or ``POST /v1/decisions``: (status, JSON body)."""
    from app.sim.app import _Reply

    app.counters["requests"] += 1
    app.counters["decisions"] += 1

    async def read(body: bytes, chat: bool) -> dict[str, Any]:
        return await app.serve_read(body, chat=chat, receive=receive)

    handler = _systemone if path == "/v1/systemone" else _decisions
    try:
        with app.limits.admit():
            answered = await handler(app, raw, _request_id(scope, raw), read)
        app.counters["decisions_answered"] += 1
        return 200, answered
    except Throttled as exc:
        app.counters["throttled"] += 1
        raise _Reply(429, error_body(exc.why, None, 429),
                     {"retry-after": f"{exc.retry_after_s:.3f}"}) from exc
    except ValidationError as exc:
        app.counters["rejected"] += 1
        raise _Reply(400, _validation_error(exc)) from exc
    except DecisionRefused as exc:
        app.counters["rejected"] += 1
        raise _Reply(400, error_body(str(exc), None)) from exc
