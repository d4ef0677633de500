"""The questions of a stored decision payload, as the exports need them: each question's type,
canvas labels and option names (read by ``app.engine.parse_question``, cached: most decisions
of a run ask the same questions), so that an expected label can be written in the answer's
own form (yes/no, the option name, the level's text).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType
from typing import Any

from app.engine import parse_question, serialize_state
from app.errors import InputError

__all__ = ["QuestionShape", "mean_level", "question_shapes", "state_text"]


@dataclass(frozen=True)
class QuestionShape:
    """One question's type (``noul``, ``choice``, ``score``), labels and option names."""

    type: str
    labels: tuple[str, ...]
    options: tuple[str, ...]

    def label_of(self, value: str | None) -> str | None:
        """The canvas label ``value`` names (read as a label first, then as an option name, as
        stored expected values are read); None when it names none."""
        if value is None:
            return None
        if value in self.labels:
            return value
        return self.labels[self.options.index(value)] if value in self.options else None

    def option_of(self, value: str | None) -> str | None:
        """The option name (yes/no, option, level text) of the label ``value`` names."""
        label = self.label_of(value)
        return None if label is None else self.options[self.labels.index(label)]


def question_shapes(payload: Mapping[str, Any]) -> Mapping[str, QuestionShape]:
    """Question id -> shape, for the questions of a stored payload that parse."""
    # Key order matters: options are labelled A, B, ... in the order given.
    return _shapes(json.dumps(payload.get("questions"), default=str))


@lru_cache(maxsize=4096)
def _shapes(questions_json: str) -> Mapping[str, QuestionShape]:
    raw = json.loads(questions_json)
    out: dict[str, QuestionShape] = {}
    for qid, spec in (raw.items() if isinstance(raw, Mapping) else ()):
        try:
            question = parse_question(str(qid), spec)
        except InputError:  # a payload written by hand: its question is left unnamed
            continue
        out[question.id] = QuestionShape(question.type.value, question.labels, question.options)
    return MappingProxyType(out)


def mean_level(expected_level: float | None) -> float | None:
    """A score's probability-weighted mean level in the job file's numbering (1 = the first
    level of ``criteria``), from the stored 0-based ``expected_level``."""
    return None if expected_level is None else expected_level + 1.0


def state_text(state: Any) -> str | None:
    """A stored state as the model reads it (a JSON state as JSON); None when null."""
    return None if state is None else serialize_state(state)
