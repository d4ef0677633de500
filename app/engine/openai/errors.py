"""A Decisions request dreads cannot read, in OpenAI's terms: a message and ``param``.

``DecisionsRequestError`` carries OpenAI's ``error.param`` (``questions[1].choices``); the
message starts with it. ``request_error`` turns pydantic's errors for ``DecisionsBody`` into
one such error: the first error, or the unknown fields of the outermost object around it
(an object's fields are named before what is inside them); its location written as OpenAI
writes a param (union tags dropped, indices in brackets); its message in dreads' words
(``must be a string, got number``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

from app.engine.openai.model import (
    MAX_LEVELS,
    MAX_OPENAI_CHOICES,
    MAX_QUESTIONS,
    TAGS,
    ChoiceIn,
    ChoiceQuestionIn,
    DecisionsBody,
    InputJsonIn,
    InputTextIn,
    LevelIn,
    MessageIn,
    PredicateIn,
    ScoreQuestionIn,
    type_name,
)
from app.errors import InputError

__all__ = ["DecisionsRequestError", "fail", "openai_param", "request_error"]

Loc = Sequence[int | str]

#: The model of an object, by the last name in its raw location (a tag or a list's field).
_MODELS: dict[int | str, type[BaseModel]] = {
    "predicate": PredicateIn, "choice": ChoiceQuestionIn, "score": ScoreQuestionIn,
    "choices": ChoiceIn, "levels": LevelIn, "input": MessageIn, "input_text": InputTextIn,
    "input_json": InputJsonIn,
}
#: A list's bounds and noun, for its count messages.
_COUNTS = {"questions": (1, MAX_QUESTIONS), "choices": (2, MAX_OPENAI_CHOICES),
           "levels": (2, MAX_LEVELS)}
_TYPES = {"string_type": "a string", "list_type": "an array", "model_type": "an object",
          "model_attributes_type": "an object", "dict_type": "an object",
          "string_or_array": "a string or an array"}
_QUESTION_TYPES = ["predicate", "choice", "score"]
#: Smart-union members in error locations: a choice's value is a string or a boolean.
_MEMBERS = ("str", "bool")


class DecisionsRequestError(InputError):
    """A Decisions request dreads cannot read or ask; ``param`` names the field (OpenAI's
    ``error.param``, e.g. ``questions[1].choices``)."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


def fail(param: str | None, message: str) -> DecisionsRequestError:
    """The error for ``param``, its message prefixed with it."""
    return DecisionsRequestError(f"{param}: {message}" if param else message, param)


def openai_param(loc: Loc) -> str:
    """A pydantic location as OpenAI's ``param``: ``("questions", 1, "choices")`` ->
    ``questions[1].choices``; union tags dropped."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part not in TAGS and part not in _MEMBERS:
            out += f".{part}" if out else part
    return out


def request_error(exc: ValidationError, *, extra_keys: Iterable[str] = ()
                  ) -> DecisionsRequestError:
    """The first of pydantic's errors for a ``DecisionsBody`` as OpenAI's param and dreads'
    message; ``extra_keys`` are the body fields the caller reads itself."""
    errors = exc.errors(include_url=False)
    first = errors[0]
    unknown = _unknown_fields(errors, first["loc"])
    if unknown is not None:
        return _unknown_error(*unknown, extra_keys=extra_keys)
    loc = first["loc"]
    if first["type"] in ("union_tag_invalid", "union_tag_not_found"):
        return _tag_error(loc, first.get("input"))
    return fail(openai_param(loc) or "body", _message(first, loc))


def _unknown_fields(errors: Sequence[Mapping[str, Any]], first: Loc
                    ) -> tuple[Loc, list[str]] | None:
    """The unknown fields of the outermost object around ``first`` that has some (its fields
    are read before what is inside them)."""
    by_parent: dict[tuple[int | str, ...], list[str]] = {}
    for error in errors:
        if error["type"] == "extra_forbidden":
            *parent, name = error["loc"]
            by_parent.setdefault(tuple(parent), []).append(str(name))
    around = [p for p in by_parent if tuple(first[:len(p)]) == p]
    if not around:
        return None
    parent = min(around, key=len)
    return parent, sorted(by_parent[parent])


def _unknown_error(parent: Loc, names: list[str], *, extra_keys: Iterable[str]
                   ) -> DecisionsRequestError:
    named = [p for p in parent if isinstance(p, str) and p not in ("string", "array")]
    model = _MODELS.get(named[-1]) if named else DecisionsBody
    fields = model.model_fields if model is not None else {}
    allowed = sorted({*fields, *(() if named else extra_keys)})
    where = openai_param(parent)
    prefix = f"{where}: " if where else ""
    return DecisionsRequestError(f"{prefix}unknown field(s) {names}; allowed: {allowed}",
                                 f"{where}.{names[0]}".lstrip("."))


def _tag_error(loc: Loc, value: Any) -> DecisionsRequestError:
    kind = value.get("type") if isinstance(value, Mapping) else None
    param = f"{openai_param(loc)}.type"
    if tuple(loc[-2:-1]) == ("questions",):
        return fail(param, f"unknown question type {kind!r}; use one of {_QUESTION_TYPES}")
    return fail(param, f"unknown part type {kind!r}; use 'input_text' or 'input_json'")


def _message(error: Mapping[str, Any], loc: Loc) -> str:
    kind, value = error["type"], error.get("input")
    field = next((p for p in reversed(loc) if isinstance(p, str) and p not in TAGS), "")
    if kind == "missing":
        return "is required"
    if loc[-1] in _MEMBERS:
        return f"must be a string or a boolean, got {type_name(value)}"
    if kind in _TYPES:
        return f"must be {_TYPES[kind]}, got {type_name(value)}"
    if kind in ("too_short", "too_long") and field in _COUNTS:
        return _count_message(kind, field, error["ctx"]["actual_length"])
    if kind == "too_short":
        return "must not be empty"
    if kind == "string_too_long":
        return f"must be at most {error['ctx']['max_length']} characters"
    return str(error["msg"])


def _count_message(kind: str, field: str, count: int) -> str:
    low, high = _COUNTS[field]
    if field == "levels" and kind == "too_long":
        return f"has {count} levels; at most {high} are allowed"
    return f"must have {low} to {high} {field}, got {count}"
