"""A question's OpenAI shape, typed, with everything that depends on it. Pure: no I/O.

A question asked in OpenAI's Decisions shape keeps that shape beside dreads' own question
(``Decision.openai``): a ``PredicateShape`` (dreads' noul: labels yes/no), a ``ChoiceShape``
(its typed values, labelled A, B, ... by position) or a ``ScoreShape`` (its level labels,
levels 0-indexed). Each shape maps an expected value to a canvas label, writes an answer in
OpenAI's shape, writes itself as a question for another Decisions endpoint, and reads that
endpoint's answer back as probabilities in label order. A decision from a dreads line gets
its shapes from its questions (``shape_for``).

Stored in a decision's payload as JSON, exactly as before the shapes were typed:
``{"type": "predicate", "name"}``, ``{"type": "choice", "name", "values"}``,
``{"type": "score", "name", "labels"}`` (``to_json`` / ``shape_from_json``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.engine.kinds import NOUL, Family, kind_of
from app.engine.kinds.base import one_hot
from app.engine.types import Question
from app.engine.values import number
from app.errors import InputError, MalformedResponse

__all__ = [
    "ChoiceShape",
    "ChoiceValue",
    "PredicateShape",
    "QuestionShape",
    "ScoreShape",
    "same_value",
    "shape_for",
    "shape_from_json",
]

ChoiceValue = str | bool  #: a choice's value: typed, so ``true`` and ``"true"`` differ


def same_value(a: Any, b: Any) -> bool:
    """Typed equality: ``True`` and ``"true"`` differ, as do ``1`` and ``True``."""
    return type(a) is type(b) and a == b


def _asked_instructions(question: Question, default: str) -> str:
    """The question's instructions; a noul's criteria (which OpenAI's predicate has no field
    for) are written after them; OpenAI needs non-empty instructions."""
    text = question.instructions
    if kind_of(question).family is Family.BINARY and any(question.descriptions):
        yes, no = question.descriptions
        criteria = "; ".join(f"{side}: {desc}" for side, desc in (("true", yes), ("false", no))
                             if desc)
        text = f"{text}\n({criteria})" if text else f"Answer true or false ({criteria})."
    return text or default


def _asked(kind: str, name: str | None, instructions: str, **fields: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"type": kind, "instructions": instructions}
    if name is not None:
        out["name"] = name
    return {**out, **fields}


def _top(probs: Sequence[float]) -> int:
    return max(range(len(probs)), key=probs.__getitem__)


@dataclass(frozen=True)
class PredicateShape:
    """A predicate: dreads' noul question; its answer's ``probability`` is P(yes)."""

    name: str | None

    def to_json(self) -> dict[str, Any]:
        return {"type": "predicate", "name": self.name}

    def expected_label(self, question: Question, value: Any) -> str:
        """``yes`` or ``no`` for true/false, or the yes/no words a noul's ``expected`` takes.

        Raises:
            ValueError: anything else; the message ends a sentence "<value> is ...".
        """
        label = NOUL.expected_label(question, value)
        if label is None:
            raise ValueError("a predicate expects true or false")
        return label

    def answer(self, probs: Sequence[float], confidence: float) -> dict[str, Any]:
        """OpenAI's answer from the probabilities in label order (yes, no)."""
        return {"type": "predicate", "name": self.name, "probability": probs[0]}

    def asked(self, question: Question) -> dict[str, Any]:
        """The question as OpenAI's request writes it, for another Decisions endpoint."""
        return _asked("predicate", self.name, _asked_instructions(question, "Is this true?"))

    def read_probs(self, question: Question, raw: Mapping[str, Any]) -> list[float]:
        """[P(yes), P(no)] from an endpoint's ``probability`` (P(true)).

        Raises:
            MalformedResponse: no number there.
        """
        p_true = number(raw.get("probability"), f"question {question.id!r}: probability")
        return [p_true, 1.0 - p_true]


@dataclass(frozen=True)
class ChoiceShape:
    """A choice: its typed values, option ``i`` labelled ``question.labels[i]`` (A, B, ...)."""

    name: str | None
    values: tuple[ChoiceValue, ...]

    def to_json(self) -> dict[str, Any]:
        return {"type": "choice", "name": self.name, "values": list(self.values)}

    def _index(self, value: Any) -> int | None:
        return next((i for i, v in enumerate(self.values) if same_value(v, value)), None)

    def expected_label(self, question: Question, value: Any) -> str:
        """The label of the choice whose value is ``value`` (typed).

        Raises:
            ValueError: no such choice.
        """
        index = self._index(value)
        if index is None:
            raise ValueError(f"not among the choices {json.dumps(list(self.values))} (values "
                             "are typed: true and \"true\" differ)")
        return question.labels[index]

    def answer(self, probs: Sequence[float], confidence: float) -> dict[str, Any]:
        """OpenAI's answer: the most probable value, every value's probability."""
        return {"type": "choice", "name": self.name, "choice": self.values[_top(probs)],
                "probabilities": [{"value": v, "probability": p}
                                  for v, p in zip(self.values, probs, strict=True)],
                "confidence": confidence}

    def asked(self, question: Question) -> dict[str, Any]:
        """The question with its typed values and the options' descriptions."""
        choices = [{"value": v, **({"description": d} if d else {})}
                   for v, d in zip(self.values, question.descriptions, strict=True)]
        return _asked("choice", self.name,
                      _asked_instructions(question, "Choose the option that fits."),
                      choices=choices)

    def read_probs(self, question: Question, raw: Mapping[str, Any]) -> list[float]:
        """Probabilities by value from ``probabilities``, else 1 on the ``choice``.

        Raises:
            MalformedResponse: a value left out, or a choice that is not one of the values.
        """
        listed = raw.get("probabilities")
        if isinstance(listed, list):
            return self._listed(question, listed)
        index = self._index(raw.get("choice"))
        if index is None:
            raise MalformedResponse(f"question {question.id!r}: choice {raw.get('choice')!r} "
                                    f"is not one of {json.dumps(list(self.values))}")
        return one_hot(len(self.values), index)

    def _listed(self, question: Question, listed: list[Any]) -> list[float]:
        probs: list[float | None] = [None] * len(self.values)
        for item in listed:
            if not isinstance(item, Mapping):
                continue
            for i, v in enumerate(self.values):
                if same_value(v, item.get("value")):
                    probs[i] = number(item.get("probability"), f"{question.id} probability")
        if any(p is None for p in probs):
            raise MalformedResponse(f"question {question.id!r}: probabilities do not cover "
                                    f"every choice {json.dumps(list(self.values))}")
        return [p for p in probs if p is not None]


def _level_description(label: str, option: str) -> str | None:
    """A level's description from its option text (``"label - description"``)."""
    prefix = f"{label} - "
    return option[len(prefix):] if option.startswith(prefix) else None


@dataclass(frozen=True)
class ScoreShape:
    """A score: its level labels, level ``i`` (0-indexed) labelled ``question.labels[i]``."""

    name: str | None
    labels: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"type": "score", "name": self.name, "labels": list(self.labels)}

    def expected_label(self, question: Question, value: Any) -> str:
        """The canvas label of a level given by its label or its 0-based index.

        Raises:
            ValueError: neither.
        """
        if isinstance(value, int) and not isinstance(value, bool) and \
                0 <= value < len(self.labels):
            return question.labels[value]
        if isinstance(value, str) and value in self.labels:
            return question.labels[self.labels.index(value)]
        raise ValueError(f"not a level label {list(self.labels)} or a 0-based level index")

    def answer(self, probs: Sequence[float], confidence: float) -> dict[str, Any]:
        """OpenAI's answer: the expected 0-indexed level, every level's probability."""
        return {"type": "score", "name": self.name,
                "score": sum(i * p for i, p in enumerate(probs)),
                "probabilities": [{"value": i, "label": label, "probability": p}
                                  for i, (label, p) in enumerate(zip(self.labels, probs,
                                                                     strict=True))],
                "confidence": confidence}

    def asked(self, question: Question) -> dict[str, Any]:
        """The question with its levels (a level's description from its option text)."""
        levels = []
        for label, option in zip(self.labels, question.options, strict=True):
            text = _level_description(label, option)
            levels.append({"label": label, **({"description": text} if text else {})})
        return _asked("score", self.name,
                      _asked_instructions(question, "Choose the level that fits."),
                      levels=levels)

    def read_probs(self, question: Question, raw: Mapping[str, Any]) -> list[float]:
        """Probabilities by 0-indexed level from ``probabilities``, else 1 on the rounded
        ``score``.

        Raises:
            MalformedResponse: a level out of range, or no usable score.
        """
        n = len(question.labels)
        listed = raw.get("probabilities")
        if isinstance(listed, list) and len(listed) == n:
            return _by_level(question, listed)
        level = round(number(raw.get("score"), f"question {question.id!r}: score"))
        if not 0 <= level < n:
            raise MalformedResponse(f"question {question.id!r}: score {level} is not "
                                    f"0..{n - 1}")
        return one_hot(n, level)


def _by_level(question: Question, listed: list[Any]) -> list[float]:
    n = len(question.labels)
    probs = [0.0] * n
    for pos, item in enumerate(listed):
        item = item if isinstance(item, Mapping) else {}
        index = item.get("value", pos)
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < n:
            raise MalformedResponse(f"question {question.id!r}: level {index!r} is not "
                                    f"0..{n - 1}")
        probs[index] = number(item.get("probability"), f"{question.id} probability")
    return probs


QuestionShape = PredicateShape | ChoiceShape | ScoreShape


def shape_for(question: Question) -> QuestionShape:
    """The OpenAI shape of a question from a dreads line, by its kind's family: yes/no ->
    predicate, options -> string values (the option names), levels -> levels by their text;
    named by the question id."""
    family = kind_of(question).family
    if family is Family.BINARY:
        return PredicateShape(question.id)
    if family is Family.ORDINAL:
        return ScoreShape(question.id, question.options)
    return ChoiceShape(question.id, question.options)


def shape_from_json(obj: Any) -> QuestionShape:
    """A shape as stored (``to_json``).

    Raises:
        InputError: not a stored shape.
    """
    if not isinstance(obj, Mapping):
        raise InputError(f"a stored OpenAI question shape must be an object, got {obj!r}")
    kind, name = obj.get("type"), obj.get("name")
    if name is not None and not isinstance(name, str):
        raise InputError(f"a stored OpenAI question shape's name must be text, got {name!r}")
    if kind == "predicate":
        return PredicateShape(name)
    items = obj.get("values" if kind == "choice" else "labels")
    if kind not in ("choice", "score") or not isinstance(items, list):
        raise InputError(f"not a stored OpenAI question shape: {dict(obj)!r}")
    return ChoiceShape(name, tuple(items)) if kind == "choice" else ScoreShape(name, tuple(items))
