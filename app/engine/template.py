"""Answer template, slot resolution, canvas width, and the read plan of a decision.

Slot resolution follows protocol.md section 2: tokenize the whole answer template with the
first label of every question, re-tokenize with each other label swapped in; the length must
not change and exactly one position may differ, the same for all labels of a question, and a
question's label ids must be distinct. Anything else is a ``TemplateError`` naming the label
and the question. The canvas is ``[scaffold] + answer ids + [turn close] + [pad ...]``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, cast

from app.engine.prompt import INDEXED_AFTER, build_messages
from app.engine.types import (
    Decision,
    DecisionPlan,
    Endpoint,
    ReadMode,
    ReadSettings,
    ReadUnit,
    SlotSpec,
    TextTokenizer,
)
from app.errors import TemplateError

__all__ = ["ResolvedTemplate", "answer_lines", "canvas_width", "plan_decision",
           "resolve_slots", "resolve_unit"]

LINES = "lines"
INDEXED = "indexed"
_HINT = "labels must be single tokens: use yes/no, A-Z or 1-9"


class CanvasOverflow(TemplateError):
    """The template is too wide for the canvas or needs too many logprob ids."""


@dataclass(frozen=True)
class ResolvedTemplate:
    """Answer-line ids (first labels in) and, per question, its slot and label ids."""

    ids: tuple[int, ...]
    positions: tuple[int, ...]
    label_ids: tuple[tuple[int, ...], ...]


class _SlotProblem(Exception):
    def __init__(self, qpos: int, text: str) -> None:
        super().__init__(text)
        self.qpos = qpos
        self.text = text


def answer_lines(canvas_ids: Sequence[str], labels: Sequence[str], *, fmt: str) -> str:
    """The answer text: ``"lines"`` gives ``q0: yes\\nq1: no``, ``"indexed"`` ``q0yes q1no``."""
    pairs = zip(canvas_ids, labels, strict=True)
    if fmt == LINES:
        return "\n".join(f"{cid}: {label}" for cid, label in pairs)
    if fmt == INDEXED:
        return " ".join(f"{cid}{label}" for cid, label in pairs)
    raise ValueError(f"unknown answer format {fmt!r}; use {LINES!r} or {INDEXED!r}")


def canvas_width(n_ids: int, *, step: int, cap: int) -> int | None:
    """The smallest multiple of ``step`` holding ``n_ids``, capped at ``cap``.

    Returns None when ``n_ids`` exceeds ``cap`` (the template does not fit).
    """
    if n_ids > cap:
        return None
    return min(-(-n_ids // step) * step, cap)


def _diff(base: Sequence[int], other: Sequence[int]) -> list[int]:
    return [k for k, (a, b) in enumerate(zip(base, other, strict=True)) if a != b]


def _length_problem(qpos: int, labels: Sequence[str], label: str, delta: int) -> _SlotProblem:
    name, n = (label, 1 + delta) if delta > 0 else (labels[0], 1 - delta)
    return _SlotProblem(qpos, f"label {name!r} of question {{qid}} is {n} tokens in the answer "
                              f"template; {_HINT}")


def _resolve_question(tokenizer: TextTokenizer, base: tuple[int, ...], qpos: int,
                      label_sets: Sequence[Sequence[str]], canvas_ids: Sequence[str],
                      fmt: str) -> tuple[int, tuple[int, ...]]:
    firsts = [labels[0] for labels in label_sets]
    labels = label_sets[qpos]
    position: int | None = None
    ids: list[int] = []
    for label in labels[1:]:
        swapped = [*firsts[:qpos], label, *firsts[qpos + 1:]]
        other = tokenizer.encode(answer_lines(canvas_ids, swapped, fmt=fmt))
        if len(other) != len(base):
            raise _length_problem(qpos, labels, label, len(other) - len(base))
        diff = _diff(base, other)
        if len(diff) != 1:
            raise _SlotProblem(qpos, f"label {label!r} of question {{qid}} changes {len(diff)} "
                                     f"positions of the answer template, not one; {_HINT}")
        if position is not None and diff[0] != position:
            raise _SlotProblem(qpos, f"labels {labels[0]!r} and {label!r} of question {{qid}} "
                                     f"land on different positions; {_HINT}")
        position = diff[0]
        ids.append(other[position])
    assert position is not None  # a question with one label is trivial and never resolved
    ids.insert(0, base[position])
    if len(set(ids)) != len(ids):
        raise _SlotProblem(qpos, f"two labels of question {{qid}} ({list(labels)}) are the same "
                                 f"token; use distinct labels")
    return position, tuple(ids)


def _resolve(tokenizer: TextTokenizer, label_sets: tuple[tuple[str, ...], ...],
             canvas_ids: tuple[str, ...], fmt: str) -> ResolvedTemplate:
    base = tuple(tokenizer.encode(answer_lines(canvas_ids, [s[0] for s in label_sets], fmt=fmt)))
    slots = [_resolve_question(tokenizer, base, q, label_sets, canvas_ids, fmt)
             for q in range(len(label_sets))]
    positions = tuple(p for p, _ in slots)
    if len(set(positions)) != len(positions):
        raise _SlotProblem(0, "two questions of one canvas share an answer position around "
                              "question {qid}; read them in isolated mode")
    return ResolvedTemplate(ids=base, positions=positions, label_ids=tuple(i for _, i in slots))


_resolve_cached = functools.lru_cache(maxsize=4096)(_resolve)


def resolve_slots(tokenizer: TextTokenizer, label_sets: Sequence[Sequence[str]],
                  canvas_ids: Sequence[str], fmt: str, *,
                  question_ids: Sequence[str]) -> ResolvedTemplate:
    """Resolve the slot and label ids of every question of one answer template (cached).

    Raises:
        TemplateError: names the label and the question (by ``question_ids``).
    """
    key = (tuple(tuple(s) for s in label_sets), tuple(canvas_ids), fmt)
    try:
        try:
            return _resolve_cached(cast(Any, tokenizer), *key)
        except TypeError:  # an unhashable tokenizer: resolve without the cache
            return _resolve(tokenizer, *key)
    except _SlotProblem as problem:
        qid = repr(question_ids[problem.qpos])
        raise TemplateError(problem.text.replace("{qid}", qid)) from None


def _unit_fmt(n_questions: int) -> str:
    return INDEXED if n_questions > INDEXED_AFTER else LINES


def _layout_canvas(resolved: ResolvedTemplate, settings: ReadSettings, tokenizer: TextTokenizer,
                   qids: Sequence[str]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    info = tokenizer.info
    scaffold = () if info.scaffold_in_prompt else tuple(info.scaffold_ids)
    content = (*scaffold, *resolved.ids, info.turn_close_id)
    width = canvas_width(len(content), step=settings.canvas_step, cap=settings.canvas_length)
    if width is None:
        names = ", ".join(repr(q) for q in qids)
        raise CanvasOverflow(
            f"the answer template of question(s) {names} needs {len(content)} canvas positions, "
            f"more than the canvas length {settings.canvas_length}; set canvas_length to the "
            f"server's (larger) canvas, or read fewer questions per canvas")
    template = content + (info.pad_id,) * (width - len(content))
    return template, tuple(len(scaffold) + p for p in resolved.positions)


def _logprob_ids(resolved: ResolvedTemplate, settings: ReadSettings,
                 qids: Sequence[str]) -> tuple[int, ...]:
    ids = tuple(sorted({i for label_ids in resolved.label_ids for i in label_ids}))
    if len(ids) > settings.max_logprob_ids:
        names = ", ".join(repr(q) for q in qids)
        raise CanvasOverflow(
            f"question(s) {names} need {len(ids)} logprob ids, more than max_logprob_ids "
            f"{settings.max_logprob_ids}; raise max_logprob_ids only if the server allows it "
            f"(vLLM's limit is 128), or give the question fewer options")
    return ids


def resolve_unit(decision: Decision, question_indices: Sequence[int], settings: ReadSettings,
                 tokenizer: TextTokenizer, *, index: int = 0) -> ReadUnit:
    """Build one read unit (prompt, canvas template, slots) for the given questions.

    Canvas ids are ``q0, q1, ...`` in the order of ``question_indices``.

    Raises:
        TemplateError: a label is not one token, labels land on different slots, the
            template is too wide or needs too many logprob ids (``CanvasOverflow``).
    """
    questions = [decision.questions[i] for i in question_indices]
    qids = [q.id for q in questions]
    canvas_ids = tuple(f"q{k}" for k in range(len(questions)))
    fmt = _unit_fmt(len(questions))
    resolved = resolve_slots(tokenizer, [q.labels for q in questions], canvas_ids, fmt,
                             question_ids=qids)
    template, positions = _layout_canvas(resolved, settings, tokenizer, qids)
    logprob_ids = _logprob_ids(resolved, settings, qids)
    messages = build_messages(decision, question_indices, canvas_ids, settings.layout)
    prompt_ids = (tuple(tokenizer.chat_prompt_ids(messages))
                  if settings.endpoint == Endpoint.COMPLETIONS else None)
    slots = tuple(SlotSpec(question_index=qi, canvas_id=cid, position=pos, label_ids=ids)
                  for qi, cid, pos, ids in zip(question_indices, canvas_ids, positions,
                                               resolved.label_ids, strict=True))
    return ReadUnit(index=index, question_indices=tuple(question_indices), messages=messages,
                    template_ids=template, width=len(template), slots=slots,
                    logprob_ids=logprob_ids, prompt_ids=prompt_ids)


def _fit_joint(decision: Decision, group: list[int], settings: ReadSettings,
               tokenizer: TextTokenizer, index: int) -> Iterator[ReadUnit]:
    try:
        yield resolve_unit(decision, group, settings, tokenizer, index=index)
    except CanvasOverflow:
        if len(group) == 1:
            raise
        half = len(group) // 2
        left = list(_fit_joint(decision, group[:half], settings, tokenizer, index))
        yield from left
        yield from _fit_joint(decision, group[half:], settings, tokenizer, index + len(left))


def _groups(indices: list[int], settings: ReadSettings) -> list[list[int]]:
    if settings.read_mode == ReadMode.ISOLATED:
        return [[i] for i in indices]
    size = max(1, settings.joint_max_questions)
    return [indices[k:k + size] for k in range(0, len(indices), size)]


def plan_decision(decision: Decision, settings: ReadSettings,
                  tokenizer: TextTokenizer) -> DecisionPlan:
    """Split a decision into read units and trivial (one-label) questions.

    Isolated mode: one unit per question (canvas id ``q0``). Joint mode: units of up to
    ``joint_max_questions`` questions, halved further while a canvas overflows.

    Raises:
        TemplateError: a question cannot be read (the decision is rejected).
    """
    trivial = tuple(i for i, q in enumerate(decision.questions) if len(q.labels) == 1)
    readable = [i for i, q in enumerate(decision.questions) if len(q.labels) > 1]
    units: list[ReadUnit] = []
    for group in _groups(readable, settings):
        units.extend(_fit_joint(decision, group, settings, tokenizer, len(units)))
    return DecisionPlan(decision=decision, units=tuple(units), trivial=trivial)
