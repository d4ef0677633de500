"""OpenAI's shapes on ``dreads serve``: the Decisions API's response, its error object, and the
model list.

Errors on OpenAI's routes are ``{"error": {"message", "type", "param", "code"}}`` with OpenAI's
status codes: 400 ``invalid_request_error`` (a malformed body too: OpenAI has no 422), 401
``authentication_error``, 403 ``permission_error``, 404 ``model_not_found``, 413, 429/529 and
503 with ``retry-after``. ``OpenAIRoute`` turns dreads' own HTTP errors (auth, limits, the
upstream) into that object, so a route written like the Jev one answers in OpenAI's terms.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Annotated, Any

from fastapi import HTTPException, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from pydantic import BaseModel, Field

from app.engine.openai.model import ChoiceAnswerOut, PredicateAnswerOut, ScoreAnswerOut

__all__ = [
    "DecisionOut",
    "OpenAIRoute",
    "openai_error",
    "openai_error_body",
]

#: dreads' error types (``app.api.errors``) -> OpenAI's.
_TYPES = {"api_usage_error": "invalid_request_error", "api_error": "server_error",
          "request_too_large": "invalid_request_error"}
_CODES = {401: "invalid_api_key", 403: "missing_api_key", 413: "request_too_large",
          415: "unsupported_content_encoding", 429: "rate_limit_exceeded",
          529: "overloaded", 503: "service_unavailable", 502: "bad_upstream_response",
          409: "conflict", 499: "client_closed_request"}


def openai_error_body(status: int, message: str, error_type: str | None = None, *,
                      param: str | None = None, code: str | None = None) -> dict[str, Any]:
    """OpenAI's error object."""
    kind = _TYPES.get(error_type or "", error_type) or (
        "invalid_request_error" if status < 500 else "server_error")
    return {"error": {"message": message, "type": kind, "param": param,
                      "code": code if code is not None else _CODES.get(status)}}


def openai_error(status: int, message: str, error_type: str | None = None, *,
                 param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(openai_error_body(status, message, error_type, param=param, code=code),
                        status_code=status, headers=headers)


def _from_http(exc: HTTPException) -> JSONResponse:
    detail = exc.detail
    headers = dict(exc.headers or {})
    if isinstance(detail, dict) and "error" in detail:  # already OpenAI's object
        return JSONResponse(detail, status_code=exc.status_code, headers=headers)
    if isinstance(detail, dict):
        return openai_error(exc.status_code, str(detail.get("message", "")),
                            detail.get("error_type"), param=detail.get("param"),
                            code=detail.get("code"), headers=headers)
    return openai_error(exc.status_code, str(detail), headers=headers)


def _from_validation(exc: RequestValidationError) -> JSONResponse:
    errors = exc.errors()
    first = errors[0] if errors else {}
    loc = [str(p) for p in first.get("loc", ()) if p != "body"]
    param = ".".join(loc) or None
    message = f"{param}: {first.get('msg')}" if param else str(first.get("msg", "invalid body"))
    return openai_error(400, message, param=param)


class OpenAIRoute(APIRoute):
    """A route whose every error, its dependencies' included, is OpenAI's error object."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            try:
                return await handler(request)
            except HTTPException as exc:
                return _from_http(exc)
            except RequestValidationError as exc:
                return _from_validation(exc)

        return route


# -- the Decision object (what ``client.decisions.create`` decodes) --------------------------

class InputTokensDetailsOut(BaseModel):
    cached_tokens: int
    cache_write_tokens: int = 0


class OutputTokensDetailsOut(BaseModel):
    reasoning_tokens: int = 0


class DecisionUsageOut(BaseModel):
    input_tokens: int = Field(description="Prompt tokens of each canvas's first draw, summed.")
    input_tokens_details: InputTokensDetailsOut
    output_tokens: int = Field(0, description="Always 0: a diffusion read generates nothing.")
    output_tokens_details: OutputTokensDetailsOut
    total_tokens: int


class DecisionDreadsOut(BaseModel):
    """dreads' extension (the SDK ignores it): the reads behind the answers."""

    request_id: str
    reads: int = Field(description="Requests sent to the model server for these answers.")
    simulator: bool = Field(
        False, description="The answers come from the simulator (dreads sim), not a model.")
    questions: dict[str, dict[str, Any]] = Field(
        description="Question id (name, or position) -> dreads' diagnostics of its answer.")
    recorded: dict[str, Any] | None = Field(
        None, description="Where the answers were recorded (run, decision id), or why not.")


class DecisionOut(BaseModel):
    """OpenAI's Decision: answers in question order, the model, usage; and ``dreads``."""

    model: str
    answers: list[Annotated[PredicateAnswerOut | ChoiceAnswerOut | ScoreAnswerOut,
                            Field(discriminator="type")]]
    usage: DecisionUsageOut
    dreads: DecisionDreadsOut
