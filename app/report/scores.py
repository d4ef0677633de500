"""Evaluation metrics over plain arrays: pure numpy / scikit-learn / scipy, no I/O.

Conventions: ``y`` is a 0/1 array (1 = expected yes), ``s`` the score P(yes) in [0, 1].
A rank is 1 for the highest score; ties share their average rank. A figure that cannot be
computed (no positives, no negatives, nothing answered) is ``None``, never NaN.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.stats import binomtest, rankdata
from sklearn.metrics import brier_score_loss, confusion_matrix, roc_auc_score

from app.report.intervals import holm

__all__ = [
    "Ranking",
    "ReliabilityBin",
    "accuracy",
    "auc",
    "brier",
    "confusion",
    "ece",
    "false_positives",
    "flag_outlier_rates",
    "holm_reject",
    "log_loss_true",
    "mae",
    "positive_rank_percentiles",
    "rank_summary",
    "ranking",
    "recall_at",
    "referral_band",
    "reliability_bins",
    "top_share",
    "top_share_cap",
]

FloatArray = NDArray[np.float64]


def _arrays(y: ArrayLike, s: ArrayLike) -> tuple[NDArray[np.int64], FloatArray]:
    ya = np.asarray(y, dtype=np.int64)
    sa = np.asarray(s, dtype=np.float64)
    if ya.shape != sa.shape:
        raise ValueError(f"labels and scores differ in shape: {ya.shape} vs {sa.shape}")
    return ya, sa


def _both_classes(y: NDArray[np.int64]) -> bool:
    return bool(y.size) and 0 < int(y.sum()) < y.size


def auc(y: ArrayLike, s: ArrayLike) -> float | None:
    """Area under the ROC curve of ``s`` for ``y``; None without both classes."""
    ya, sa = _arrays(y, s)
    return float(roc_auc_score(ya, sa)) if _both_classes(ya) else None


def recall_at(y: ArrayLike, s: ArrayLike, threshold: float) -> tuple[int, float | None]:
    """Positives scored strictly above ``threshold``: (count, share of positives)."""
    ya, sa = _arrays(y, s)
    n_pos = int(ya.sum())
    hits = int(np.sum((sa > threshold) & (ya == 1)))
    return hits, (hits / n_pos if n_pos else None)


def positive_rank_percentiles(y: ArrayLike, s: ArrayLike) -> FloatArray:
    """Rank of each positive among all scores (1 = top), as a percentage of ``n``."""
    ya, sa = _arrays(y, s)
    if not sa.size:
        return np.empty(0)
    ranks = rankdata(-sa, method="average")
    return np.asarray(ranks[ya == 1] / sa.size * 100.0, dtype=np.float64)


def rank_summary(y: ArrayLike, s: ArrayLike) -> tuple[float | None, float | None]:
    """(median, worst) rank percentile of the positives."""
    pct = positive_rank_percentiles(y, s)
    if not pct.size:
        return None, None
    return float(np.median(pct)), float(pct.max())


def top_share(y: ArrayLike, s: ArrayLike, share: float) -> tuple[int, float | None]:
    """Positives ranked within the top ``share`` of all scores: (count, share of positives)."""
    ya, sa = _arrays(y, s)
    n_pos = int(ya.sum())
    if not n_pos:
        return 0, None
    ranks = rankdata(-sa, method="average")
    hits = int(np.sum(ranks[ya == 1] <= share * sa.size))
    return hits, hits / n_pos


def top_share_cap(n: int, positives: int, share: float) -> int:
    """The most positives the top ``share`` of ``n`` scores can hold (``top_share``'s best)."""
    return min(positives, int(np.floor(share * n + 1e-9)))


@dataclass(frozen=True)
class Ranking:
    """The ranking figures of one set of answers from one ranking (``ranking``)."""

    auc: float | None
    top_hits: int
    top_share: float | None
    rank_median: float | None
    rank_worst: float | None
    positive_ranks: FloatArray  #: ``positive_rank_percentiles``


def ranking(y: ArrayLike, s: ArrayLike, share: float) -> Ranking:
    """``auc``, ``top_share``, ``rank_summary`` and ``positive_rank_percentiles`` from one
    sort of the scores (the same values; the AUC by the rank-sum formula)."""
    ya, sa = _arrays(y, s)
    n, pos = sa.size, ya == 1
    m = int(pos.sum())
    if not n:
        return Ranking(None, 0, None, None, None, np.empty(0))
    ranks = rankdata(-sa, method="average")  # 1 = the highest score
    pct = np.asarray(ranks[pos] / n * 100.0, dtype=np.float64)
    auc_value = None
    if 0 < m < n:
        ascending = (n + 1.0) - ranks[pos]
        auc_value = float((ascending.sum() - m * (m + 1) / 2.0) / (m * (n - m)))
    hits = int(np.sum(ranks[pos] <= share * n))
    return Ranking(auc_value, hits, hits / m if m else None,
                   float(np.median(pct)) if m else None, float(pct.max()) if m else None, pct)


def false_positives(
    y: ArrayLike, s: ArrayLike, threshold: float, n_states: int
) -> tuple[int, float | None, float | None]:
    """Negatives scored above ``threshold``: (count, per 1,000 negatives, per 100 states)."""
    ya, sa = _arrays(y, s)
    n_neg = int(np.sum(ya == 0))
    count = int(np.sum((sa > threshold) & (ya == 0)))
    per_1000 = count / n_neg * 1000.0 if n_neg else None
    per_100_states = count / n_states * 100.0 if n_states else None
    return count, per_1000, per_100_states


def referral_band(s: ArrayLike, low: float, high: float) -> int:
    """Scores in the referral band ``low <= s <= high``."""
    sa = np.asarray(s, dtype=np.float64)
    return int(np.sum((sa >= low) & (sa <= high)))


def accuracy(truth: Sequence[str], predicted: Sequence[str]) -> float | None:
    """Share of exact matches."""
    if not len(truth):
        return None
    return float(np.mean(np.asarray(truth, dtype=object) == np.asarray(predicted, dtype=object)))


def log_loss_true(p_true: ArrayLike, eps: float = 1e-15) -> float | None:
    """Mean negative log of the probability given to the true label (clipped at ``eps``).

    Equal to ``sklearn.metrics.log_loss`` when every row has the same label set, and defined
    for questions with different numbers of options, which scikit-learn is not.
    """
    pa = np.asarray(p_true, dtype=np.float64)
    if not pa.size:
        return None
    return float(-np.mean(np.log(np.clip(pa, eps, 1.0))))


def confusion(
    truth: Sequence[str], predicted: Sequence[str], labels: Sequence[str]
) -> list[list[int]]:
    """Confusion table, rows = expected, columns = answered, in ``labels`` order."""
    if not len(truth):
        return [[0] * len(labels) for _ in labels]
    matrix = confusion_matrix(list(truth), list(predicted), labels=list(labels))
    return [[int(v) for v in row] for row in matrix]


def mae(truth: ArrayLike, predicted: ArrayLike) -> float | None:
    """Mean absolute error."""
    ta = np.asarray(truth, dtype=np.float64)
    if not ta.size:
        return None
    return float(np.mean(np.abs(ta - np.asarray(predicted, dtype=np.float64))))


def brier(y: ArrayLike, s: ArrayLike) -> float | None:
    """Brier score (mean squared error of the probability)."""
    ya, sa = _arrays(y, s)
    if not ya.size:
        return None
    return float(brier_score_loss(ya, sa, pos_label=1)) if _both_classes(ya) else float(
        np.mean((sa - ya) ** 2)
    )


@dataclass(frozen=True)
class ReliabilityBin:
    """One bin of a reliability diagram: scores in [low, high)."""

    low: float
    high: float
    count: int
    mean_score: float | None
    observed: float | None  #: share of positives in the bin


def reliability_bins(y: ArrayLike, s: ArrayLike, n_bins: int = 10) -> list[ReliabilityBin]:
    """Equal-width bins over [0, 1]; the last bin includes 1.0."""
    ya, sa = _arrays(y, s)
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    index = np.clip(np.digitize(sa, edges[1:-1], right=False), 0, n_bins - 1)
    bins = []
    for b in range(n_bins):
        mask = index == b
        count = int(mask.sum())
        bins.append(ReliabilityBin(
            low=float(edges[b]), high=float(edges[b + 1]), count=count,
            mean_score=float(sa[mask].mean()) if count else None,
            observed=float(ya[mask].mean()) if count else None,
        ))
    return bins


def ece(y: ArrayLike, s: ArrayLike, n_bins: int = 10) -> float | None:
    """Expected calibration error: bin-weighted |mean score - observed rate|."""
    ya, _ = _arrays(y, s)
    if not ya.size:
        return None
    total = 0.0
    for b in reliability_bins(y, s, n_bins):
        if b.count and b.mean_score is not None and b.observed is not None:
            total += b.count * abs(b.mean_score - b.observed)
    return total / ya.size


def flag_outlier_rates(
    counts: Sequence[int], totals: Sequence[int], alpha: float = 0.01
) -> list[tuple[bool, float | None]]:
    """Flag groups whose rate stands far above the rate of all the other groups.

    Each group's count is tested against the pooled rate of the others (smoothed by half an
    event, so that "0 everywhere else" is a small rate, not an impossible one) with a one-sided
    exact binomial test; the p-values are Holm-corrected over the groups tested (the family-wise
    error stays under ``alpha`` however many cells a run has). Only excess is flagged: a cell
    with fewer failures than the rest is not a problem to look at. Returns (flagged, p-value)
    per group; nothing is flagged with a single group or no events at all.
    """
    total_k, total_n = int(sum(counts)), int(sum(totals))
    if len(counts) < 2 or total_k == 0:
        return [(False, None) for _ in counts]
    p_values: list[float | None] = []
    for k, n in zip(counts, totals, strict=True):
        if not n:
            p_values.append(None)
            continue
        others = (total_k - k + 0.5) / (total_n - n + 1)
        p_values.append(float(binomtest(int(k), int(n), min(others, 1.0),
                                        alternative="greater").pvalue))
    flagged = holm_reject([p for p in p_values if p is not None], alpha)
    hits = iter(flagged)
    return [(False, None) if p is None else (next(hits), p) for p in p_values]


def holm_reject(p_values: Sequence[float], alpha: float) -> list[bool]:
    """Holm's step-down procedure: which hypotheses to reject at family-wise level ``alpha``
    (those whose Holm-adjusted p-value, ``intervals.holm``, is at most ``alpha``)."""
    return [p is not None and p <= alpha for p in holm(p_values)]
