"""Jev's ``/v1/systemone`` in dreads' terms, both ways. Pure: no I/O.

    SystemOneIn --to_decision--> Decision (engine)      Answer --jev_answer--> Jev answer

Images: vLLM's ``images`` (URLs or data URLs) and Jev's ``assets`` (``asset_urls``: each asset's
bytes as a data URL) become the decision's images, in that order; the model reads them before
the text, as vLLM's reader puts them. A Jev placeholder inside a string reads as ``[image N]``
(N counts the decision's images from 1); a state that is only a placeholder is the null state.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping
from typing import Any

from app.api.schemas import AssetIn, BoxIn, QuestionIn, SystemOneIn
from app.engine import (
    Answer,
    Decision,
    DrawRecord,
    Question,
    either,
    kind_named,
    kind_names,
    kind_of,
    parse_decision,
)
from app.errors import InputError

__all__ = [
    "ALIASES",
    "MAX_QUESTIONS",
    "Unaskable",
    "answers_of",
    "asset_urls",
    "diagnostics",
    "input_tokens",
    "jev_answer",
    "question_spec",
    "to_decision",
]

#: Model names Jev clients send that mean "the served model".
ALIASES = ("jev-latest", "jev-preview")
MAX_QUESTIONS = 256  #: per request: more is a run (POST /v1/runs)
#: The media types of Jev's asset formats (the bytes are checked for what they are).
_FORMATS = {"png": "image/png", "jpg": "image/jpeg", "jpeg": "image/jpeg"}
_UNKNOWN_TYPE = "application/octet-stream"


class Unaskable(InputError):
    """The request is well formed, but this question cannot be asked (400, plain text)."""


def question_spec(name: str, question: QuestionIn) -> dict[str, Any]:
    """The dreads question spec of a Jev question, or ``Unaskable``."""
    if isinstance(question, BoxIn):
        raise Unaskable(f"Question {name!r} is a box question: boxes need an image and a vision "
                        f"model, and this server reads text. Ask {either(kind_names())}.")
    kind = kind_named(question.type)
    refusal = kind.jev_refusal(name, question)
    if refusal is not None:
        raise Unaskable(refusal)
    return kind.jev_spec(question)


def asset_urls(assets: Mapping[str, AssetIn], parts: Mapping[str, tuple[str | None, bytes]]
               ) -> dict[str, str]:
    """Each Jev asset's image as a data URL, by placeholder: its ``data_base64``, or the bytes
    of the multipart part it names (``parts``: name -> (content type, bytes)).

    Raises:
        Unaskable: an asset with neither, or naming a part the request does not carry.
    """
    urls: dict[str, str] = {}
    for name, asset in assets.items():
        if asset.part is not None:
            if asset.part not in parts:
                raise Unaskable(f"asset {name!r} names part {asset.part!r}, which the request "
                                f"does not carry (parts: {sorted(parts) or 'none'})")
            content_type, data = parts[asset.part]
            media_type = content_type if content_type and content_type.startswith(
                "image/") else _UNKNOWN_TYPE
            urls[name] = f"data:{media_type};base64,{base64.b64encode(data).decode('ascii')}"
        elif asset.data_base64 is not None:
            media_type = _FORMATS.get(asset.format or "", _UNKNOWN_TYPE)
            urls[name] = f"data:{media_type};base64,{asset.data_base64}"
        else:
            raise Unaskable(f"asset {name!r} has no image: give data_base64 (with format) or, "
                            "in a multipart request, the part that holds it")
    return urls


def _refuse_unread(body: SystemOneIn) -> None:
    """What the request sends that this server cannot read: a clear 400, never dropped."""
    media = [name for name in ("audio", "videos") if getattr(body, name)]
    if media:
        names = ", ".join("audio" if m == "audio" else "video" for m in media)
        raise Unaskable(f"this model does not take {names} inputs: it reads images only "
                        "(send them in 'images')")
    if body.instructions:
        raise Unaskable("top-level 'instructions' are not read by this server; put them in "
                        "the state or in each question's instructions")
    kwargs = dict(body.chat_template_kwargs or {})
    if kwargs.pop("enable_thinking", False) or kwargs:
        raise Unaskable("chat_template_kwargs: only enable_thinking: false is taken (a read "
                        "is the reply's first token, with thinking off)")


def _placed(value: Any, numbers: Mapping[str, int]) -> Any:
    """``value`` with each placeholder in its strings written as ``[image N]``."""
    if isinstance(value, str):
        for name, number in numbers.items():
            value = value.replace(name, f"[image {number}]")
        return value
    if isinstance(value, list):
        return [_placed(v, numbers) for v in value]
    if isinstance(value, dict):
        return {k: _placed(v, numbers) for k, v in value.items()}
    return value


def _images(body: SystemOneIn, assets: Mapping[str, str]
            ) -> tuple[list[str], Any, dict[str, Any]]:
    """The decision's images, its state and its question specs, placeholders resolved."""
    images = [*(body.images or ()), *assets.values()]
    specs = {name: question_spec(name, q) for name, q in body.questions.items()}
    if not assets:
        return images, body.state, specs
    first = len(body.images or ())
    numbers = {name: first + k + 1 for k, name in enumerate(assets)}
    state = None if isinstance(body.state, str) and body.state.strip() in numbers else (
        _placed(body.state, numbers))
    return images, state, _placed(specs, numbers)


def to_decision(request_id: str, body: SystemOneIn, *,
                parts: Mapping[str, tuple[str | None, bytes]] | None = None) -> Decision:
    """The decision a request asks, with its images (``body.images``, then each Jev asset's,
    its bytes inline or in the multipart ``parts``) and the record extension's id, cell and
    expected answers.

    Raises:
        Unaskable: a question dreads cannot ask, or a field it cannot read (audio, video,
            top-level instructions); the message names it and says why.
    """
    if len(body.questions) > MAX_QUESTIONS:
        raise Unaskable(f"Too many questions. Must have at most {MAX_QUESTIONS} questions per "
                        "request; split them, or submit them as a run (POST /v1/runs).")
    _refuse_unread(body)
    assets = asset_urls(body.assets, parts or {}) if body.assets else {}
    images, state, specs = _images(body, assets)
    record = body.dreads
    key = record.id if record and record.id else body.request_id or request_id
    line = {"id": key, "state": state, "questions": specs,
            "cell": record.cell if record else None,
            "expected": record.expected if record else None}
    if images:
        line["images"] = images
    try:
        return parse_decision(line)
    except InputError as exc:  # the request is one decision: its id would only be noise
        raise Unaskable(exc.message.removeprefix(f"decision {key!r}: ")) from exc


def jev_answer(question: Question, answer: Answer) -> dict[str, Any]:
    """Jev's answer shape, as the question's kind writes it (noul P(yes); choice by option
    name; score 0-indexed)."""
    probs = [answer.probs[label] for label in question.labels]
    return kind_of(question).jev_answer(question, probs, answer.confidence)


def diagnostics(answer: Answer) -> dict[str, Any]:
    """dreads' diagnostics of one answer, beside Jev's answer."""
    return {"label": answer.label, "option": answer.option, "probs": dict(answer.probs),
            "top_prob": answer.top_prob, "stderr": answer.stderr,
            "agreement": answer.agreement, "draws": answer.draws,
            "stop_reason": str(answer.stop_reason), "label_mass": answer.label_mass,
            "min_label_mass": answer.min_label_mass,
            "argmax_is_label": answer.argmax_is_label, "entropy": answer.entropy}


def input_tokens(draws: Iterable[DrawRecord]) -> int:
    """Prompt tokens of each canvas's first draw, summed (later draws re-read a cached
    prompt): the input the model read."""
    first: dict[int, int] = {}
    for draw in draws:
        if draw.draw == 0 and draw.prompt_tokens is not None:
            first[draw.unit] = draw.prompt_tokens
    return sum(first.values())


def answers_of(decision: Decision, answers: Iterable[Answer]) -> dict[str, dict[str, Any]]:
    """Jev answers keyed by question name, in the request's order."""
    by_id: Mapping[str, Answer] = {a.question_id: a for a in answers}
    return {q.id: jev_answer(q, by_id[q.id]) for q in decision.questions}
