"""A decision endpoint's answers in dreads' terms: one draw per question. Pure: no I/O.

A decision endpoint (vLLM's ``/v1/systemone`` or ``/v1/decisions``, a hosted service of either
shape, another ``dreads serve``) answers a whole decision in one request. Each answered
question becomes an ``Answer`` (stop reason ``endpoint``, one draw) and one ``DrawRecord``;
a question the endpoint declined becomes a ``Refusal``. Diagnostics the endpoint does not
return (label mass, the argmax, the raw logprobs, the noise seed) are None, never zero.

The shapes are read in ``app.engine.systemone`` (Jev's) and ``app.engine.openai.client``
(OpenAI's); this module holds what they share.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from app.engine.aggregate import aggregate
from app.engine.fold import entropy
from app.engine.types import Answer, DrawRecord, Question, Refusal, SlotRead, StopReason
from app.errors import MalformedResponse

__all__ = ["EndpointAnswers", "one_draw", "refusal_of", "usage_of"]


@dataclass(frozen=True)
class EndpointAnswers:
    """What one endpoint response says about a decision."""

    answers: tuple[Answer, ...]  #: answered questions, in decision order
    draws: tuple[DrawRecord, ...]  #: one per answered question
    refusals: tuple[Refusal, ...] = ()  #: questions the endpoint declined
    usage: Mapping[str, Any] | None = None  #: the endpoint's usage object, as it came


def _normalised(question: Question, probs: Sequence[float]) -> tuple[float, ...]:
    if len(probs) != len(question.labels):
        raise MalformedResponse(f"question {question.id!r}: {len(probs)} probabilities for "
                                f"{len(question.labels)} options")
    if any(not math.isfinite(p) or p < 0.0 for p in probs):
        raise MalformedResponse(f"question {question.id!r}: a probability is negative or not "
                                f"a number: {list(probs)}")
    total = math.fsum(probs)
    if total <= 0.0:
        raise MalformedResponse(f"question {question.id!r}: the probabilities sum to 0")
    return tuple(p / total for p in probs)


def one_draw(question: Question, index: int, probs: Sequence[float], *,
             label_mass: float | None = None, argmax_is_label: bool | None = None,
             confidence: float | None = None,
             latency_ms: float = 0.0) -> tuple[Answer, DrawRecord]:
    """The answer and the draw of one question an endpoint answered with ``probs`` (label
    order; normalised here). Diagnostics it did not give stay None.

    Raises:
        MalformedResponse: probabilities of the wrong count, negative, or summing to 0.
    """
    ps = _normalised(question, probs)
    read = SlotRead(question_index=index, draw=0, probs=ps, label_logprobs=None,
                    label_mass=label_mass, entropy=entropy(ps), argmax_id=None,
                    argmax_is_label=argmax_is_label)
    answer = replace(aggregate(question, [read], StopReason.ENDPOINT),
                     endpoint_confidence=confidence)
    draw = DrawRecord(unit=index, draw=0, seed=None, read=read, latency_ms=latency_ms,
                      prompt_tokens=None, cached_tokens=None)
    return answer, draw


def refusal_of(question: Question, raw: Any) -> Refusal | None:
    """A refusal when the endpoint's answer declines the question: ``{"type": "refusal",
    "refusal": reason}`` or any answer carrying a non-empty ``refusal`` text (OpenAI's
    convention)."""
    if not isinstance(raw, Mapping):
        return None
    reason = raw.get("refusal")
    if raw.get("type") == "refusal" or (isinstance(reason, str) and reason):
        text = reason if isinstance(reason, str) and reason else "refused (no reason given)"
        return Refusal(question_id=question.id, reason=text)
    return None


def usage_of(body: Mapping[str, Any]) -> Mapping[str, Any] | None:
    usage = body.get("usage")
    return dict(usage) if isinstance(usage, Mapping) else None


def optional_number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def optional_flag(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None
