"""Draws -> ``Answer`` (protocol.md section 6).

mean probability per label; answer = argmax of the mean (first label on a tie);
stderr (n > 1) = sqrt(sum_k (p_k[top] - mean[top])^2 / (n - 1) / n);
agreement (n > 1) = share of draws whose own argmax is the answer;
confidence = 1 - H(mean) / ln K (1.0 when K == 1); p_yes for noul;
expected_level = sum(i * p_i) (0-indexed) and legend {"0": level0, ...} for score: the
question's kind gives these extras (``QuestionKind.extras``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from app.engine.fold import entropy
from app.engine.kinds import kind_of
from app.engine.types import Answer, Question, SlotRead, StopReason

__all__ = ["aggregate", "trivial_answer"]


def _argmax(values: Sequence[float]) -> int:
    return max(range(len(values)), key=lambda i: (values[i], -i))


def _mean_probs(reads: Sequence[SlotRead], k: int) -> list[float]:
    n = len(reads)
    return [math.fsum(r.probs[i] for r in reads) / n for i in range(k)]


def _stderr(reads: Sequence[SlotRead], top: int, mean_top: float) -> float | None:
    n = len(reads)
    if n < 2:
        return None
    ss = math.fsum((r.probs[top] - mean_top) ** 2 for r in reads)
    return math.sqrt(ss / (n - 1) / n)


def _confidence(h: float, k: int) -> float:
    return 1.0 if k <= 1 else max(0.0, 1.0 - h / math.log(k))


def aggregate(question: Question, reads: Sequence[SlotRead], stop: StopReason) -> Answer:
    """The answer of one question from its draws.

    Raises:
        ValueError: ``reads`` is empty (a question with no draw has no answer).
    """
    if not reads:
        raise ValueError(f"question {question.id!r} has no draws to aggregate")
    k, n = len(question.labels), len(reads)
    mean = _mean_probs(reads, k)
    top = _argmax(mean)
    h = entropy(mean)
    extras = kind_of(question).extras(question, mean)
    masses = [r.label_mass for r in reads if r.label_mass is not None]
    known = len(masses) == n  # a source that does not report it: unavailable, not zero
    return Answer(
        question_id=question.id, question_type=question.type, label=question.labels[top],
        option=question.options[top], probs=dict(zip(question.labels, mean, strict=True)),
        p_yes=extras.p_yes, expected_level=extras.expected_level, legend=extras.legend,
        confidence=_confidence(h, k), top_prob=mean[top],
        stderr=_stderr(reads, top, mean[top]),
        agreement=(sum(_argmax(r.probs) == top for r in reads) / n) if n > 1 else None,
        draws=n, stop_reason=stop, label_mass=math.fsum(masses) / n if known else None,
        min_label_mass=min(masses) if known else None,
        argmax_is_label=_all_known(r.argmax_is_label for r in reads), entropy=h,
    )


def _all_known(flags: Iterable[bool | None]) -> bool | None:
    """True when every flag is, None when any is unknown."""
    values = list(flags)
    return None if any(v is None for v in values) else all(values)


def trivial_answer(question: Question) -> Answer:
    """The answer of a one-option/one-level question: probability 1, no read."""
    extras = kind_of(question).extras(question, [1.0])
    return Answer(
        question_id=question.id, question_type=question.type, label=question.labels[0],
        option=question.options[0], probs={question.labels[0]: 1.0}, p_yes=None,
        expected_level=extras.expected_level, legend=extras.legend, confidence=1.0, top_prob=1.0,
        stderr=None,
        agreement=None, draws=0, stop_reason=StopReason.TRIVIAL, label_mass=1.0,
        min_label_mass=1.0, argmax_is_label=True, entropy=0.0,
    )
