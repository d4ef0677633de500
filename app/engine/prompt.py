"""The prompt of a read, in two layouts, and its inverse (used by the simulator).

Document first (default; the state is a shared prefix for the prefix cache)::

    system: SYSTEM_INSTRUCTION
    user:   "Document:\\n{state}\\n\\n{question block}"

Reference (the reference server's layout)::

    system: "{question block}"
    user:   "{state}"

Question block::

    Questions:
    q0: {instructions}
      {label}: {description}        (choice, score, noul with criteria)
    {answer format line}

Continuation lines of a multi-line instruction or description are indented by four spaces,
so the block can be parsed back whatever the user wrote.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from app.engine.kinds import kind_of
from app.engine.types import Decision, Layout, Message, Question
from app.engine.values import serialize_state

__all__ = ["SYSTEM_INSTRUCTION", "PromptParts", "build_messages",
           "parse_messages", "serialize_state"]

SYSTEM_INSTRUCTION = (
    "You answer questions about a document. Read the document, then answer every question "
    "with exactly one of its allowed labels, in the answer format given."
)
DOCUMENT_HEAD = "Document:\n"
QUESTIONS_HEAD = "Questions:\n"
_CONT = "    "
_LABEL = "  "
_QUESTION_LINE = re.compile(r"^(q\d+): (.*)$")
#: Past this many questions in one canvas the template switches to the indexed format.
INDEXED_AFTER = 10


@dataclass(frozen=True)
class PromptParts:
    """What ``parse_messages`` recovers from a prompt."""

    state_text: str
    questions: Mapping[str, str]  #: canvas id -> instructions


def _indent(text: str) -> str:
    return text.replace("\n", "\n" + _CONT)


def _question_lines(canvas_id: str, question: Question) -> list[str]:
    kind = kind_of(question)
    asked = question.instructions or kind.default_instruction
    lines = [f"{canvas_id}: {_indent(asked)}"]
    for i, label in enumerate(question.labels):
        text = kind.label_text(question, i)
        if text is not None:
            lines.append(f"{_LABEL}{label}: {_indent(text)}")
    return lines


def format_line(canvas_ids: Sequence[str]) -> str:
    """The answer format line closing the question block."""
    if len(canvas_ids) > INDEXED_AFTER:
        return (f"Answer on one line, each question id followed directly by its label, "
                f"separated by spaces: {canvas_ids[0]}<label> {canvas_ids[1]}<label> ...")
    return ("Answer with one line per question, in the form \"<question id>: <label>\", "
            "using only the labels listed (yes or no where none are listed).")


def question_block(decision: Decision, question_indices: Sequence[int],
                   canvas_ids: Sequence[str]) -> str:
    """The questions of one read unit, with their labels and the answer format."""
    lines = [QUESTIONS_HEAD.rstrip("\n")]
    for qi, cid in zip(question_indices, canvas_ids, strict=True):
        lines.extend(_question_lines(cid, decision.questions[qi]))
    lines.append(format_line(canvas_ids))
    return "\n".join(lines)


def build_messages(decision: Decision, question_indices: Sequence[int],
                   canvas_ids: Sequence[str], layout: Layout) -> tuple[Message, ...]:
    """The system and user messages of one read unit.

    Args:
        decision: the decision.
        question_indices: indices into ``decision.questions`` read by this unit.
        canvas_ids: ``q0, q1, ...``, one per question index.
        layout: document first (default) or the reference server's layout.
    """
    state = serialize_state(decision.state)
    block = question_block(decision, question_indices, canvas_ids)
    if layout == Layout.REFERENCE:
        return ({"role": "system", "content": block}, {"role": "user", "content": state})
    user = f"{DOCUMENT_HEAD}{state}\n\n{block}"
    return ({"role": "system", "content": SYSTEM_INSTRUCTION}, {"role": "user", "content": user})


def _parse_block(block: str) -> dict[str, str]:
    if not block.startswith(QUESTIONS_HEAD):
        raise ValueError("the question block does not start with 'Questions:'")
    questions: dict[str, str] = {}
    current: str | None = None  # the canvas id whose instructions continue on the next line
    for line in block[len(QUESTIONS_HEAD):].split("\n"):
        match = _QUESTION_LINE.match(line)
        if match:
            current = match.group(1)
            questions[current] = match.group(2)
        elif line.startswith(_CONT):
            if current is not None:
                questions[current] += "\n" + line[len(_CONT):]
        else:  # a label line or the format line ends the instructions
            current = None
    return questions


def parse_messages(messages: Sequence[Message]) -> PromptParts:
    """Invert ``build_messages`` (either layout).

    Raises:
        ValueError: the messages were not built by ``build_messages``.
    """
    by_role = {m.get("role"): m.get("content", "") for m in messages}
    system, user = by_role.get("system", ""), by_role.get("user", "")
    if system.startswith(QUESTIONS_HEAD):
        return PromptParts(state_text=user, questions=_parse_block(system))
    if not user.startswith(DOCUMENT_HEAD):
        raise ValueError("the user message does not start with 'Document:'")
    cut = user.rfind("\n\n" + QUESTIONS_HEAD)
    if cut < len(DOCUMENT_HEAD):
        raise ValueError("no question block in the user message")
    return PromptParts(state_text=user[len(DOCUMENT_HEAD):cut],
                       questions=_parse_block(user[cut + 2:]))
