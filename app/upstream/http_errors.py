"""Reading an error answer of an OpenAI-compatible server (vLLM, a hosted API, dreads), for the
HTTP clients of ``app.upstream``: its message, a field of its error object, a retry-after."""

from __future__ import annotations

import email.utils
import re
import time
from collections.abc import Mapping
from typing import Any

import orjson

__all__ = ["MESSAGE_CHARS", "UNAUTHORIZED", "error_field", "error_message",
           "json_object", "names_missing_model", "retry_after_s", "shown"]

#: The statuses of a server that refuses the client's API key.
UNAUTHORIZED = frozenset({401, 403})


def error_field(raw: bytes, name: str) -> Any:
    """``error.<name>`` of an error body (``{"error": {...}}``, vLLM's ``{"error": "..."}`` or
    a top-level ``message``), else None."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    error = obj.get("error") if isinstance(obj, dict) else None
    if isinstance(error, dict):
        return error.get(name)
    if isinstance(error, str) and name == "message":  # vLLM's 401: {"error": "Unauthorized"}
        return error
    return obj.get(name) if isinstance(obj, dict) and name == "message" else None


#: The most characters of a server's own message shown in an error (a run's failure reason,
#: a log line): enough for an API's error, too little to read a page through it.
MESSAGE_CHARS = 200
_UNPRINTABLE = re.compile(r"[^\x20-\x7e\u00a0-\ufffc]+")


def shown(text: str, limit: int = MESSAGE_CHARS) -> str:
    """A server's message as dreads shows it: one line of printable characters, at most
    ``limit`` of them (``…`` where cut)."""
    line = " ".join(_UNPRINTABLE.sub(" ", text).split())
    return line if len(line) <= limit else line[:limit - 1] + "…"


def error_message(raw: bytes) -> str:
    """The server's message (a JSON error's, bounded by ``shown``), else what the body is, not
    what it says: a server that is not the one expected (a page, another service at a URL a run
    or a client names) is not quoted into an error a client may read."""
    message = error_field(raw, "message")
    if message is None:
        return "(empty body)" if not raw.strip() else f"no error message: {_what(raw)}"
    return shown(str(message))


def _what(raw: bytes) -> str:
    """What a body that is not the JSON expected is, without quoting it."""
    kind = "an HTML page" if raw.lstrip()[:1] == b"<" else "a body"
    return f"{kind} of {len(raw):,} bytes, not the JSON expected"


def json_object(raw: bytes, who: str) -> dict[str, Any]:
    """A 200 answer's JSON object; ``MalformedResponse`` (naming ``who``) when it is not one."""
    from app.errors import MalformedResponse

    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise MalformedResponse(f"{who} answered no JSON: {_what(raw)}") from exc
    if not isinstance(obj, dict):
        raise MalformedResponse(f"{who} answered no JSON object: {_what(raw)}")
    return obj


def names_missing_model(raw: bytes) -> bool:
    """vLLM's 404 for a model it does not serve: "The model `X` does not exist." """
    message = str(error_field(raw, "message") or "").lower()
    return "model" in message and "does not exist" in message


def retry_after_s(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """Seconds a ``retry-after`` header asks to wait (delta seconds or an HTTP date), or None
    when there is none or it cannot be read."""
    value = headers.get("retry-after") or headers.get("Retry-After")
    if value is None:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))
