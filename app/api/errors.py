"""The API's error answers, in the shapes Jev clients decode.

- 422: FastAPI's validation list ``{"detail": [{"loc", "msg", "type", ...}]}``.
- 400 for a question that cannot be asked: ``{"detail": "<text>"}``.
- Everything else: ``{"detail": {"error_type": ..., "message": ...}}`` with the status below,
  and ``retry-after`` where waiting helps (503, 529).
"""

from __future__ import annotations

from typing import Any, NoReturn

from fastapi import HTTPException

from app.errors import (
    ConfigError,
    DreadsError,
    InputError,
    MalformedResponse,
    RunCancelled,
    RunSettingsMismatch,
    SchemaNotReady,
    StoreConflict,
    StoreError,
    UpstreamRejected,
    UpstreamUnavailable,
)
from app.runs.setting_names import api_words

__all__ = ["api_error", "http_for", "raise_for", "unaskable"]

UPSTREAM_RETRY_AFTER_S = 2
OVERLOAD_RETRY_AFTER_S = 1


def api_error(status: int, error_type: str, message: str, *, retry_after: int | None = None,
              **extra: Any) -> HTTPException:
    """An ``HTTPException`` whose body is ``{"detail": {"error_type", "message", ...}}``."""
    headers = {"retry-after": str(retry_after)} if retry_after is not None else None
    return HTTPException(status, {"error_type": error_type, "message": message, **extra},
                         headers=headers)


def unaskable(message: str) -> HTTPException:
    """400 with a plain-text detail: the question cannot be asked as written."""
    return HTTPException(400, message)


def raise_for(exc: DreadsError) -> NoReturn:
    """Raise the HTTP answer of a dreads error (``from exc``)."""
    raise http_for(exc) from exc


def http_for(exc: DreadsError) -> HTTPException:
    """The HTTP answer of a dreads error: its status, type and message."""
    if isinstance(exc, UpstreamUnavailable):
        return api_error(503, "api_error", f"the model server is unavailable: {exc.message}",
                         retry_after=UPSTREAM_RETRY_AFTER_S)
    if isinstance(exc, UpstreamRejected):
        return api_error(400, "invalid_request_error",
                         f"the model rejected this request: {exc.message}")
    if isinstance(exc, MalformedResponse):
        return api_error(502, "api_error", f"the model server answered malformed logprobs: "
                         f"{exc.message}")
    if isinstance(exc, RunSettingsMismatch):
        return api_error(409, "conflict_error", api_words(exc))
    if isinstance(exc, RunCancelled):
        return api_error(409, "conflict_error", exc.message)
    if isinstance(exc, SchemaNotReady):
        return api_error(503, "api_error", exc.message, retry_after=UPSTREAM_RETRY_AFTER_S)
    if isinstance(exc, StoreConflict):
        return api_error(409, "conflict_error", exc.message)
    if isinstance(exc, StoreError):
        return api_error(503, "api_error", f"the database is unavailable: {exc.message}",
                         retry_after=UPSTREAM_RETRY_AFTER_S)
    if isinstance(exc, (InputError, ConfigError)):
        return api_error(400, "invalid_request_error", exc.message)
    return api_error(500, "api_error", exc.message)
