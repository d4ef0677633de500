"""The fields a job line and a question may have; any other is a mistake, named with the closest
known field (a misspelt ``"expeted"`` would otherwise be stored as a decision without its
expected answers).

``metadata`` (of an OpenAI-batch line or its body) is the free-form field: dreads reads
``cell``, ``expected`` and ``id`` there and ignores everything else in it.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any

from app.errors import InputError

__all__ = ["BATCH_BODY_FIELDS", "BATCH_LINE_FIELDS", "LINE_FIELDS", "QUESTION_FIELDS",
           "check_fields", "unknown_fields_message"]

#: A dreads line.
LINE_FIELDS = ("id", "cell", "state", "questions", "expected", "images")
#: An OpenAI-batch line with a Jev body (``/v1/systemone``).
BATCH_LINE_FIELDS = ("custom_id", "method", "url", "body", "metadata", "cell", "expected")
#: The Jev body of an OpenAI-batch line (``model`` is a Jev request's; the run's model answers).
BATCH_BODY_FIELDS = ("model", "state", "questions", "cell", "expected", "metadata", "images")
#: A question (Jev's shape).
QUESTION_FIELDS = ("type", "instructions", "criteria")


def check_fields(obj: Mapping[str, Any], known: Iterable[str], *, what: str) -> None:
    """Refuse a field of ``obj`` that is not in ``known``.

    Raises:
        InputError: ``unknown field 'expeted' (did you mean 'expected'?)``; the known fields
            of ``what`` (e.g. "a line") when none is close.
    """
    known = tuple(known)
    unknown = [str(key) for key in obj if key not in known]
    if unknown:
        raise InputError(unknown_fields_message(unknown, known, what=what))


def unknown_fields_message(unknown: list[str], known: tuple[str, ...], *, what: str) -> str:
    """``unknown field 'x' (did you mean 'y'?)``, each unknown field with its closest known one;
    the known fields when no unknown one is close to any."""
    named = []
    for name in unknown:
        close = difflib.get_close_matches(name, known, n=1)
        named.append(f"{name!r} (did you mean {close[0]!r}?)" if close else repr(name))
    noun = "field" if len(unknown) == 1 else "fields"
    message = f"unknown {noun} {', '.join(named)}"
    if all("did you mean" not in n for n in named):
        message += f"; {what} has the fields {', '.join(known)}"
    return message
