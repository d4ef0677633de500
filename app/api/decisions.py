"""OpenAI's Decisions API on ``dreads serve``: ``POST /v1/decisions``.

One request is one decision, answered at once through the same engine, settings and limits as
``/v1/systemone`` (dreads' multi-draw reads), in OpenAI's shape: answers in question order,
``model``, ``usage``; dreads' diagnostics in the ``dreads`` extension field, which the SDK
ignores. Errors are OpenAI's error object (``app.api.openai_shapes``). The input's
``input_image`` parts are read as OpenAI's hosted API reads them (vLLM 0.33 refuses them):
fetched and checked once, then read before the text. A request's answers are
recorded into a run with ``"dreads": {"run": NAME}`` in the body (the SDK's ``extra_body``) or
``DREADS_API_RECORD_RUN``, as on ``/v1/systemone``.
"""

from __future__ import annotations

import time
from typing import Any

import orjson
from fastapi import APIRouter, Depends, HTTPException, Request
from pydantic import ValidationError

from app.api.auth import require_key
from app.api.jev import diagnostics, input_tokens
from app.api.openai_shapes import DecisionOut, OpenAIRoute, openai_error_body
from app.api.request_limits import refuse_oversized
from app.api.schemas import RecordIn
from app.api.state import ApiState
from app.api.systemone import Api, _answer_while_connected, _check_record, _record
from app.engine import Decision, DrawRecord
from app.engine.openai.answers import openai_answers
from app.engine.openai.errors import DecisionsRequestError
from app.engine.openai.request import decision_from_request
from app.runs.answer import Answered
from app.store.queue import utcnow

__all__ = ["router"]

router = APIRouter(route_class=OpenAIRoute)

_ERROR = {"content": {"application/json": {"example": openai_error_body(
    400, "questions[0].choices: has 30 choices; dreads reads at most 26 (one letter A-Z "
    "each). Split the question, or group the choices.", param="questions[0].choices")}}}
_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"description": "A malformed body, or a question dreads cannot ask (more than 26 "
                         "choices, more than 10 levels, an image that cannot be read).",
          **_ERROR},
    401: {"description": "Wrong API key."}, 403: {"description": "No API key."},
    404: {"description": "Unknown model."}, 409: {"description": "The run to record into "
                                                                  "has other settings."},
    413: {"description": "Body over the limit."},
    503: {"description": "The model server is unavailable (retry-after)."},
    529: {"description": "Too many requests in flight (retry-after)."},
}


def _fail(message: str, param: str | None = None, *, status: int = 400,
          code: str | None = None) -> HTTPException:
    return HTTPException(status, openai_error_body(status, message, param=param, code=code))


async def _body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise _fail(f"We could not parse the JSON body of your request ({exc}). The body "
                    "must be a JSON object: {\"model\", \"input\", \"questions\"}.") from exc
    if not isinstance(body, dict):
        raise _fail("The body must be a JSON object: {\"model\", \"input\", \"questions\"}.")
    return body


def _check_model(body: dict[str, Any], api: ApiState) -> None:
    model = body.get("model")
    if model is None:
        raise _fail("model: is required", "model")
    if not isinstance(model, str):
        raise _fail("model: must be a string", "model")
    if model != api.model:
        raise _fail(f"The model {model!r} does not exist on this server. It answers with "
                    f"{api.model!r}.", "model", status=404, code="model_not_found")


def _record_in(body: dict[str, Any]) -> RecordIn | None:
    raw = body.get("dreads")
    if raw is None:
        return None
    try:
        return RecordIn.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        param = ".".join(map(str, ("dreads", *first["loc"])))
        raise _fail(f"{param}: {first['msg']}", param) from exc


def _decision(request_id: str, body: dict[str, Any], record: RecordIn | None) -> Decision:
    key = record.id if record and record.id else request_id
    try:
        return decision_from_request(key, body, cell=record.cell if record else None,
                                     expected=record.expected if record else None,
                                     extra_keys=("dreads",), expected_param="dreads.expected")
    except DecisionsRequestError as exc:
        raise _fail(exc.message, exc.param) from exc


def usage(draws: tuple[DrawRecord, ...]) -> dict[str, Any]:
    """OpenAI's usage: the prompt tokens of each canvas's first draw (later draws re-read a
    cached prompt), and the cached part of them."""
    tokens = input_tokens(draws)
    cached: dict[int, int] = {}
    for draw in draws:
        if draw.draw == 0 and draw.cached_tokens is not None:
            cached[draw.unit] = draw.cached_tokens
    return {"input_tokens": tokens,
            "input_tokens_details": {"cached_tokens": sum(cached.values()),
                                     "cache_write_tokens": 0},
            "output_tokens": 0, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": tokens}


def _response(api: ApiState, request_id: str, decision: Decision, decided: Answered,
              recorded: dict[str, Any] | None, simulator: bool) -> dict[str, Any]:
    return {
        "model": api.model,
        "answers": openai_answers(decision, decided.answers),
        "usage": usage(decided.draws),
        "dreads": {"request_id": request_id, "reads": decided.n_reads, "recorded": recorded,
                   "simulator": simulator,
                   "questions": {a.question_id: diagnostics(a) for a in decided.answers}},
    }


@router.post("/v1/decisions", response_model=DecisionOut, tags=["openai"], responses=_ERRORS,
             dependencies=[Depends(require_key)])
async def create_decision(request: Request, api: Api) -> dict[str, Any]:
    """OpenAI's Decisions API: predicate, choice and score questions about one input,
    answered in question order from dreads' multi-draw reads. ``"dreads": {"run": NAME}``
    records the answers into a run."""
    request_id: str = request.state.request_id
    body = await _body(request)
    with api.limiter.slot():
        _check_model(body, api)
        record = _record_in(body)
        decision = _decision(request_id, body, record)
        refuse_oversized(api, decision)
        run = record.run if record else api.config.record_run
        if run:
            await _check_record(api, run, record.id if record else None)
        started, t0 = utcnow(), time.perf_counter()
        decided = await _answer_while_connected(request, api, decision)
        latency_ms = (time.perf_counter() - t0) * 1000.0
        recorded = (await _record(api, run, decision, decided, started, latency_ms,
                                  source="POST /v1/decisions") if run else None)
    return _response(api, request_id, decision, decided, recorded,
                     api.simulator(await api.fingerprint()))
