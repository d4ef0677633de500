"""The yes/no kind (Jev's ``noul``): labels yes and no; the answer is P(yes)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from app.engine.kinds.base import (
    Criteria,
    Extras,
    Family,
    QuestionKind,
    as_text,
    reader_text,
)
from app.engine.values import number
from app.errors import InputError

if TYPE_CHECKING:
    from pydantic import BaseModel

    from app.engine.types import Question

__all__ = ["NOUL", "NoulKind"]

_YES_NO = ("yes", "no")
#: What an expected value may say for yes, and for no (the one set of yes/no words).
YES_WORDS = frozenset({"yes", "true", "y", "1"})
NO_WORDS = frozenset({"no", "false", "n", "0"})


class NoulKind(QuestionKind):
    """Yes or no; ``criteria`` ``{"true", "false"}`` optionally describe each side."""

    name = "noul"
    title = "yes/no"
    family = Family.BINARY
    default_instruction = "Which answer applies?"
    reply_line = "Answer with yes or no only."
    reader_limit = 2
    key_takes = "true/false"
    takes_options = False

    def parse_criteria(self, criteria: Any) -> Criteria:
        if criteria is None:
            return _YES_NO, (None, None)
        if not isinstance(criteria, Mapping) or set(criteria) - {"true", "false"}:
            raise InputError('noul criteria must be {"true": text, "false": text}')
        return _YES_NO, (as_text(criteria.get("true"), "criteria 'true'"),
                         as_text(criteria.get("false"), "criteria 'false'"))

    def criteria_from_names(self, names: Sequence[str]) -> Any:
        return None

    def labels(self, options: Sequence[str]) -> tuple[str, ...]:
        return tuple(options)

    def check_instructions(self, descriptions: Sequence[str | None]) -> None:
        if all(d is None for d in descriptions):
            raise InputError("a noul question needs 'instructions', or 'criteria' describing "
                             "what counts as yes or no")

    def criteria_of(self, question: Question) -> Any:
        if all(d is None for d in question.descriptions):
            return None
        return {"true": question.descriptions[0], "false": question.descriptions[1]}

    def expected_label(self, question: Question, value: Any) -> str | None:
        if isinstance(value, bool):
            return "yes" if value else "no"
        text = str(value).strip().lower()
        return "yes" if text in YES_WORDS else "no" if text in NO_WORDS else None

    def label_text(self, question: Question, index: int) -> str | None:
        return question.descriptions[index]

    def option_line(self, question: Question, index: int, label: str) -> str:
        desc = question.descriptions[index]
        return f"{label}: {desc}" if desc else label

    def option_start(self, lines: Sequence[str]) -> int | None:
        return len(lines) - 2 if len(lines) >= 2 else None

    def read_options(self, lines: Sequence[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
        return _YES_NO, _YES_NO

    def extras(self, question: Question, mean: Sequence[float]) -> Extras:
        return Extras(p_yes=mean[0])

    def endpoint_probs(self, question: Question, raw: Mapping[str, Any]) -> list[float]:
        probs = raw.get("probabilities")
        if isinstance(probs, Mapping) and "yes" in probs and "no" in probs:
            return [number(probs["yes"], f"{question.id}.probabilities.yes"),
                    number(probs["no"], f"{question.id}.probabilities.no")]
        p_yes = number(raw.get("noul"), f"question {question.id!r}: noul")
        return [p_yes, 1.0 - p_yes]

    def jev_answer(self, question: Question, probs: Sequence[float],
                   confidence: float) -> dict[str, Any]:
        return {"type": self.name, "noul": probs[0]}

    def reader_answer(self, question: Question, probs: Sequence[float],
                      confidence: float) -> dict[str, Any]:
        return {"type": self.name, "noul": probs[0],
                "probabilities": {"yes": probs[0], "no": probs[1]}, "confidence": confidence}

    def jev_refusal(self, name: str, question: BaseModel) -> str | None:
        return None

    def reader_options(self, criteria: Any) -> list[tuple[str, str | None]]:
        if criteria is not None and (not isinstance(criteria, dict)
                                     or not criteria.keys() <= {"true", "false"}):
            raise ValueError("noul criteria must be an object with true and false")
        criteria = criteria or {}
        return [("yes", reader_text(criteria.get("true")) or None),
                ("no", reader_text(criteria.get("false")) or None)]

    def jev_models(self) -> tuple[type[BaseModel], type[BaseModel]]:
        from app.engine.kinds.jev import NoulAnswerOut, NoulIn

        return NoulIn, NoulAnswerOut


NOUL = NoulKind()
