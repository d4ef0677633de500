"""The read as vLLM 0.33's own DiffusionGemma reader makes it (``Layout.VLLM``, the default).

vLLM 0.33 answers ``POST /v1/systemone`` and ``POST /v1/decisions`` itself, with one read per
question (or per joint canvas) and one draw (protocol.md section 10). Under this layout draw 0
of every read is that read, token for token: the same prompt ids, thought block, canvas, width,
``max_tokens``, logprob ids and noise. Later draws change only the slot noise.

Isolated read, one question::

    user turn: "{state}\\n\\nQuestion: {instructions}\\n{option lines}\\n{reply instruction}"
    prompt:    chat template (generation prompt on, thinking off) + the thought block
    canvas:    [noise, <turn|>, <pad> ...], 16 wide; the label is the reply's first token

Option lines: noul ``yes: {true}`` (just ``yes`` without a description), choice
``A: {name} - {description}`` (or ``A: {name}``), score ``0: {level}``. Labels: yes/no, A..Z,
and the digits 0..9 for score levels (0-indexed: a level's label is its index).

Joint read, the questions of a decision::

    user turn: "{state}\\n\\nQuestion 1: ...\\n{options}\\n{reply}\\n\\nQuestion 2: ...\\n\\n"
               'Reply with one line per question, in order, formatted as "number: answer".'
    canvas:    per question the ids of "{k}: " (the line before its label), a noise id and a
               newline; then <turn|>; then pads, always at least one row of them

Questions are split into the fewest even runs whose lines fit the served canvas with a pad row
to spare. At a joint slot a label counts by the better of its answer-line id (``▁yes``) and its
first-token id (``yes``). The noise of draw 0 comes from the prompt ids (``reader_noise``).

A decision with one readable question is read isolated even in joint mode, as vLLM does.

Images: the user turn is the image parts first, then the text (``user_content``), as vLLM's
reader puts them; the prompt ids hold each image as the server expands it (``<|image>``,
N x ``<|image|>``, ``<image|>``), before the thought block, and draw 0's noise is drawn from
those ids. A null state is the text ``null``, as vLLM's reader writes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from typing import Any

from app.engine.canvas import canvas_width
from app.engine.kinds import kind_of
from app.engine.noise import reader_noise
from app.engine.types import (
    Decision,
    ImageData,
    Message,
    Question,
    ReadMode,
    ReadSettings,
    ReadUnit,
    SlotSpec,
    TextTokenizer,
)
from app.engine.values import serialize_state
from app.errors import TemplateError

__all__ = [
    "JOINT_REPLY",
    "isolated_content",
    "joint_content",
    "joint_spans",
    "option_lines",
    "plan_reader_units",
    "reply_labels",
    "user_content",
]

JOINT_REPLY = 'Reply with one line per question, in order, formatted as "number: answer".'


class ReaderCanvasOverflow(TemplateError):
    """A joint question's answer line does not fit the served canvas even alone."""


def reply_labels(question: Question) -> tuple[str, ...]:
    """The labels the model answers with (the kind's: yes/no, A..Z, a score level's 0-based
    index).

    Raises:
        TemplateError: a question its kind cannot ask this way (a score of more than ten
            levels).
    """
    return kind_of(question).reply_labels(question)


def option_lines(question: Question) -> list[str]:
    """One line per option, as vLLM's question types write them."""
    kind = kind_of(question)
    return [kind.option_line(question, i, label)
            for i, label in enumerate(kind.reply_labels(question))]


def _body(question: Question) -> str:
    return "\n".join([*option_lines(question), kind_of(question).reply_line])


def isolated_content(state_text: str, question: Question) -> str:
    """The user turn of an isolated read."""
    body = _body(question)
    ask = f"Question: {question.instructions}\n{body}" if question.instructions else body
    return f"{state_text}\n\n{ask}"


def _joint_question(number: int, question: Question) -> str:
    head = f"Question {number}:"
    if question.instructions:
        head = f"{head} {question.instructions}"
    return f"{head}\n{_body(question)}"


def joint_content(state_text: str, questions: Sequence[Question], start: int) -> str:
    """The user turn of a joint read whose first question is number ``start``."""
    asks = "\n\n".join(_joint_question(k, q) for k, q in enumerate(questions, start))
    return f"{state_text}\n\n{asks}\n\n{JOINT_REPLY}"


def joint_spans(rows: Sequence[int], served: int) -> list[tuple[int, int]]:
    """The fewest even runs of questions whose answer lines (``rows`` ids each) and the turn
    close leave at least one pad row of the served canvas; one question a run when none do."""
    n = len(rows)
    for count in range(1, n):
        size, extra = divmod(n, count)
        bounds = [i * size + min(i, extra) for i in range(count + 1)]
        spans = list(pairwise(bounds))
        if all(1 + sum(rows[a:b]) < served for a, b in spans):
            return spans
    return [(i, i + 1) for i in range(n)]


# -- token ids ------------------------------------------------------------------------------

def _first_token_ids(tokenizer: TextTokenizer, question: Question) -> tuple[int, ...]:
    """Each label's id as the first token of the reply (right after the thought block)."""
    ids = []
    for label in reply_labels(question):
        encoded = tokenizer.encode(label)
        if len(encoded) != 1:
            raise TemplateError(
                f"label {label!r} of question {question.id!r} is {len(encoded)} tokens at the "
                "start of a reply; the vllm layout needs one token per label")
        ids.append(encoded[0])
    if len(set(ids)) != len(ids):
        raise TemplateError(f"two labels of question {question.id!r} are the same token")
    return tuple(ids)


def _answer_line(tokenizer: TextTokenizer, number: int,
                 question: Question) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The ids of ``"{number}: "`` before the label, and each label's id at the line's end."""
    labels = reply_labels(question)
    newline = tokenizer.encode("\n")
    prefix = tuple(tokenizer.encode(f"{number}: {labels[0]}")[:-1])
    slot_ids = []
    for label in labels:
        line = tokenizer.encode(f"{number}: {label}")
        twice = tokenizer.encode(f"{number}: {label}\n{number}: {label}")
        if len(newline) != 1 or tuple(line[:-1]) != prefix or twice != [*line, *newline, *line]:
            raise TemplateError(
                f"the joint answer line {number}: {label} of question {question.id!r} is not "
                "its prefix and one label token with this tokenizer; read it with --mode "
                "isolated")
        slot_ids.append(line[-1])
    if len(set(slot_ids)) != len(slot_ids):
        raise TemplateError(f"two labels of question {question.id!r} are the same token")
    return prefix, tuple(slot_ids)


# -- units ----------------------------------------------------------------------------------

def user_content(text: str, images: Sequence[ImageData]) -> str | list[dict[str, Any]]:
    """The user turn's content: the text alone, or the image parts (each image's data URL)
    followed by one text part."""
    if not images:
        return text
    parts: list[dict[str, Any]] = [{"type": "image_url", "image_url": {"url": image.url}}
                                   for image in images]
    parts.append({"type": "text", "text": text})
    return parts


def _prompt(tokenizer: TextTokenizer, text: str,
            images: Sequence[ImageData]) -> tuple[tuple[Message, ...], tuple[int, ...]]:
    messages: tuple[Message, ...] = ({"role": "user", "content": user_content(text, images)},)
    sizes = [(image.width, image.height) for image in images]
    return messages, tuple(tokenizer.chat_prompt_ids(messages, image_sizes=sizes))


def _pad(content: tuple[int, ...], width: int, pad_id: int) -> tuple[int, ...]:
    return content + (pad_id,) * (width - len(content))


def _isolated_unit(decision: Decision, qi: int, state: str, settings: ReadSettings,
                   tokenizer: TextTokenizer, index: int,
                   images: Sequence[ImageData]) -> ReadUnit:
    question = decision.questions[qi]
    messages, rendered = _prompt(tokenizer, isolated_content(state, question), images)
    ids = _first_token_ids(tokenizer, question)
    info = tokenizer.info
    content = (ids[0], info.turn_close_id)
    width = _width(len(content), settings, [question.id])
    slot = SlotSpec(question_index=qi, canvas_id="1", position=0, label_ids=ids)
    return ReadUnit(index=index, question_indices=(qi,), messages=messages,
                    template_ids=_pad(content, width, info.pad_id), width=width, slots=(slot,),
                    logprob_ids=ids, prompt_ids=rendered, max_tokens=len(content),
                    first_noise=reader_noise(rendered, 1, info.vocab_size))


def _joint_unit(decision: Decision, indices: Sequence[int], start: int, state: str,
                settings: ReadSettings, tokenizer: TextTokenizer, index: int,
                images: Sequence[ImageData]) -> ReadUnit:
    questions = [decision.questions[i] for i in indices]
    messages, rendered = _prompt(tokenizer, joint_content(state, questions, start), images)
    info = tokenizer.info
    newline = tuple(tokenizer.encode("\n"))
    canvas: list[int] = []
    slots = []
    for k, (qi, question) in enumerate(zip(indices, questions, strict=True), start):
        prefix, slot_ids = _answer_line(tokenizer, k, question)
        first = _first_token_ids(tokenizer, question)
        canvas.extend(prefix)
        also = tuple(() if f == s else (f,) for s, f in zip(slot_ids, first, strict=True))
        slots.append(SlotSpec(question_index=qi, canvas_id=str(k), position=len(canvas),
                              label_ids=slot_ids, also_ids=also if any(also) else ()))
        canvas.extend((slot_ids[0], *newline))
    content = (*canvas, info.turn_close_id)
    width = _width(len(content), settings, [q.id for q in questions])
    wanted = sorted({i for s in slots for i in (*s.label_ids, *(j for a in s.also_ids
                                                                 for j in a))})
    return ReadUnit(index=index, question_indices=tuple(indices), messages=messages,
                    template_ids=_pad(content, width, info.pad_id), width=width,
                    slots=tuple(slots), logprob_ids=tuple(wanted), prompt_ids=rendered,
                    max_tokens=slots[-1].position + 1,
                    first_noise=reader_noise(rendered, len(slots), info.vocab_size))


def _width(n_content: int, settings: ReadSettings, qids: Sequence[str]) -> int:
    """The smallest multiple of the canvas step holding the content and a pad row."""
    need = n_content + 1
    width = canvas_width(need, step=settings.canvas_step, cap=settings.canvas_length)
    if width is None:
        names = ", ".join(repr(q) for q in qids)
        raise ReaderCanvasOverflow(
            f"the answer lines of question(s) {names} need {need} canvas positions with the "
            f"turn close and a pad row, more than the served canvas {settings.canvas_length}; "
            "serve a larger canvas_length or read with --mode isolated")
    return width


def _joint_units(decision: Decision, readable: Sequence[int], state: str,
                 settings: ReadSettings, tokenizer: TextTokenizer,
                 images: Sequence[ImageData]) -> list[ReadUnit]:
    rows = [len(_answer_line(tokenizer, k, decision.questions[qi])[0]) + 2
            for k, qi in enumerate(readable, 1)]
    spans = joint_spans(rows, settings.canvas_length)
    return [_joint_unit(decision, readable[a:b], a + 1, state, settings, tokenizer, n, images)
            for n, (a, b) in enumerate(spans)]


def plan_reader_units(decision: Decision, readable: Sequence[int], settings: ReadSettings,
                      tokenizer: TextTokenizer,
                      images: Sequence[ImageData] = ()) -> list[ReadUnit]:
    """The read units of ``readable`` questions, their ``prompt_ids`` the chat template applied
    (before the thought block: ``plan_decision`` adds it, the chat prefill and the context
    check), every unit's user turn carrying ``images`` first.

    Raises:
        TemplateError: a label that is not one token, a score of more than ten levels, an
            answer line that does not fit the canvas.
    """
    state = serialize_state(decision.state)
    if settings.read_mode == ReadMode.JOINT and len(readable) > 1:
        return _joint_units(decision, readable, state, settings, tokenizer, images)
    return [_isolated_unit(decision, qi, state, settings, tokenizer, n, images)
            for n, qi in enumerate(readable)]
