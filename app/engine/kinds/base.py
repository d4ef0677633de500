"""What a question kind is: ``QuestionKind``, the one class a kind of question subclasses.

A kind owns everything that differs between kinds of question: the job file's ``criteria``
(its options and their descriptions), the canvas labels, the default instruction and the
vLLM reader's reply line, expected values, the answer's extras (P(yes), the expected level),
an endpoint's answer read back, Jev's answer shape, the simulator's reading of vLLM's rules,
and the ``family`` by which reports and exports choose its figures and columns. Everything
else loops over the registry (``app.engine.kinds.registry``). Pure: no I/O.
"""

from __future__ import annotations

import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar

from app.engine.values import number, serialize_state
from app.errors import InputError, MalformedResponse

if TYPE_CHECKING:
    from pydantic import BaseModel

    from app.engine.types import Question

__all__ = [
    "DIGITS",
    "LETTERS",
    "MAX_LABELS",
    "Content",
    "Criteria",
    "Extras",
    "Family",
    "QuestionKind",
    "as_text",
    "count_ok",
    "one_hot",
    "reader_text",
    "score_labels",
]

MAX_LABELS = 26
LETTERS = tuple(string.ascii_uppercase)
DIGITS = tuple(str(i) for i in range(1, 10))
#: Jev content: text, or any JSON object or array (written into the prompt as JSON).
Content = str | dict[str, Any] | list[Any]
#: A question's options (user-facing names) and, per option, its description or None.
Criteria = tuple[tuple[str, ...], tuple[str | None, ...]]


class Family(StrEnum):
    """How reports and exports treat a kind's answers."""

    BINARY = "binary"  #: two labels, the first the positive: P(yes), AUC, recall, calibration
    NOMINAL = "nominal"  #: unordered options: accuracy, log loss, a confusion table
    ORDINAL = "ordinal"  #: ordered levels: accuracy, mean absolute error of the level


@dataclass(frozen=True)
class Extras:
    """What an answer carries beyond its probabilities, by kind."""

    p_yes: float | None = None
    expected_level: float | None = None
    legend: Mapping[str, str] | None = None


def score_labels(n: int) -> tuple[str, ...]:
    """Canvas labels of an n-level score: 1..9, letters when there are more than 9 levels."""
    return DIGITS[:n] if n <= len(DIGITS) else LETTERS[:n]


def as_text(value: Any, what: str) -> str | None:
    """Text as is; a JSON object or array as its JSON text (Jev content); None stays None."""
    if value is None:
        return None
    if not isinstance(value, (str, dict, list)):
        raise InputError(f"{what} must be text, a JSON object or array, or null; got "
                         f"{type(value).__name__}")
    return serialize_state(value)


def reader_text(value: Any) -> str:
    """Text as vLLM's reader writes it: a non-string with ``str()``, None as ""."""
    return "" if value is None else value if isinstance(value, str) else str(value)


def count_ok(n: int, noun: str) -> None:
    """``InputError`` unless 1 to ``MAX_LABELS`` options."""
    if not 1 <= n <= MAX_LABELS:
        raise InputError(f"{noun} needs 1 to {MAX_LABELS} entries in 'criteria', got {n}")


def one_hot(n: int, index: int) -> list[float]:
    """Probability 1 on ``index`` of ``n`` (an answer given as one label)."""
    return [1.0 if i == index else 0.0 for i in range(n)]


class QuestionKind:
    """One kind of question. Subclass it, set the class attributes, override what differs,
    and register an instance (``register_kind``, or the ``dreads.question_kinds`` entry point).
    The defaults are those of a choice: options by position, labelled A, B, ..."""

    name: ClassVar[str]  #: the job file's ``type`` (stored; at most 16 characters)
    title: ClassVar[str]  #: how reports name it ("yes/no", "choice", ...)
    family: ClassVar[Family] = Family.NOMINAL
    #: the question line of dreads' own layouts when the user gave no instructions
    default_instruction: ClassVar[str] = "Which option applies?"
    #: the vLLM reader's line closing the question (unique per kind: the simulator reads it)
    reply_line: ClassVar[str]
    #: most options vLLM's reader takes (the simulator refuses more)
    reader_limit: ClassVar[int] = MAX_LABELS
    #: whether a question names its options (``decide --options``); False: fixed labels
    takes_options: ClassVar[bool] = True
    #: what an answer key may give besides the labels (the simulator's message)
    key_takes: ClassVar[str] = "its option names"

    # -- the job file -------------------------------------------------------------------

    def parse_criteria(self, criteria: Any) -> Criteria:
        """The options and descriptions of a question's ``criteria`` (None: left out).

        Raises:
            InputError: criteria this kind cannot take; the message says which it takes.
        """
        if criteria is None:
            raise InputError(f"a {self.name} question needs 'criteria'")
        if isinstance(criteria, Mapping):
            names = [str(k) for k in criteria]
            descs = tuple(as_text(v, f"description of option {k!r}") for k, v in criteria.items())
        elif isinstance(criteria, list) and all(isinstance(x, str) for x in criteria):
            names, descs = list(criteria), tuple(None for _ in criteria)
        else:
            raise InputError(f"{self.name} criteria must map option name -> description (or "
                             "null)")
        count_ok(len(names), self.name)
        if len(set(names)) != len(names):
            raise InputError(f"{self.name} option names must be distinct")
        return tuple(names), descs

    def labels(self, options: Sequence[str]) -> tuple[str, ...]:
        """The canvas labels of these options, in option order."""
        return LETTERS[:len(options)]

    def check_instructions(self, descriptions: Sequence[str | None]) -> None:
        """Raise ``InputError`` when a question of this kind needs instructions that were
        left out (the default: none are needed)."""

    def criteria_of(self, question: Question) -> Any:
        """The ``criteria`` of the question's spec as stored (None: left out)."""
        return dict(zip(question.options, question.descriptions, strict=True))

    def expected_label(self, question: Question, value: Any) -> str | None:
        """The canvas label an expected value names (a label or an option name), or None."""
        if isinstance(value, bool) or not isinstance(value, str):
            return None
        if value in question.options:
            return question.labels[question.options.index(value)]
        return value if value in question.labels else None

    def criteria_from_names(self, names: Sequence[str]) -> Any:
        """The ``criteria`` of a question whose options are only named (``decide
        --options``); None when the kind takes none."""
        return {name: None for name in names}

    # -- prompts --------------------------------------------------------------------------

    def label_text(self, question: Question, index: int) -> str | None:
        """What dreads' own layouts write after a label (None: the label line is left out)."""
        desc, name = question.descriptions[index], question.options[index]
        return f"{name}: {desc}" if desc else name

    def reply_labels(self, question: Question) -> tuple[str, ...]:
        """The labels the vLLM reader's model answers with."""
        return question.labels

    def option_line(self, question: Question, index: int, label: str) -> str:
        """One option line of the vLLM reader's prompt."""
        name, desc = question.options[index], question.descriptions[index]
        return f"{label}: {name} - {desc}" if desc else f"{label}: {name}"

    def option_start(self, lines: Sequence[str]) -> int | None:
        """Where a vLLM reader prompt's option lines start (they run to the end of
        ``lines``, the reply line left out); None: not a question of this kind."""
        first = self.labels(("",))[0] + ": "
        for k in range(len(lines) - 1, -1, -1):
            if lines[k].startswith(first):
                return k
        return None

    def read_options(self, lines: Sequence[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The labels and option names of a vLLM reader prompt's option lines."""
        labels = tuple(line.split(": ", 1)[0] for line in lines)
        names = tuple(line.split(": ", 1)[1] if ": " in line else line for line in lines)
        return labels, tuple(name.split(" - ", 1)[0] for name in names)

    # -- answers --------------------------------------------------------------------------

    def extras(self, question: Question, mean: Sequence[float]) -> Extras:
        """The answer's extras from its mean probabilities (label order)."""
        return Extras()

    def endpoint_probs(self, question: Question, raw: Mapping[str, Any]) -> list[float]:
        """Probabilities per label of a ``/v1/systemone`` answer (Jev's shape): its
        ``probabilities`` by option name, else probability 1 on its chosen option.

        Raises:
            MalformedResponse: the answer does not give them.
        """
        probs = raw.get("probabilities")
        if isinstance(probs, Mapping):
            missing = [o for o in question.options if o not in probs]
            if missing:
                raise MalformedResponse(f"question {question.id!r}: no probability for "
                                        f"option(s) {missing}")
            return [number(probs[o], f"{question.id}.probabilities[{o!r}]")
                    for o in question.options]
        chosen = raw.get(self.name)
        if chosen not in question.options:
            raise MalformedResponse(f"question {question.id!r}: {self.name} {chosen!r} is not "
                                    f"one of {list(question.options)}")
        return one_hot(len(question.labels), question.options.index(chosen))

    def jev_answer(self, question: Question, probs: Sequence[float],
                   confidence: float) -> dict[str, Any]:
        """Jev's answer shape (``dreads serve``), from the probabilities in label order."""
        top = max(range(len(probs)), key=lambda i: (probs[i], -i))
        return {"type": self.name, self.name: question.options[top], "confidence": confidence,
                "probabilities": dict(zip(question.options, probs, strict=True))}

    def reader_answer(self, question: Question, probs: Sequence[float],
                      confidence: float) -> dict[str, Any]:
        """vLLM 0.33's ``/v1/systemone`` answer (the simulator's)."""
        top = probs.index(max(probs))
        return {"type": self.name, self.name: question.options[top],
                "probabilities": dict(zip(question.options, probs, strict=True)),
                "confidence": confidence}

    # -- Jev and vLLM's request rules -------------------------------------------------------

    def jev_models(self) -> tuple[type[BaseModel], type[BaseModel]]:
        """Jev's request model of the question (its ``type`` a ``Literal`` of ``name``) and
        its answer's model (pydantic, imported here only: the engine loads it lazily)."""
        from app.engine.kinds.jev import option_models

        return option_models(self.name)

    def jev_spec(self, question: BaseModel) -> dict[str, Any]:
        """A dreads question spec of Jev's question (an instance of ``jev_in``)."""
        spec: dict[str, Any] = {"type": self.name}
        instructions = getattr(question, "instructions", None)
        if instructions is not None:
            spec["instructions"] = instructions
        criteria = getattr(question, "criteria", None)
        if criteria is not None:
            dump = getattr(criteria, "model_dump", None)  # a model of named parts
            spec["criteria"] = dump() if callable(dump) else criteria
        return spec

    def jev_refusal(self, name: str, question: BaseModel) -> str | None:
        """Why Jev would refuse the question (too many options), or None."""
        n = len(getattr(question, "criteria", None) or ())
        if n > MAX_LABELS:
            return (f"Too many choices. Must have at most {MAX_LABELS} choices (question "
                    f"{name!r} has {n}).")
        return None

    def reader_options(self, criteria: Any) -> list[tuple[str, str | None]]:
        """The options vLLM 0.33's reader makes of ``criteria`` (name, description).

        Raises:
            ValueError: criteria it refuses; the message says why.
        """
        if not isinstance(criteria, dict) or not criteria:
            raise ValueError(f"{self.name} criteria must map option names to a description or "
                             "null")
        return [(str(k), None if v is None else str(v)) for k, v in criteria.items()]

    def __repr__(self) -> str:
        return f"<question kind {self.name!r}>"
