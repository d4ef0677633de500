"""Question kinds, one class each (yes/no ``noul``, ``choice``, ``score``), registered by
name. A kind owns its labels, criteria, prompts, expected values, answer extras and answer
shapes, and the family by which reports choose its figures; ``docs/internals.md`` ("How to
add a question kind") says how to add one without editing dreads."""

from __future__ import annotations

from app.engine.kinds.base import (
    DIGITS,
    LETTERS,
    MAX_LABELS,
    Content,
    Criteria,
    Extras,
    Family,
    QuestionKind,
    reader_text,
    score_labels,
)
from app.engine.kinds.choice import CHOICE, ChoiceKind
from app.engine.kinds.noul import NOUL, NoulKind
from app.engine.kinds.registry import (
    all_kinds,
    either,
    kind_named,
    kind_names,
    kind_of,
    register_kind,
    unregister_kind,
)
from app.engine.kinds.score import MAX_SCORE_LEVELS, SCORE, ScoreKind

__all__ = [
    "CHOICE",
    "DIGITS",
    "LETTERS",
    "MAX_LABELS",
    "MAX_SCORE_LEVELS",
    "NOUL",
    "SCORE",
    "ChoiceKind",
    "Content",
    "Criteria",
    "Extras",
    "Family",
    "NoulKind",
    "QuestionKind",
    "ScoreKind",
    "all_kinds",
    "either",
    "kind_named",
    "kind_names",
    "kind_of",
    "reader_text",
    "register_kind",
    "score_labels",
    "unregister_kind",
]
