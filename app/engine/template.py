"""Answer template, slot resolution, canvas width, and the read plan of a decision.

``plan_decision`` plans every layout: the vllm layout (the default) through ``vllm_reader``,
dreads' own layouts (document first, reference) here. Then, for every layout, the thought
block goes into the prompt (never into a canvas: "far worse results otherwise", vLLM's reader
says), the chat prefill that carries it is set, and a prompt that with its canvas does not fit
the server's ``max_model_len`` is refused before any read.

Slot resolution of dreads' layouts follows protocol.md section 2: tokenize the whole answer
template with the first label of every question, re-tokenize with each other label swapped in;
the length must not change and exactly one position may differ, the same for all labels of a
question, and a question's label ids must be distinct. Anything else is a ``TemplateError``
naming the label and the question. Their canvas is ``answer ids + [turn close] + [pad ...]``
with at least one pad row.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

from app.engine.canvas import canvas_width
from app.engine.prompt import INDEXED_AFTER, build_messages
from app.engine.types import (
    Decision,
    DecisionPlan,
    Endpoint,
    ImageData,
    Layout,
    ReadMode,
    ReadSettings,
    ReadUnit,
    SlotSpec,
    TextTokenizer,
)
from app.engine.vllm_reader import plan_reader_units
from app.errors import ConfigError, TemplateError

__all__ = ["ResolvedTemplate", "answer_lines", "canvas_width", "plan_decision",
           "resolve_slots", "resolve_unit"]

LINES = "lines"
INDEXED = "indexed"
_HINT = "labels must be single tokens: use yes/no, A-Z or 1-9"


class CanvasOverflow(TemplateError):
    """The template is too wide for the canvas or needs too many logprob ids."""


class PromptTooLong(TemplateError):
    """The prompt and its canvas do not fit the server's ``max_model_len``."""


class ImagesNeedChat(ConfigError):
    """A decision with images on the completions endpoint, whose prompt is token ids only."""


class ImagesNeedVllmLayout(ConfigError):
    """A decision with images under one of dreads' own layouts, which read text only."""


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
                   qids: Sequence[str]) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    """The canvas template, its slot positions and ``max_tokens``. The canvas keeps at least
    one pad row after the turn close (or label mass is lost)."""
    info = tokenizer.info
    content = (*resolved.ids, info.turn_close_id)
    width = canvas_width(len(content) + 1, step=settings.canvas_step, cap=settings.canvas_length)
    if width is None:
        names = ", ".join(repr(q) for q in qids)
        raise CanvasOverflow(
            f"the answer template of question(s) {names} needs {len(content) + 1} canvas "
            f"positions with the turn close and a pad row, more than the canvas length "
            f"{settings.canvas_length}; set canvas_length to the server's (larger) canvas, or "
            "read fewer questions per canvas")
    template = content + (info.pad_id,) * (width - len(content))
    return template, resolved.positions, min(len(content) + 1, width)


def _logprob_ids(resolved: ResolvedTemplate, settings: ReadSettings,
                 qids: Sequence[str]) -> tuple[int, ...]:
    ids = tuple(sorted({i for label_ids in resolved.label_ids for i in label_ids}))
    _check_logprob_count(len(ids), settings, qids)
    return ids


def _check_logprob_count(n: int, settings: ReadSettings, qids: Sequence[str]) -> None:
    if n > settings.max_logprob_ids:
        names = ", ".join(repr(q) for q in qids)
        raise CanvasOverflow(
            f"question(s) {names} need {n} logprob ids, more than max_logprob_ids "
            f"{settings.max_logprob_ids}; raise max_logprob_ids only if the server allows it "
            f"(vLLM's limit is 128), or give the question fewer options")


def resolve_unit(decision: Decision, question_indices: Sequence[int], settings: ReadSettings,
                 tokenizer: TextTokenizer, *, index: int = 0) -> ReadUnit:
    """Build one read unit of dreads' own layouts (prompt, canvas template, slots) for the
    given questions, its ``prompt_ids`` the chat template applied (the thought block not yet
    added: ``plan_decision`` does that).

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
    template, positions, max_tokens = _layout_canvas(resolved, settings, tokenizer, qids)
    logprob_ids = _logprob_ids(resolved, settings, qids)
    messages = build_messages(decision, question_indices, canvas_ids, settings.layout)
    slots = tuple(SlotSpec(question_index=qi, canvas_id=cid, position=pos, label_ids=ids)
                  for qi, cid, pos, ids in zip(question_indices, canvas_ids, positions,
                                               resolved.label_ids, strict=True))
    return ReadUnit(index=index, question_indices=tuple(question_indices), messages=messages,
                    template_ids=template, width=len(template), slots=slots,
                    logprob_ids=logprob_ids,
                    prompt_ids=tuple(tokenizer.chat_prompt_ids(messages)),
                    max_tokens=max_tokens)


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


def _thought(unit: ReadUnit, settings: ReadSettings, tokenizer: TextTokenizer) -> ReadUnit:
    """The thought block at the end of the prompt (by ids; on chat, by an assistant prefill
    continued after the generation prompt). The vllm layout always appends it, as vLLM's
    reader does, even after a template that writes it already; the other layouts append it
    only when the template does not."""
    info = tokenizer.info
    always = settings.layout == Layout.VLLM
    if not info.scaffold_ids or (info.scaffold_in_prompt and not always):
        return unit
    prefill = ""
    if settings.endpoint == Endpoint.CHAT:
        if info.reply_prefix is None:
            raise ConfigError(
                f"the chat template of tokenizer {info.name!r} cannot continue an assistant "
                "message, so a chat read cannot put the thought block in the prompt; read "
                "with --endpoint completions (the prompt sent as token ids)")
        prefill = info.reply_prefix + info.scaffold_text
    return replace(unit, prompt_ids=unit.prompt_ids + info.scaffold_ids, prefill=prefill)


def _check_context(unit: ReadUnit, questions: Sequence[str], max_model_len: int | None,
                   n_images: int) -> None:
    need = len(unit.prompt_ids) + unit.width
    if max_model_len is not None and need > max_model_len:
        names = ", ".join(repr(q) for q in questions)
        with_images = f" and {n_images} image(s)" if n_images else ""
        raise PromptTooLong(
            f"the prompt of question(s) {names} is {len(unit.prompt_ids)} tokens (thought "
            f"block{with_images} included) and its canvas {unit.width}: {need} tokens, more "
            f"than the server's max_model_len {max_model_len}; shorten the state"
            f"{', send fewer images' if n_images else ''}, or serve the model with a larger "
            "--max-model-len")


def _check_images(decision: Decision, images: Sequence[ImageData],
                  settings: ReadSettings) -> None:
    """Images go with their decision's references, on chat, under the vllm layout."""
    refs = tuple(image.ref for image in images)
    if refs != decision.images:
        raise ValueError(
            f"decision {decision.id!r} has {len(decision.images)} image(s) and "
            f"{len(images)} were given (or in another order): fetch each of its images "
            "(app.images) and pass them as images=, or its reads would drop them")
    if not images:
        return
    if settings.endpoint == Endpoint.COMPLETIONS:
        raise ImagesNeedChat(
            f"decision {decision.id!r} has images, and --endpoint completions sends the prompt "
            "as token ids, which cannot carry images: use --endpoint chat")
    if settings.layout != Layout.VLLM:
        raise ImagesNeedVllmLayout(
            f"decision {decision.id!r} has images, and --layout {settings.layout} reads text "
            "only: use --layout vllm (the default)")


def _dreads_units(decision: Decision, readable: list[int], settings: ReadSettings,
                  tokenizer: TextTokenizer) -> list[ReadUnit]:
    units: list[ReadUnit] = []
    for group in _groups(readable, settings):
        units.extend(_fit_joint(decision, group, settings, tokenizer, len(units)))
    return units


def plan_decision(decision: Decision, settings: ReadSettings, tokenizer: TextTokenizer, *,
                  images: Sequence[ImageData] = (),
                  max_model_len: int | None = None) -> DecisionPlan:
    """Split a decision into read units and trivial (one-label) questions.

    The vllm layout plans as vLLM 0.33's reader does (``vllm_reader``). dreads' layouts:
    isolated mode, one unit per question (canvas id ``q0``); joint mode, units of up to
    ``joint_max_questions`` questions, halved further while a canvas overflows. With
    ``max_model_len`` (the server's), a unit whose prompt and canvas do not fit is refused.

    ``images`` are the decision's images, fetched and checked (one per ``decision.images``
    reference, in order): under the vllm layout every unit's user turn carries them first, and
    its prompt ids count their tokens (``TextTokenizer.image_ids``).

    Raises:
        TemplateError: a question cannot be read (the decision is rejected); ``PromptTooLong``
            when it does not fit ``max_model_len``.
        ConfigError: the settings cannot put the thought block in this tokenizer's prompt;
            ``ImagesNeedChat`` / ``ImagesNeedVllmLayout`` for images on the completions
            endpoint or under dreads' own layouts; a tokenizer without image tokens.
        ValueError: ``images`` are not the decision's (a caller that did not fetch them).
    """
    _check_images(decision, images, settings)
    trivial = tuple(i for i, q in enumerate(decision.questions) if len(q.labels) == 1)
    readable = [i for i, q in enumerate(decision.questions) if len(q.labels) > 1]
    if settings.layout == Layout.VLLM:
        planned = plan_reader_units(decision, readable, settings, tokenizer, images)
    else:
        planned = _dreads_units(decision, readable, settings, tokenizer)
    units = tuple(_thought(u, settings, tokenizer) for u in planned)
    for unit in units:
        qids = [decision.questions[i].id for i in unit.question_indices]
        if settings.layout == Layout.VLLM:
            _check_logprob_count(len(unit.logprob_ids), settings, qids)
        _check_context(unit, qids, max_model_len, len(images))
    return DecisionPlan(decision=decision, units=units, trivial=trivial)
