"""The answers to errors no route answered itself, so a client error is a 4xx and a database
that is down a 503, never a 500:

- a dreads error (``DreadsError``: the database unavailable, a bad input found below the
  route) gets its status from ``app.api.errors.raise_for`` (``StoreError``: 503 with
  ``retry-after``);
- FastAPI's 422 list is written with every offending input as text (a body that is not
  UTF-8 is quoted with replacement characters, not a failure to encode the answer).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response

from app.api.errors import http_for
from app.errors import DreadsError

__all__ = ["install_error_answers"]

#: The longest input a 422 quotes back.
_QUOTED_CHARS = 200


def install_error_answers(app: FastAPI) -> None:
    """Register the answers of this module on ``app``."""
    app.add_exception_handler(DreadsError, _dreads_error)
    app.add_exception_handler(RequestValidationError, _validation_error)


async def _dreads_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, DreadsError)
    answer: HTTPException = http_for(exc)
    return await http_exception_handler(request, answer)


async def _validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    errors = [_printable(error) for error in exc.errors()]
    return JSONResponse({"detail": jsonable_encoder(errors)}, status_code=422)


def _printable(error: Any) -> Any:
    """A validation error whose ``input`` is text (bytes decoded with replacement, and cut)."""
    if not isinstance(error, dict):
        return error
    out = dict(error)
    value = out.get("input")
    if isinstance(value, bytes | bytearray):
        text = bytes(value[:_QUOTED_CHARS]).decode("utf-8", "replace")
        out["input"] = text + ("…" if len(value) > _QUOTED_CHARS else "")
    return out
