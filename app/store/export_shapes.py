"""The questions of a stored decision payload, as the exports need them: each question's type,
canvas labels and option names (read by ``app.engine.parse_question``, cached: most decisions
of a run ask the same questions), so that an expected label can be written in the answer's
own form (yes/no, the option name, the level's text).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import lru_cache
from types import MappingProxyType
from typing import Any

from app.engine import Question, parse_question, serialize_state
from app.engine.questions import answer_label
from app.errors import InputError

__all__ = ["mean_level", "option_of", "question_shapes", "state_text"]


def question_shapes(payload: Mapping[str, Any]) -> Mapping[str, Question]:
    """Question id -> its parsed question, for the questions of a stored payload that parse."""
    # Key order matters: options are labelled A, B, ... in the order given.
    return _shapes(json.dumps(payload.get("questions"), default=str))


@lru_cache(maxsize=4096)
def _shapes(questions_json: str) -> Mapping[str, Question]:
    raw = json.loads(questions_json)
    out: dict[str, Question] = {}
    for qid, spec in (raw.items() if isinstance(raw, Mapping) else ()):
        try:
            question = parse_question(str(qid), spec)
        except InputError:  # a payload written by hand: its question is left unnamed
            continue
        out[question.id] = question
    return MappingProxyType(out)


def option_of(question: Question | None, value: str | None) -> str | None:
    """The option name (yes/no, option, level text) of the answer ``value`` names (a stored
    label, read as ``answer_label`` reads it); None when it names none."""
    if question is None or value is None:
        return None
    try:
        label = answer_label(question, value)
    except InputError:
        return None
    return question.options[question.labels.index(label)]


def mean_level(expected_level: float | None) -> float | None:
    """A score's probability-weighted mean level in the job file's numbering (1 = the first
    level of ``criteria``), from the stored 0-based ``expected_level``."""
    return None if expected_level is None else expected_level + 1.0


def state_text(state: Any) -> str | None:
    """A stored state as the model reads it (a JSON state as JSON); None when null."""
    return None if state is None else serialize_state(state)
