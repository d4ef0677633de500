"""What the simulator understands of a read's prompt: the state, and the question asked at each
answer slot.

Two prompt families are understood:

- dreads' own layouts (``Document:`` ... ``Questions:``, or the questions in the system message):
  slots are named by canvas id (``q0``, ``q1``, ...), labels are dreads' (yes/no, A.., 1..);
- vLLM 0.33's reader (the vllm layout, and the simulator's own ``/v1/systemone`` and
  ``/v1/decisions``): an isolated read answers at the reply's first token (canvas position 0),
  a joint read at the numbered answer lines (``1``, ``2``, ...); labels are yes/no, A..Z and
  the digits 0..9 of score levels.

The answer key holds answers as a job file's ``expected`` gives them; ``Asked.key_label`` turns
one into the label the prompt offers (a score's "3", its third level, is "2" in vLLM's
0-indexed digits; an option's name is its letter). Any other prompt is
read as plain text with no known question.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Any

from app.engine import parse_messages
from app.engine.questions import answer_label, score_labels
from app.engine.types import Question, QuestionType
from app.engine.vllm_reader import JOINT_REPLY, REPLY_INSTRUCTIONS
from app.errors import InputError

__all__ = ["Asked", "ReadPrompt", "understand"]

_TYPES = {text: qtype for qtype, text in REPLY_INSTRUCTIONS.items()}
_JOINT_HEAD = re.compile(r"\n\nQuestion (\d+):")
_ISOLATED_HEAD = "\n\nQuestion: "


@dataclass(frozen=True)
class Asked:
    """One question as the prompt asks it."""

    instructions: str
    qtype: QuestionType | None = None  #: None: a dreads layout (its labels are dreads')
    labels: tuple[str, ...] = ()  #: the labels the prompt offers, in option order
    options: tuple[str, ...] = ()  #: the option names, in the same order

    def key_label(self, answer: Any) -> str | None:
        """The prompt's label for an answer-key answer (a dreads label, an option name, a
        level's text or index, yes/no for a true/false choice, as ``answer_label`` reads
        them); None when the question offers no such answer."""
        try:
            label = answer_label(self._question, answer)
        except InputError:
            return None
        return self.labels[self._question.labels.index(label)]

    @cached_property
    def _question(self) -> Question:
        """The question as dreads writes it (its labels dreads': a score's are 1..)."""
        assert self.qtype is not None, "only a vLLM-reader prompt's question has a type"
        n = len(self.labels)
        labels = score_labels(n) if self.qtype is QuestionType.SCORE else self.labels
        return Question("", self.qtype, self.instructions, labels, self.options, (None,) * n)


@dataclass(frozen=True)
class ReadPrompt:
    """A prompt's state and its questions by slot name."""

    state_text: str
    #: "q0".. (dreads' canvas ids), "1".. (a joint read's numbers), "" (the reply's first token)
    questions: Mapping[str, Asked] = field(default_factory=dict)

    @property
    def reply_slot(self) -> bool:
        """An isolated vLLM-reader read: its answer is the reply's first token."""
        return "" in self.questions


def understand(pairs: Sequence[tuple[str, str]]) -> ReadPrompt:
    """The prompt's state and questions (cached per prompt)."""
    return _understand(tuple(pairs))


@lru_cache(maxsize=4096)
def _understand(pairs: tuple[tuple[str, str], ...]) -> ReadPrompt:
    try:
        parts = parse_messages([{"role": r, "content": c} for r, c in pairs])
    except ValueError:
        pass
    else:
        return ReadPrompt(parts.state_text,
                          {cid: Asked(text) for cid, text in parts.questions.items()})
    users = [c for r, c in pairs if r == "user"]
    if users:
        parsed = _reader_prompt(users[-1])
        if parsed is not None:
            return parsed
    return ReadPrompt("\n".join(c for _, c in pairs))


def _reader_prompt(content: str) -> ReadPrompt | None:
    joint_end = "\n\n" + JOINT_REPLY
    if content.endswith(joint_end):
        return _joint(content[:-len(joint_end)])
    return _isolated(content)


def _options(lines: list[str], qtype: QuestionType) -> int | None:
    """Where the option lines start (they run to the end of ``lines``)."""
    if qtype is QuestionType.NOUL:
        return len(lines) - 2 if len(lines) >= 2 else None
    first = "A: " if qtype is QuestionType.CHOICE else "0: "
    for k in range(len(lines) - 1, -1, -1):
        if lines[k].startswith(first):
            return k
    return None


def _asked(instructions: str, option_lines: list[str], qtype: QuestionType) -> Asked:
    if qtype is QuestionType.NOUL:
        return Asked(instructions, qtype, ("yes", "no"), ("yes", "no"))
    labels = tuple(line.split(": ", 1)[0] for line in option_lines)
    names = tuple(line.split(": ", 1)[1] if ": " in line else line for line in option_lines)
    if qtype is QuestionType.CHOICE:  # "A: {name} - {description}"; a level is all text
        names = tuple(name.split(" - ", 1)[0] for name in names)
    return Asked(instructions, qtype, labels, names)


def _question_block(lines: list[str]) -> tuple[list[str], Asked] | None:
    """The lines before a question's options, and the question (its reply line last)."""
    qtype = _TYPES.get(lines[-1]) if lines else None
    if qtype is None:
        return None
    start = _options(lines[:-1], qtype)
    if start is None:
        return None
    return lines[:start], _asked("", lines[start:-1], qtype)


def _isolated(content: str) -> ReadPrompt | None:
    found = _question_block(content.split("\n"))
    if found is None:
        return None
    head_lines, asked = found
    head = "\n".join(head_lines)
    cut = head.rfind(_ISOLATED_HEAD)
    if cut >= 0:
        state, instructions = head[:cut], head[cut + len(_ISOLATED_HEAD):]
    else:
        state, instructions = head.removesuffix("\n"), ""
    return ReadPrompt(state, {"": Asked(instructions, asked.qtype, asked.labels, asked.options)})


def _joint(text: str) -> ReadPrompt | None:
    heads = list(_JOINT_HEAD.finditer(text))
    if not heads:
        return None
    run = [heads[-1]]  # the last run of consecutive numbers is the question list
    for match in reversed(heads[:-1]):
        if int(match.group(1)) != int(run[0].group(1)) - 1:
            break
        run.insert(0, match)
    questions: dict[str, Asked] = {}
    for k, match in enumerate(run):
        end = run[k + 1].start() if k + 1 < len(run) else len(text)
        found = _question_block(text[match.end():end].split("\n"))
        if found is None:
            return None
        head_lines, asked = found
        instructions = "\n".join(head_lines).removeprefix(" ")
        questions[match.group(1)] = Asked(instructions, asked.qtype, asked.labels, asked.options)
    return ReadPrompt(text[:run[0].start()], questions)
