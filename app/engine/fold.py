"""Fold one slot row into a ``SlotRead``.

- ``probs``: softmax over the labels' logprobs (label order); a label with other ids that count
  for it too (``also_ids``: a joint read of the vllm layout counts ``▁yes`` and ``yes``) reads
  by the best of them;
- ``label_mass``: sum of exp(logprob) over every label id, not renormalised: how much of the
  model's mass landed on legal labels at all;
- ``entropy``: natural-log entropy of ``probs``;
- ``argmax_is_label``: whether the row's emitted argmax is one of the labels.

A label id missing from the row is a ``MalformedResponse``, never a silent floor.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from app.engine.types import SlotRead, SlotRow
from app.errors import MalformedResponse

__all__ = ["entropy", "fold_row", "softmax"]


def softmax(logprobs: Sequence[float]) -> tuple[float, ...]:
    """Normalised probabilities of a list of logprobs (numerically stable)."""
    top = max(logprobs)
    weights = [math.exp(lp - top) for lp in logprobs]
    total = math.fsum(weights)
    return tuple(w / total for w in weights)


def entropy(probs: Sequence[float]) -> float:
    """Natural-log entropy; 0 * log 0 counts as 0."""
    return max(0.0, -math.fsum(p * math.log(p) for p in probs if p > 0.0))


def fold_row(row: SlotRow, label_ids: Sequence[int], *, question_index: int, draw: int,
             also_ids: Sequence[Sequence[int]] = ()) -> SlotRead:
    """Probabilities and diagnostics of one question in one draw.

    Raises:
        MalformedResponse: a label id is missing from the row.
    """
    groups = [(i, *(also_ids[k] if also_ids else ())) for k, i in enumerate(label_ids)]
    every = [i for group in groups for i in group]
    missing = [i for i in every if i not in row.logprobs]
    if missing:
        raise MalformedResponse(
            f"label token id(s) {missing} missing from the logprob row of question index "
            f"{question_index} (draw {draw}); the server must return every id in "
            f"logprob_token_ids")
    lps = tuple(max(float(row.logprobs[i]) for i in group) for group in groups)
    probs = softmax(lps)
    return SlotRead(
        question_index=question_index, draw=draw, probs=probs, label_logprobs=lps,
        label_mass=math.fsum(math.exp(float(row.logprobs[i])) for i in every),
        entropy=entropy(probs), argmax_id=row.argmax_id, argmax_is_label=row.argmax_id in every,
    )
