"""The stop rule: after each draw of a read unit, stop (and why) or draw again.

- ``agree`` (default): after draw 1 stop ``NEAR_CERTAIN`` when every question's entropy is at
  most the threshold; after n >= 2 draws stop ``AGREED`` when, for every question and label,
  max - min of the probability across the draws is at most the threshold; stop ``MAX_DRAWS``
  at ``max_draws``.
- ``entropy`` (the reference server's auto rule): after draw 1 stop ``LOW_ENTROPY`` when every
  entropy is at most the threshold; otherwise read up to ``max_draws`` in all (``MAX_DRAWS``).
- ``fixed``: stop ``FIXED`` after ``fixed_draws`` draws.
"""

from __future__ import annotations

from collections.abc import Sequence

from app.engine.types import PolicyName, ReadSettings, SlotRead, StopReason

__all__ = ["stop_reason"]

#: Float slack on threshold comparisons, so that 0.1 - 0.0 reads as "within 0.1".
_EPS = 1e-12


def _all_certain(reads: Sequence[SlotRead], threshold: float) -> bool:
    return all(r.entropy <= threshold + _EPS for r in reads)


def _agreed(draws: Sequence[Sequence[SlotRead]], threshold: float) -> bool:
    for q in range(len(draws[0])):
        for label_probs in zip(*(draw[q].probs for draw in draws), strict=True):
            if max(label_probs) - min(label_probs) > threshold + _EPS:
                return False
    return True


def _agree(settings: ReadSettings, draws: Sequence[Sequence[SlotRead]]) -> StopReason | None:
    n = len(draws)
    if n == 1 and _all_certain(draws[0], settings.threshold):
        return StopReason.NEAR_CERTAIN
    if n >= 2 and _agreed(draws, settings.threshold):
        return StopReason.AGREED
    return StopReason.MAX_DRAWS if n >= settings.max_draws else None


def _entropy(settings: ReadSettings, draws: Sequence[Sequence[SlotRead]]) -> StopReason | None:
    if len(draws) == 1 and _all_certain(draws[0], settings.threshold):
        return StopReason.LOW_ENTROPY
    return StopReason.MAX_DRAWS if len(draws) >= settings.max_draws else None


def stop_reason(settings: ReadSettings,
                draws: Sequence[Sequence[SlotRead]]) -> StopReason | None:
    """Why the draws of one unit stop, or None to draw again.

    Args:
        settings: policy, threshold, max_draws, fixed_draws.
        draws: ``draws[k]`` holds the SlotReads of every question of the unit in draw k.
    """
    if not draws:
        return None
    if settings.policy == PolicyName.FIXED:
        return StopReason.FIXED if len(draws) >= max(1, settings.fixed_draws) else None
    if settings.policy == PolicyName.ENTROPY:
        return _entropy(settings, draws)
    return _agree(settings, draws)
