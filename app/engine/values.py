"""JSON values as the engine reads and writes them: a state (or any Jev content) as prompt
text, a number from an endpoint's reply."""

from __future__ import annotations

import json
from typing import Any

from app.errors import MalformedResponse

__all__ = ["number", "serialize_state"]


def serialize_state(state: Any) -> str:
    """A string state as is; any other JSON value as JSON with non-ASCII kept as is."""
    if isinstance(state, str):
        return state
    return json.dumps(state, ensure_ascii=False)


def number(value: Any, what: str) -> float:
    """A JSON number as a float, or ``MalformedResponse`` naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise MalformedResponse(f"{what} is not a number: {value!r}")
    return float(value)
