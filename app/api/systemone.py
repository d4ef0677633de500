"""Jev's surface: ``POST /v1/systemone``, ``GET /v1/models`` (OpenAI's list shape too); and
``GET /health``.

A ``/v1/systemone`` request is one decision answered at once through the engine (not through
the queue), on the server's read settings; its answers can be recorded into a run. Its images
(``images``, Jev's ``assets``) are fetched and checked once (``app.images``), before any read,
and every read of the decision carries them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request

from app.api.auth import require_key
from app.api.errors import api_error, raise_for, unaskable
from app.api.jev import (
    ALIASES,
    Unaskable,
    answers_of,
    diagnostics,
    input_tokens,
    to_decision,
)
from app.api.request_limits import refuse_oversized
from app.api.schemas import ModelsOut, SystemOneIn, SystemOneOut
from app.api.state import ApiState
from app.api.systemone_body import Parts, read_systemone_body
from app.engine import Decision, ReadMode, redact_url
from app.engine.template import PromptTooLong
from app.engine.types import ImageData
from app.errors import DreadsError, ImageError, InputError, RunSettingsMismatch, StoreError
from app.images import fetch_image_async
from app.images.limits import ByteBudget
from app.runs.answer import Answered, answer_decision
from app.runs.setting_names import api_words
from app.store.queue import utcnow

__all__ = ["router"]

log = logging.getLogger("dreads.api")

router = APIRouter()
_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"description": "A question that cannot be asked (plain-text detail), or an unknown "
                         "model (api_usage_error)."},
    401: {"description": "Wrong API key."}, 403: {"description": "No API key."},
    409: {"description": "The run to record into has other settings."},
    413: {"description": "Body over the limit."},
    503: {"description": "The model server is unavailable (retry-after)."},
    529: {"description": "Too many requests in flight (retry-after)."},
}


async def get_api(request: Request) -> ApiState:
    state: ApiState = request.app.state.api
    return state


Api = Annotated[ApiState, Depends(get_api)]


@router.get("/health", tags=["health"])
async def health(api: Api) -> dict[str, Any]:
    """Liveness, with what this server answers with. Never needs a key, never waits."""
    fingerprint = api.known_fingerprint()
    return {"status": "ok", "model": api.model, "upstream": redact_url(api.config.upstream),
            "upstream_ready": fingerprint is not None, "executor": api.executor.name,
            "in_flight": api.limiter.active,
            "simulator": api.simulator(fingerprint)}


@router.get("/v1/models", response_model=ModelsOut, tags=["jev"],
            dependencies=[Depends(require_key)])
async def models(api: Api) -> dict[str, Any]:
    """The served model, in OpenAI's list shape (``data``) and Jev's (``models``, with the Jev
    aliases that mean it; ``release_date``: the day this server started, as dreads cannot know
    the checkpoint's)."""
    day = api.started.isoformat()
    served = {"name": api.model, "release_date": day,
              "description": f"{api.model} through dreads diffusion reads (upstream "
                             f"{redact_url(api.config.upstream)})"}
    aliases = [{"name": alias, "release_date": day, "description": f"alias of {api.model}"}
               for alias in ALIASES]
    created = int(datetime.combine(api.started, datetime.min.time(), UTC).timestamp())
    return {"object": "list",
            "data": [{"id": api.model, "object": "model", "created": created,
                      "owned_by": "dreads"}],
            "models": [served, *aliases]}


def _check_model(name: str, api: ApiState) -> None:
    if name != api.model and name not in ALIASES:
        accepted = ", ".join(repr(n) for n in (api.model, *ALIASES))
        raise api_error(400, "api_usage_error",
                        f"Unknown model: {name}. This server answers with {accepted}.")


def _decision(request: Request, body: SystemOneIn, parts: Parts) -> Decision:
    try:
        return to_decision(request.state.request_id, body, parts=parts)
    except Unaskable as exc:
        raise unaskable(exc.message) from exc


def _check_joint(body: SystemOneIn, api: ApiState) -> None:
    """A request's ``joint``, when given, must be how this server reads (one read mode for
    every request, so recorded answers stay comparable)."""
    joint = api.settings.read_mode is ReadMode.JOINT
    if body.joint is not None and body.joint != joint and len(body.questions) > 1:
        mode = "jointly (one canvas)" if joint else "one question per canvas"
        raise unaskable(f"joint: {str(body.joint).lower()}, but this server reads {mode} "
                        f"(--read-mode {api.settings.read_mode}); send joint: "
                        f"{str(joint).lower()} or leave it out")


async def _images(api: ApiState, decision: Decision) -> tuple[ImageData, ...]:
    """The decision's images, each fetched and checked once, decoded in the server's pool (a
    400 naming the image, else)."""
    if not decision.images:
        return ()
    policy = api.config.images
    budget = ByteBudget(policy)  #: the request's images together

    async def one(ref: str) -> ImageData:
        async with api.fetches or contextlib.nullcontext():
            return await fetch_image_async(ref, policy=policy, pool=api.pool, budget=budget)

    try:  # the first image refused stops the others' fetches
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(one(ref)) for ref in decision.images]
    except BaseExceptionGroup as failed:
        refused = next((e for e in failed.exceptions if isinstance(e, ImageError)), None)
        if refused is None:
            raise failed.exceptions[0] from failed
        raise unaskable(refused.message) from None
    return tuple(task.result() for task in tasks)


async def _answer(api: ApiState, decision: Decision,
                  images: tuple[ImageData, ...] | None = None) -> Answered:
    """The decision answered; its images (None: not fetched yet) fetched first."""
    if images is None:
        images = await _images(api, decision)
    try:
        return await answer_decision(decision, api.settings, api.tokenizer, api.upstream,
                                     images=images, plan_pool=api.pool)
    except PromptTooLong as exc:  # refused before any read: the model server would refuse it
        raise_for(exc)
    except InputError as exc:  # the template cannot be read: unaskable as written
        raise unaskable(exc.message) from exc
    except DreadsError as exc:
        raise_for(exc)


async def _until_disconnected(request: Request) -> None:
    """Returns when the client hangs up (the body was read: the next message is the end)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _answer_while_connected(request: Request, api: ApiState, decision: Decision,
                                  images: tuple[ImageData, ...] | None = None) -> Answered:
    """``_answer`` (its images fetched first when not given), cancelled (its fetches and
    reads with it, up to vLLM, which aborts them) as soon as the client hangs up: an abandoned
    request, a client timeout before a retry, frees its slot and its work at once."""
    answer = asyncio.ensure_future(_answer(api, decision, images))
    gone = asyncio.ensure_future(_until_disconnected(request))
    try:
        await asyncio.wait({answer, gone}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:  # the server is stopping
        answer.cancel()
        raise
    finally:
        gone.cancel()
    if answer.done():
        return answer.result()
    answer.cancel()
    await asyncio.gather(answer, return_exceptions=True)
    log.info("%s: the client hung up; its reads were cancelled", request.state.request_id)
    raise api_error(499, "client_closed_request", "the client closed the request")


async def _check_record(api: ApiState, run: str, key: str | None) -> None:
    """Before any read: the run takes this server's answers and the id is new (else 409)."""
    try:
        await asyncio.to_thread(api.recorder.check, run, key)
    except RunSettingsMismatch as exc:
        raise api_error(409, "conflict_error", api_words(exc)) from exc
    except InputError as exc:
        raise api_error(409, "conflict_error", exc.message) from exc
    except DreadsError as exc:
        raise_for(exc)


async def _record(api: ApiState, run: str, decision: Decision, decided: Answered,
                  started: Any, latency_ms: float, source: str = "POST /v1/systemone"
                  ) -> dict[str, Any]:
    try:
        return await asyncio.to_thread(api.recorder.record, run, decision, decided,
                                       started=started, latency_ms=latency_ms, source=source)
    except (StoreError, InputError) as exc:
        log.warning("answers not recorded into run %s: %s", run, exc.message)
        return {"run": run, "id": decision.id, "error": exc.message}


_BODY = {"requestBody": {"required": True, "content": {
    "application/json": {"schema": {"$ref": "#/components/schemas/SystemOneIn"}},
    "multipart/form-data": {"schema": {"type": "object", "properties": {
        "request": {"$ref": "#/components/schemas/SystemOneIn"}},
        "additionalProperties": {"type": "string", "format": "binary"}}}}}}


@router.post("/v1/systemone", response_model=SystemOneOut, tags=["jev"], responses=_ERRORS,
             dependencies=[Depends(require_key)], openapi_extra=_BODY)
async def system_one(request: Request, api: Api) -> dict[str, Any]:
    """Answer named noul, choice and score questions about one state (Jev's contract), with
    dreads' diagnostics beside the answers. ``images`` (URLs or data URLs) and Jev's image
    ``assets`` are read before the text. ``dreads: {"run": NAME}`` records the answers."""
    body, parts = await read_systemone_body(request, api.config.max_body_bytes)
    with api.limiter.slot():
        _check_model(body.model, api)
        _check_joint(body, api)
        decision = _decision(request, body, parts)
        refuse_oversized(api, decision)
        run = body.dreads.run if body.dreads else api.config.record_run
        if run:
            await _check_record(api, run, body.dreads.id if body.dreads else None)
        started, t0 = utcnow(), time.perf_counter()
        decided = await _answer_while_connected(request, api, decision)
        latency_ms = (time.perf_counter() - t0) * 1000.0
        recorded = (await _record(api, run, decision, decided, started, latency_ms)
                    if run else None)
    return {
        "model": api.model,
        "answers": answers_of(decision, decided.answers),
        "usage": {"input_tokens": input_tokens(decided.draws), "output_tokens": 0},
        "diagnostics": {"reads": decided.n_reads, "recorded": recorded,
                        "simulator": api.simulator(await api.fingerprint()),
                        "questions": {a.question_id: diagnostics(a) for a in decided.answers}},
    }
