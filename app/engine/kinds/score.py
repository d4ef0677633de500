"""The score kind (Jev's ``score``): ordered levels, labelled 1..9 (letters past nine); the
answer's expected level is 0-indexed."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from app.engine.kinds.base import (
    Criteria,
    Extras,
    Family,
    QuestionKind,
    count_ok,
    one_hot,
    score_labels,
)
from app.engine.values import number, serialize_state
from app.errors import InputError, MalformedResponse, TemplateError

if TYPE_CHECKING:
    from pydantic import BaseModel

    from app.engine.types import Question

__all__ = ["MAX_SCORE_LEVELS", "SCORE", "ScoreKind"]

#: vLLM's reader answers a level with one digit, and Jev takes at most ten levels.
MAX_SCORE_LEVELS = 10


class ScoreKind(QuestionKind):
    """Ordered levels; ``criteria`` is the list of their descriptions."""

    name = "score"
    title = "score"
    family = Family.ORDINAL
    default_instruction = "Which level applies?"
    reply_line = "Answer with the number of one level only."
    reader_limit = MAX_SCORE_LEVELS
    key_takes = "its levels' text"

    def parse_criteria(self, criteria: Any) -> Criteria:
        if criteria is None:
            raise InputError("a score question needs 'criteria'")
        if not isinstance(criteria, list) or not all(isinstance(x, (str, dict, list))
                                                      for x in criteria):
            raise InputError("score criteria must be an ordered list of level descriptions")
        count_ok(len(criteria), "score")
        levels = tuple(serialize_state(x) for x in criteria)
        if len(set(levels)) != len(levels):
            raise InputError("score levels must be distinct")
        return levels, levels

    def criteria_from_names(self, names: Sequence[str]) -> Any:
        return list(names)

    def labels(self, options: Sequence[str]) -> tuple[str, ...]:
        return score_labels(len(options))

    def criteria_of(self, question: Question) -> Any:
        return list(question.options)

    def expected_label(self, question: Question, value: Any) -> str | None:
        if isinstance(value, int) and not isinstance(value, bool):
            return question.labels[value] if 0 <= value < len(question.labels) else None
        return super().expected_label(question, value)

    def label_text(self, question: Question, index: int) -> str | None:
        return question.descriptions[index]

    def reply_labels(self, question: Question) -> tuple[str, ...]:
        n = len(question.labels)
        if n > MAX_SCORE_LEVELS:
            raise TemplateError(
                f"score question {question.id!r} has {n} levels; the vllm layout answers a "
                f"score with one digit, so at most {MAX_SCORE_LEVELS} levels: merge levels, or "
                "read it with --layout document_first (labels 1-9 and letters)")
        return tuple(str(i) for i in range(n))

    def option_line(self, question: Question, index: int, label: str) -> str:
        return f"{label}: {question.options[index]}"

    def option_start(self, lines: Sequence[str]) -> int | None:
        for k in range(len(lines) - 1, -1, -1):
            if lines[k].startswith("0: "):
                return k
        return None

    def read_options(self, lines: Sequence[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
        labels = tuple(line.split(": ", 1)[0] for line in lines)
        return labels, tuple(line.split(": ", 1)[1] if ": " in line else line for line in lines)

    def extras(self, question: Question, mean: Sequence[float]) -> Extras:
        return Extras(expected_level=math.fsum(i * p for i, p in enumerate(mean)),
                      legend={str(i): text for i, text in enumerate(question.options)})

    def endpoint_probs(self, question: Question, raw: Mapping[str, Any]) -> list[float]:
        probs = raw.get("probabilities")
        n = len(question.labels)
        if isinstance(probs, Mapping):
            keys = [str(i) for i in range(n)]
            if any(k not in probs for k in keys):
                raise MalformedResponse(f"question {question.id!r}: score probabilities need "
                                        f"the levels {keys}, got {sorted(probs)}")
            return [number(probs[k], f"{question.id}.probabilities[{k}]") for k in keys]
        level = round(number(raw.get("score"), f"question {question.id!r}: score"))
        if not 0 <= level < n:
            raise MalformedResponse(f"question {question.id!r}: score {level} is not a level "
                                    f"0..{n - 1}")
        return one_hot(n, level)

    def jev_answer(self, question: Question, probs: Sequence[float],
                   confidence: float) -> dict[str, Any]:
        extras = self.extras(question, probs)
        return {"type": self.name, "score": extras.expected_level, "confidence": confidence,
                "legend": dict(extras.legend or {}),
                "probabilities": {str(i): p for i, p in enumerate(probs)}}

    def reader_answer(self, question: Question, probs: Sequence[float],
                      confidence: float) -> dict[str, Any]:
        return {"type": self.name, "score": sum(i * p for i, p in enumerate(probs)),
                "legend": {str(i): name for i, name in enumerate(question.options)},
                "probabilities": {str(i): p for i, p in enumerate(probs)},
                "confidence": confidence}

    def jev_refusal(self, name: str, question: BaseModel) -> str | None:
        if len(getattr(question, "criteria", ())) > MAX_SCORE_LEVELS:
            return f"Too many score levels. Must have at most {MAX_SCORE_LEVELS} levels."
        return None

    def reader_options(self, criteria: Any) -> list[tuple[str, str | None]]:
        if not isinstance(criteria, list) or len(criteria) < 2:
            raise ValueError("score criteria must be an ordered list of levels")
        return [(str(level), None) for level in criteria]

    def jev_models(self) -> tuple[type[BaseModel], type[BaseModel]]:
        from app.engine.kinds.jev import ScoreAnswerOut, ScoreIn

        return ScoreIn, ScoreAnswerOut


SCORE = ScoreKind()
