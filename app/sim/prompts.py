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

from app.engine import QuestionKind, all_kinds, parse_messages
from app.engine.questions import answer_label
from app.engine.types import Question
from app.engine.vllm_reader import JOINT_REPLY
from app.errors import InputError

__all__ = ["Asked", "ReadPrompt", "understand"]

_JOINT_HEAD = re.compile(r"\n\nQuestion (\d+):")
_ISOLATED_HEAD = "\n\nQuestion: "


@dataclass(frozen=True)
class Asked:
    """One question as the prompt asks it."""

    instructions: str
    kind: QuestionKind | None = None  #: None: a dreads layout (its labels are dreads')
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
        assert self.kind is not None, "only a vLLM-reader prompt's question has a kind"
        n = len(self.labels)
        labels = self.kind.labels(self.options)
        return Question("", self.kind.name, self.instructions, labels, self.options, (None,) * n)


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


def _kind_replying(line: str) -> QuestionKind | None:
    """The kind whose reply line this is (each kind's differs)."""
    return next((k for k in all_kinds() if k.reply_line == line), None)


def _question_block(lines: list[str]) -> tuple[list[str], Asked] | None:
    """The lines before a question's options, and the question (its reply line last)."""
    kind = _kind_replying(lines[-1]) if lines else None
    if kind is None:
        return None
    start = kind.option_start(lines[:-1])
    if start is None:
        return None
    labels, names = kind.read_options(lines[start:-1])
    return lines[:start], Asked("", kind, labels, names)


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
    return ReadPrompt(state, {"": Asked(instructions, asked.kind, asked.labels, asked.options)})


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
        questions[match.group(1)] = Asked(instructions, asked.kind, asked.labels, asked.options)
    return ReadPrompt(text[:run[0].start()], questions)
