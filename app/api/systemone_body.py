"""The body of a ``POST /v1/systemone``: JSON, or Jev's multipart form (typesafe-sdk sends one
when a request has image assets: the JSON in a part named ``request``, then each image's bytes
in the part its asset names).

A field the request model does not know is a 400 naming it (vLLM's ``extra="forbid"``: never
dropped unread); any other wrong shape is FastAPI's 422 list, as Jev answers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.datastructures import UploadFile

from app.api.errors import unaskable
from app.api.schemas import SystemOneIn

__all__ = ["Parts", "document_systemone_body", "read_systemone_body"]

#: A multipart request's image parts: name -> (content type, bytes).
Parts = dict[str, tuple[str | None, bytes]]
_FIELDS = ", ".join(SystemOneIn.model_fields)


async def read_systemone_body(request: Request, max_bytes: int) -> tuple[SystemOneIn, Parts]:
    """The request model and the multipart request's image parts (none for JSON).

    Raises:
        HTTPException: 400 for an unknown field or a multipart body without its ``request``
            part; RequestValidationError (422) for a wrong shape.
    """
    content_type = request.headers.get("content-type", "")
    if content_type.startswith("multipart/form-data"):
        raw, parts = await _multipart(request, max_bytes)
    else:
        raw, parts = await request.body(), {}
    try:
        return SystemOneIn.model_validate_json(raw), parts
    except ValidationError as exc:
        raise _invalid(exc) from exc


async def _multipart(request: Request, max_bytes: int) -> tuple[bytes, Parts]:
    parts: Parts = {}
    raw: bytes | None = None
    async with request.form(max_part_size=max_bytes) as form:
        for name, value in form.multi_items():
            if isinstance(value, UploadFile):
                parts[name] = (value.content_type, await value.read())
            elif name == "request":
                raw = value.encode()
    if raw is None:
        raise unaskable("a multipart /v1/systemone request needs its JSON body in a part "
                        "named 'request'")
    return raw, parts


def _invalid(exc: ValidationError) -> HTTPException | RequestValidationError:
    errors = exc.errors(include_url=False)
    unknown = [".".join(map(str, e["loc"])) for e in errors if e["type"] == "extra_forbidden"]
    if unknown:
        names = ", ".join(repr(u) for u in unknown)
        return unaskable(f"Unknown field(s) {names}: this server reads every field it takes "
                         f"and drops none. /v1/systemone takes {_FIELDS}.")
    return RequestValidationError([_located(e) for e in errors])


def _located(error: Any) -> Any:
    """A pydantic error as FastAPI reports a body's: located under ``body``."""
    return {**error, "loc": ("body", *error["loc"])}


def document_systemone_body(app: FastAPI) -> None:
    """Put ``SystemOneIn`` (read by hand, not by FastAPI) in the OpenAPI document's schemas,
    where the route's request body refers to it."""
    build: Callable[[], dict[str, Any]] = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        spec = build()
        schema = SystemOneIn.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas = spec.setdefault("components", {}).setdefault("schemas", {})
        schemas.update(schema.pop("$defs", {}))
        schemas["SystemOneIn"] = schema
        return spec

    app.openapi = openapi  # type: ignore[method-assign]
