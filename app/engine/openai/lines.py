"""Job-file lines in OpenAI's shape -> ``Decision``: Batch lines and bare request bodies.

A line is an OpenAI Batch line ``{"custom_id", "method": "POST", "url": "/v1/decisions",
"body": {...}, "metadata"?}`` or a bare Decisions request body (its id ``metadata.id``, else
``line-<number>``). ``metadata`` (of the line or of the body) carries ``cell`` and
``expected`` (question name or position -> expected value). The body is read by
``app.engine.openai.request``; ``app.engine.questions`` imports this module only for a line
that looks like OpenAI's (it loads pydantic).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.engine.openai.errors import DecisionsRequestError
from app.engine.openai.model import type_name
from app.engine.openai.request import decision_from_request
from app.engine.types import Decision
from app.errors import InputError

__all__ = ["is_decisions_line", "parse_decisions_line"]

_DECISIONS_URL = "/v1/decisions"
_BATCH_KEYS = {"custom_id", "method", "url", "body", "metadata"}


def is_decisions_line(obj: Mapping[str, Any]) -> bool:
    """A bare Decisions request, or a Batch line whose url or body is one."""
    body = obj.get("body")
    if obj.get("url") == _DECISIONS_URL:
        return True
    if isinstance(body, Mapping):
        return "input" in body and "state" not in body
    return "input" in obj and isinstance(obj.get("questions"), list)


def parse_decisions_line(obj: Mapping[str, Any], *, line_no: int | None = None) -> Decision:
    """One job line in OpenAI's shape: a Batch line or a bare request body.

    Raises:
        InputError: the message names the decision and the field to fix.
    """
    body = _batch_body(obj) if "body" in obj or "custom_id" in obj else obj
    metadata = _metadata(obj, body)
    key = _line_id(obj, metadata, line_no)
    try:
        return decision_from_request(key, body, cell=metadata.get("cell"),
                                     expected=metadata.get("expected"))
    except InputError as exc:
        raise InputError(f"decision {key!r}: {exc.message}") from None


def _batch_body(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    extra = sorted(set(obj) - _BATCH_KEYS)
    if extra:
        raise DecisionsRequestError(f"unknown field(s) {extra}; allowed: "
                                    f"{sorted(_BATCH_KEYS)}", extra[0])
    if obj.get("method", "POST") != "POST":
        raise InputError(f"a Batch line's method must be POST, got {obj.get('method')!r}")
    if obj.get("url", _DECISIONS_URL) != _DECISIONS_URL:
        raise InputError(f"a Decisions Batch line's url must be {_DECISIONS_URL!r}, got "
                         f"{obj.get('url')!r}")
    body = obj.get("body")
    if not isinstance(body, Mapping):
        raise InputError("a Batch line needs 'body': a Decisions request "
                         "{\"model\", \"input\", \"questions\"}")
    return body


def _metadata(obj: Mapping[str, Any], body: Mapping[str, Any]) -> Mapping[str, Any]:
    merged: dict[str, Any] = {}
    for source in (body.get("metadata"), obj.get("metadata") if obj is not body else None):
        if source is None:
            continue
        if not isinstance(source, Mapping):
            raise InputError(f"'metadata' must be an object, got {type_name(source)}")
        merged.update(source)
    return merged


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
