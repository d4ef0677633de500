"""The question kinds by name: dreads' three, and any registered since (``register_kind``;
``app.connect.plugins`` registers those installed under the ``dreads.question_kinds`` entry point).
No module outside ``app.engine.kinds`` compares kind names: each asks the registry."""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.engine.kinds.base import QuestionKind
from app.engine.kinds.choice import CHOICE
from app.engine.kinds.noul import NOUL
from app.engine.kinds.score import SCORE
from app.errors import InputError

if TYPE_CHECKING:
    from app.engine.types import Question

__all__ = ["all_kinds", "either", "kind_named", "kind_names", "kind_of", "register_kind",
           "unregister_kind"]

#: The stored ``question_type`` column holds at most this many characters.
MAX_NAME = 16
_OWN = (NOUL, CHOICE, SCORE)
_KINDS: dict[str, QuestionKind] = {k.name: k for k in _OWN}


def register_kind(kind: QuestionKind) -> QuestionKind:
    """Add ``kind`` to the registry (again: replaces the kind of that name, unless that is one
    of dreads' own) and return it.

    Raises:
        ValueError: its name is empty or too long to store, or one of dreads' own kinds'; it
            has no title or reply line; or its reply line is another kind's.
    """
    name = getattr(kind, "name", "")
    if not isinstance(name, str) or not name or len(name) > MAX_NAME:
        raise ValueError(f"a question kind needs a name of 1 to {MAX_NAME} characters, got "
                         f"{name!r}")
    if any(own.name == name and own is not kind for own in _OWN):
        raise ValueError(f"question kind {name!r} is dreads' own: a plugin's kind needs a name "
                         "of its own")
    missing = [a for a in ("title", "reply_line") if not isinstance(getattr(kind, a, None), str)]
    if missing:
        raise ValueError(f"question kind {name!r} needs {' and '.join(missing)} (text)")
    clash = [k.name for k in _KINDS.values() if k.name != name and k.reply_line ==
             kind.reply_line]
    if clash:
        raise ValueError(f"question kind {name!r}: its reply_line is {clash[0]!r}'s; each "
                         "kind's must differ (the simulator tells kinds apart by it)")
    _KINDS[name] = kind
    return kind


def unregister_kind(name: str) -> None:
    """Remove a registered kind (a test's); dreads' own stay.

    Raises:
        ValueError: ``name`` is one of dreads' own kinds.
    """
    if name in {k.name for k in _OWN}:
        raise ValueError(f"question kind {name!r} is dreads' own and stays registered")
    _KINDS.pop(name, None)


def kind_named(name: object) -> QuestionKind:
    """The kind a job file's ``type`` names.

    Raises:
        InputError: no such kind; the message lists the known ones.
    """
    kind = _KINDS.get(name) if isinstance(name, str) else None
    if kind is None:
        known = ", ".join(repr(n) for n in _KINDS)
        raise InputError(f"unknown type {name!r}; use one of {known}")
    return kind


def kind_of(question: Question) -> QuestionKind:
    """The kind of a parsed question."""
    return kind_named(question.type)


def kind_names() -> tuple[str, ...]:
    """Every registered kind's name, dreads' own first."""
    return tuple(_KINDS)


def either(names: tuple[str, ...]) -> str:
    """Names as a message lists them: "noul, choice or score"."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def all_kinds() -> tuple[QuestionKind, ...]:
    """Every registered kind, dreads' own first."""
    return tuple(_KINDS.values())
