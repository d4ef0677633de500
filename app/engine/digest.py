"""What a decision asks, as one short hash: its cell and its stored payload.

A line submitted again under an id its run holds is compared with the stored decision by this
hash: equal, the line is already there; different, it changed. The payload is the normalised
form (``decision_payload``), so two lines that ask the same thing in different spellings (an
expected ``"Yes"`` and ``"yes"``) hash alike, and a changed state, question or expected answer
does not. A decision's images are in its payload as their references and the sha256 of the
bytes checked at submit, so the same URL whose picture changed is a changed line.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import orjson

__all__ = ["content_digest"]


def content_digest(cell: str | None, payload: Mapping[str, Any]) -> str:
    """32 hex digits of the decision's cell and payload (key order kept: the questions'
    order and a JSON state's are part of what is asked)."""
    data = orjson.dumps([cell, payload])
    return hashlib.blake2b(data, digest_size=16).hexdigest()
