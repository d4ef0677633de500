"""Intervals and paired tests for the report's figures: pure numpy / scipy, no I/O.

The only home of these methods. Conventions follow :mod:`app.report.scores`: ``y`` is a 0/1
array (1 = expected yes), ``s`` a score in [0, 1]; a figure that cannot be computed is
``None``, never NaN. Every interval is two-sided at ``level`` (95% unless asked).

- :func:`wilson`, :func:`exact_binomial`: a k/n figure (recall, in top share, unanswered).
- :func:`delong`, :func:`auc_interval`, :func:`delong_paired`: the AUC, its variance by DeLong's
  structural components in O(n log n), and the test of two correlated AUCs.
- :func:`mcnemar`, :func:`mcnemar_paired`: two k/n figures on the same items.
- :class:`ClusteredBootstrap`: every other figure, written as a function of column sums, with
  decisions (clusters) resampled with replacement; a fixed seed gives the same interval.
- :func:`holm`, :func:`benjamini_hochberg`: multiple-comparison corrections.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import expit, logit
from scipy.stats import binom, binomtest, false_discovery_control, norm, rankdata

__all__ = [
    "LEVEL",
    "ClusteredBootstrap",
    "Interval",
    "PairedTest",
    "Statistic",
    "auc_interval",
    "benjamini_hochberg",
    "bootstrap_reps",
    "delong",
    "delong_paired",
    "detectable_difference",
    "ece_columns",
    "ece_statistic",
    "exact_binomial",
    "holm",
    "mcnemar",
    "mcnemar_paired",
    "mean_columns",
    "median_interval",
    "ratio_columns",
    "ratio_statistic",
    "release_resamples",
    "wilson",
]

LEVEL = 0.95
FloatArray = NDArray[np.float64]
#: maps resampled column sums, shape (reps, k), to one value per resample, shape (reps,)
Statistic = Callable[[FloatArray], FloatArray]


@dataclass(frozen=True)
class Interval:
    """A two-sided interval at ``level``; ``low``/``high`` are None where it cannot be computed."""

    low: float | None
    high: float | None
    method: str  #: "DeLong" | "Wilson" | "exact binomial" | "bootstrap" | "order statistic" | ...
    level: float = LEVEL

    def as_dict(self) -> dict[str, Any]:
        return {"low": self.low, "high": self.high, "method": self.method, "level": self.level}


@dataclass(frozen=True)
class PairedTest:
    """A paired comparison of run A and run B on the same items."""

    diff: float | None  #: a - b
    interval: Interval  #: of the difference
    p_value: float | None
    method: str  #: "DeLong paired" | "McNemar mid-p" | "paired bootstrap"
    detectable: float | None  #: smallest |difference| found with 80% power at alpha .05, this size

    def as_dict(self) -> dict[str, Any]:
        return {"diff": self.diff, "interval": self.interval.as_dict(), "p_value": self.p_value,
                "method": self.method, "detectable": self.detectable}


def _check_level(level: float) -> None:
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be between 0 and 1 (exclusive), got {level}")


def _z(level: float) -> float:
    _check_level(level)
    return float(norm.ppf(0.5 + level / 2.0))


def _check_counts(k: int, n: int) -> None:
    if n < 0 or k < 0 or k > n:
        raise ValueError(f"a rate needs 0 <= k <= n, got k={k}, n={n}")


# --- k/n figures -------------------------------------------------------------------------


def wilson(k: int, n: int, level: float = LEVEL) -> Interval:
    """Wilson score interval of k/n (scipy); no bounds when n == 0."""
    _check_counts(k, n)
    _check_level(level)
    if n == 0:
        return Interval(None, None, "Wilson", level)
    return Interval(*_wilson_bounds(k, n, level), "Wilson", level)


def _wilson_bounds(k: int, n: int, level: float) -> tuple[float, float]:
    ci = binomtest(int(k), int(n)).proportion_ci(confidence_level=level, method="wilson")
    return float(ci.low), float(ci.high)


def exact_binomial(k: int, n: int, level: float = LEVEL) -> Interval:
    """Clopper-Pearson (exact binomial) interval of k/n (scipy); no bounds when n == 0."""
    _check_counts(k, n)
    _check_level(level)
    if n == 0:
        return Interval(None, None, "exact binomial", level)
    ci = binomtest(int(k), int(n)).proportion_ci(confidence_level=level, method="exact")
    return Interval(float(ci.low), float(ci.high), "exact binomial", level)


# --- AUC by DeLong -----------------------------------------------------------------------


def _labels_scores(y: ArrayLike, *scores: ArrayLike) -> tuple[NDArray[np.bool_], list[FloatArray]]:
    ya = np.asarray(y)
    if ya.ndim != 1:
        raise ValueError(f"labels must be one-dimensional, got shape {ya.shape}")
    if ya.size and not np.isin(ya, (0, 1)).all():
        raise ValueError("labels must be 0 or 1")
    out = []
    for s in scores:
        sa = np.asarray(s, dtype=np.float64)
        if sa.shape != ya.shape:
            raise ValueError(f"labels and scores differ in shape: {ya.shape} vs {sa.shape}")
        if not np.isfinite(sa).all():
            raise ValueError("scores must be finite numbers (drop unanswered rows first)")
        out.append(sa)
    return ya.astype(bool), out


def _components(pos: NDArray[np.bool_], s: FloatArray) -> tuple[float, FloatArray, FloatArray]:
    """AUC and DeLong's structural components V10 (per positive) and V01 (per negative).

    Midranks (Sun & Xu 2014): with T the midrank in all scores and T' the midrank within the
    own class, V10_i = (T_i - T'_i) / n and V01_j = 1 - (T_j - T'_j) / m; ties count one half.
    """
    m, n = int(pos.sum()), int((~pos).sum())
    ranks = rankdata(s)
    x, yneg = s[pos], s[~pos]
    rx, ry = ranks[pos], ranks[~pos]
    v10 = (rx - rankdata(x)) / n
    v01 = 1.0 - (ry - rankdata(yneg)) / m
    auc = float((rx.sum() - m * (m + 1) / 2.0) / (m * n))
    return auc, v10, v01


def delong(y: ArrayLike, s: ArrayLike) -> tuple[float | None, float | None]:
    """(AUC, variance of the AUC) by DeLong's method, O(n log n).

    AUC is None without both classes; the variance is None with fewer than two positives or
    two negatives (the components' sample variances need two of each).
    """
    pos, (sa,) = _labels_scores(y, s)
    m, n = int(pos.sum()), int(pos.size - pos.sum())
    if not m or not n:
        return None, None
    auc, v10, v01 = _components(pos, sa)
    if m < 2 or n < 2:
        return auc, None
    return auc, float(np.var(v10, ddof=1) / m + np.var(v01, ddof=1) / n)


def auc_interval(y: ArrayLike, s: ArrayLike, level: float = LEVEL) -> Interval:
    """Interval of the AUC from DeLong's variance, built on the logit scale.

    logit(AUC) +- z * se / (AUC (1 - AUC)) mapped back, so the interval stays inside [0, 1]
    and is asymmetric near the ends, where a symmetric one undercovers. Where DeLong's
    variance is zero or undefined (perfect or no separation, all scores tied, fewer than two
    items of a class), the interval is the exact binomial one of AUC * min(m, n) "wins" out
    of min(m, n): conservative, never a zero-width interval. No bounds without both classes.
    """
    _check_level(level)
    auc, var = delong(y, s)
    if auc is None:
        return Interval(None, None, "DeLong", level)
    if var is None or var <= 0.0 or not 0.0 < auc < 1.0:
        pos = np.asarray(y).astype(bool)
        size = int(min(pos.sum(), pos.size - pos.sum()))
        return exact_binomial(round(auc * size), size, level)
    half = _z(level) * np.sqrt(var) / (auc * (1.0 - auc))
    centre = float(logit(auc))
    return Interval(float(expit(centre - half)), float(expit(centre + half)), "DeLong", level)


def delong_paired(
    y: ArrayLike, s_a: ArrayLike, s_b: ArrayLike, level: float = LEVEL
) -> PairedTest:
    """DeLong's test of two correlated AUCs (two scores of the same items).

    The difference's variance uses the covariance of the two runs' structural components;
    the interval is Wald on the difference (clipped to [-1, 1]); the p-value two-sided normal.
    """
    _check_level(level)
    pos, (sa, sb) = _labels_scores(y, s_a, s_b)
    m, n = int(pos.sum()), int(pos.size - pos.sum())
    none = PairedTest(None, Interval(None, None, "DeLong", level), None, "DeLong paired", None)
    if not m or not n:
        return none
    auc_a, v10a, v01a = _components(pos, sa)
    auc_b, v10b, v01b = _components(pos, sb)
    diff = auc_a - auc_b
    if m < 2 or n < 2:
        return PairedTest(diff, none.interval, None, "DeLong paired", None)
    var = float(np.var(v10a - v10b, ddof=1) / m + np.var(v01a - v01b, ddof=1) / n)
    se = float(np.sqrt(max(var, 0.0)))
    p_value = _normal_p(diff, se)
    half = _z(level) * se
    interval = Interval(max(diff - half, -1.0), min(diff + half, 1.0), "DeLong", level)
    return PairedTest(diff, interval, p_value, "DeLong paired", detectable_difference(se))


def _normal_p(diff: float, se: float) -> float | None:
    """Two-sided normal p-value; with a zero standard error only "no difference" has one."""
    if se > 0.0:
        return float(2.0 * norm.sf(abs(diff) / se))
    return 1.0 if diff == 0.0 else None


# --- paired k/n figures: McNemar ---------------------------------------------------------


def mcnemar(b: int, c: int, *, mid_p: bool = True) -> float:
    """Two-sided McNemar p-value from the discordant counts b (A only) and c (B only).

    Exact: scipy's binomial test of b out of b + c at 1/2. Mid-p: the exact p-value less the
    probability of the observed table, 2 (P(X <= min) - P(X = min) / 2), capped at 1.
    Without discordant items the p-value is 1.
    """
    if b < 0 or c < 0:
        raise ValueError(f"discordant counts must be >= 0, got {b} and {c}")
    total = int(b) + int(c)
    if total == 0:
        return 1.0
    if not mid_p:
        return float(binomtest(int(b), total, 0.5).pvalue)
    low = min(int(b), int(c))
    p = 2.0 * (binom.cdf(low, total, 0.5) - 0.5 * binom.pmf(low, total, 0.5))
    return float(min(p, 1.0))


def _as_hits(hits: ArrayLike) -> NDArray[np.bool_]:
    arr = np.asarray(hits)
    if arr.ndim != 1:
        raise ValueError(f"hits must be one-dimensional, got shape {arr.shape}")
    if arr.size and not np.isin(arr, (0, 1)).all():
        raise ValueError("hits must be true/false (or 0/1)")
    return arr.astype(bool)


def mcnemar_paired(hits_a: ArrayLike, hits_b: ArrayLike, level: float = LEVEL) -> PairedTest:
    """Difference of two k/n figures on the same n items (recall, in top share): A - B.

    Interval: Newcombe's hybrid score interval for paired proportions (his method 10: the two
    Wilson intervals combined with the phi correlation of the pairs), which stays in [-1, 1]
    and keeps its coverage with few discordant pairs, where Wald does not. p-value: McNemar
    mid-p. Detectable difference: from the null standard error sqrt(b + c) / n, with at
    least one discordant pair assumed so that "no discordance yet" does not read as perfect
    resolution.
    """
    a, b_ = _as_hits(hits_a), _as_hits(hits_b)
    if a.shape != b_.shape:
        raise ValueError(f"the two runs' hits differ in shape: {a.shape} vs {b_.shape}")
    _check_level(level)
    n = int(a.size)
    method = "McNemar mid-p"
    if n == 0:
        return PairedTest(None, Interval(None, None, "Newcombe", level), None, method, None)
    both = int(np.sum(a & b_))
    only_a = int(np.sum(a & ~b_))
    only_b = int(np.sum(~a & b_))
    neither = n - both - only_a - only_b
    p1, p2 = (both + only_a) / n, (both + only_b) / n
    (l1, u1), (l2, u2) = _wilson_bounds(both + only_a, n, level), _wilson_bounds(
        both + only_b, n, level)
    denom = float((both + only_a) * (only_b + neither) * (both + only_b) * (only_a + neither))
    phi = (both * neither - only_a * only_b) / np.sqrt(denom) if denom > 0 else 0.0
    diff = p1 - p2
    d_low = np.sqrt(max((p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2, 0.0))
    d_high = np.sqrt(max((u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2, 0.0))
    interval = Interval(float(max(diff - d_low, -1.0)), float(min(diff + d_high, 1.0)),
                        "Newcombe", level)
    se0 = np.sqrt(max(only_a + only_b, 1)) / n
    return PairedTest(float(diff), interval, mcnemar(only_a, only_b), method,
                      detectable_difference(float(se0)))


# --- multiple comparisons, power ---------------------------------------------------------


def _present(p_values: Sequence[float | None]) -> tuple[list[int], FloatArray]:
    index = [i for i, p in enumerate(p_values) if p is not None]
    values = np.asarray([p_values[i] for i in index], dtype=np.float64)
    if values.size and (not np.isfinite(values).all() or values.min() < 0 or values.max() > 1):
        raise ValueError("p-values must lie in [0, 1]")
    return index, values


def holm(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjusted p-values (family-wise error); None passes through."""
    index, values = _present(p_values)
    out: list[float | None] = [None] * len(p_values)
    if not values.size:
        return out
    order = np.argsort(values, kind="stable")
    k = values.size
    adjusted = np.maximum.accumulate((k - np.arange(k)) * values[order])
    adjusted = np.minimum(adjusted, 1.0)
    for rank, pos in enumerate(order):
        out[index[pos]] = float(adjusted[rank])
    return out


def benjamini_hochberg(p_values: Sequence[float | None]) -> list[float | None]:
    """Benjamini-Hochberg adjusted p-values (false discovery rate, scipy); None passes through."""
    index, values = _present(p_values)
    out: list[float | None] = [None] * len(p_values)
    if not values.size:
        return out
    adjusted = false_discovery_control(values, method="bh")
    for i, p in zip(index, np.atleast_1d(adjusted), strict=True):
        out[i] = float(p)
    return out


def detectable_difference(
    se: float | None, alpha: float = 0.05, power: float = 0.8
) -> float | None:
    """Smallest |difference| a two-sided test at ``alpha`` finds with ``power``: (z + z_pow) se."""
    if se is None or not np.isfinite(se) or se < 0:
        return None
    return float((norm.ppf(1.0 - alpha / 2.0) + norm.ppf(power)) * se)


# --- median ------------------------------------------------------------------------------


def median_interval(values: ArrayLike, level: float = LEVEL) -> Interval:
    """Distribution-free interval of a median: order statistics x_(r) .. x_(n+1-r).

    r is the largest rank with P(Binomial(n, 1/2) <= r - 1) <= (1 - level) / 2, so the
    coverage is at least ``level``. No bounds when n is too small for that (n < 6 at 95%).
    """
    _check_level(level)
    arr = np.asarray(values, dtype=np.float64).ravel()
    if not np.isfinite(arr).all():
        raise ValueError("values must be finite numbers")
    n = arr.size
    tail = (1.0 - level) / 2.0
    if n == 0 or binom.cdf(0, n, 0.5) > tail:
        return Interval(None, None, "order statistic", level)
    k = int(binom.ppf(tail, n, 0.5))  # smallest k with cdf(k) >= tail
    if binom.cdf(k, n, 0.5) > tail:
        k -= 1
    r = k + 1  # 1-based rank of the lower bound
    lo_i, hi_i = r - 1, n - r
    part = np.partition(arr, (lo_i, hi_i))
    return Interval(float(part[lo_i]), float(part[hi_i]), "order statistic", level)


# --- clustered bootstrap -----------------------------------------------------------------

#: the most weight-matrix cells (reps x clusters) multiplied at once: 16M float64 = 128 MB
_CHUNK_CELLS = 16_000_000
#: multinomial draws are made this many cells at a time (int64: 32 MB)
_DRAW_CELLS = 4_000_000
#: resample counts are kept (one byte each) for reuse by later figures up to this many cells
_CACHE_CELLS = 128_000_000
#: above this many clusters, counts are Poisson(1) draws rather than multinomial ones
_POISSON_FROM = 20_000


def bootstrap_reps(n_clusters: int) -> int:
    """Resamples for a figure over ``n_clusters`` clusters: 1,000, fewer only when huge.

    1,000 up to 100,000 clusters; above, 1e8 / clusters (at least 400), so the resampling
    costs about the same at any size. At 250,000 clusters that is 400 reps, whose Monte
    Carlo error on a 95% percentile bound is a few percent of the interval's width.
    """
    if n_clusters <= 100_000:
        return 1000
    return max(400, int(1e8 // n_clusters))


@lru_cache(maxsize=1)
def _poisson_table() -> NDArray[np.uint8]:
    """Inverse CDF of Poisson(1) on a 65,536-step grid: uniform uint16 -> count."""
    from scipy.stats import poisson

    grid = (np.arange(65536) + 0.5) / 65536.0
    return np.searchsorted(poisson.cdf(np.arange(32), 1.0), grid).astype(np.uint8)


def _draw_counts(rng: np.random.Generator, c: int, reps: int) -> NDArray[np.uint8]:
    """(reps, c) resample counts of c clusters: Poisson(1) above ``_POISSON_FROM`` clusters,
    else multinomial (each resample draws c clusters with replacement)."""
    if c > _POISSON_FROM:
        table = _poisson_table()
        return table[rng.integers(0, 65536, size=(reps, c), dtype=np.uint16)]
    out = np.empty((reps, c), dtype=np.uint8)
    step = max(1, _DRAW_CELLS // c)
    for start in range(0, reps, step):
        block = min(step, reps - start)
        draws = rng.integers(0, c, size=(block, c)) + (np.arange(block) * c)[:, None]
        counts = np.bincount(draws.ravel(), minlength=block * c).reshape(block, c)
        out[start:start + block] = np.minimum(counts, 255)  # >255 of c >= 256: never
    return out


def release_resamples() -> None:
    """Let go of the memoized resample counts (up to 4 × 128 MB): a report calls it when it
    is done, so a long-lived process (``dreads serve``'s report pages) keeps none between
    reports."""
    _resample_counts.cache_clear()


@lru_cache(maxsize=4)
def _resample_counts(seed: int, c: int, reps: int, chunk: int) -> NDArray[np.uint8]:
    """The (reps, c) counts of a seed, drawn ``chunk`` resamples at a time (as a streamed
    bootstrap draws them: the same numbers). Memoized: every figure, question and cell with
    as many clusters shares one draw (the counts depend on nothing else), read-only."""
    rng = np.random.default_rng(seed)
    counts = np.concatenate([_draw_counts(rng, c, min(chunk, reps - start))
                             for start in range(0, reps, chunk)])
    counts.setflags(write=False)
    return counts


class ClusteredBootstrap:
    """Resamples clusters (decisions) with replacement; fixed seed -> same intervals every time.

    Rows of one cluster (the questions of one state, the replicate copies of one decision)
    move together. Figures are written as functions of column sums, so one resample is a
    weighted sum over per-cluster sums: cost O(reps x clusters x columns), not O(reps x rows).
    Up to 20,000 clusters each resample draws the clusters' counts from a multinomial (the
    classic bootstrap); above, each cluster's count is an independent Poisson(1) draw (the
    Poisson bootstrap: the same intervals at that size, a fraction of the cost). The counts
    are drawn once per object and reused by every figure, so paired figures and figures of
    one report share their resamples.
    """

    def __init__(
        self, clusters: ArrayLike, *, reps: int | None = None, seed: int = 0
    ) -> None:
        ids = np.asarray(clusters)
        if ids.ndim != 1:
            raise ValueError(f"cluster ids must be one-dimensional, got shape {ids.shape}")
        _, codes = np.unique(ids, return_inverse=True)
        self.codes: NDArray[np.intp] = codes.astype(np.intp).ravel()
        self.n_rows = int(ids.size)
        self.n_clusters = int(codes.max()) + 1 if ids.size else 0
        self._given_reps = reps
        self.reps = bootstrap_reps(self.n_clusters) if reps is None else int(reps)
        if self.reps < 1:
            raise ValueError(f"reps must be at least 1, got {self.reps}")
        self.seed = int(seed)
        self._counts_of: ClusteredBootstrap | None = None  #: whose counts a subset shares

    def subset(self, rows: ArrayLike) -> ClusteredBootstrap:
        """The bootstrap of some rows (a question, a cell): a boolean mask or row indices.

        Same seed; the resample count follows :func:`bootstrap_reps` for its own size unless
        this bootstrap was given ``reps``. Rows that span every cluster (a question asked in
        every decision) share this bootstrap's counts: no second draw, the same resamples.
        """
        picked = np.asarray(rows)
        if picked.dtype == bool and picked.shape != (self.n_rows,):
            raise ValueError(f"a row mask needs {self.n_rows} entries, got {picked.shape}")
        child = ClusteredBootstrap(self.codes[picked], reps=self._given_reps, seed=self.seed)
        if child.n_clusters == self.n_clusters and child.reps == self.reps:
            child._counts_of = self  # its codes are this one's: every cluster id is present
        return child

    @property
    def method(self) -> str:
        """How the resample counts are drawn."""
        return "Poisson" if self.n_clusters > _POISSON_FROM else "multinomial"

    def _weights(self) -> Iterator[tuple[int, int, NDArray[np.uint8]]]:
        """(start, stop, counts) chunks of the (reps, clusters) resample counts."""
        if self._counts_of is not None:
            yield from self._counts_of._weights()
            return
        c = self.n_clusters
        chunk = max(1, min(self.reps, _CHUNK_CELLS // c))
        if self.reps * c <= _CACHE_CELLS:
            counts = _resample_counts(self.seed, c, self.reps, chunk)
            for start in range(0, self.reps, chunk):
                yield start, min(start + chunk, self.reps), counts[start:start + chunk]
            return
        rng = np.random.default_rng(self.seed)
        for start in range(0, self.reps, chunk):
            stop = min(start + chunk, self.reps)
            yield start, stop, _draw_counts(rng, c, stop - start)

    def _cluster_sums(self, columns: ArrayLike) -> FloatArray:
        cols = _matrix(columns)
        if cols.ndim != 2 or cols.shape[0] != self.n_rows:
            raise ValueError(
                f"columns must have one row per clustered row ({self.n_rows}), got {cols.shape}")
        if not np.isfinite(cols).all():
            raise ValueError("columns must be finite numbers (drop unanswered rows first)")
        out = np.empty((self.n_clusters, cols.shape[1]))
        for j in range(cols.shape[1]):
            out[:, j] = np.bincount(self.codes, cols[:, j], minlength=self.n_clusters)
        return out

    def sums(self, columns: ArrayLike) -> FloatArray:
        """(reps, k) resampled column sums of an (n_rows, k) matrix."""
        per_cluster = self._cluster_sums(columns)
        out = np.zeros((self.reps, per_cluster.shape[1]))
        if self.n_clusters == 0:
            return out
        # sum_c w_c x_c = sum_c w_c (x_c - mean) + (sum_c w_c) mean: the product runs in
        # float32 (twice as fast) on the centred sums, whose rounding is far below the
        # resampling spread; the total weight is an exact integer.
        centre = per_cluster.mean(axis=0)
        centred = (per_cluster - centre).astype(np.float32)
        for start, stop, counts in self._weights():
            total = counts.sum(axis=1, dtype=np.int64).astype(np.float64)
            out[start:stop] = (counts.astype(np.float32) @ centred) + total[:, None] * centre
        return out

    def interval(
        self, columns: ArrayLike, statistic: Statistic, point: float | None,
        level: float = LEVEL,
    ) -> Interval:
        """Percentile interval of ``statistic`` over the resamples; none when point is None."""
        return self.intervals([(columns, statistic, point)], level)[0]

    def intervals(
        self, figures: Sequence[tuple[ArrayLike, Statistic, float | None]],
        level: float = LEVEL,
    ) -> list[Interval]:
        """:meth:`interval` of several figures in one pass over the resamples (cheaper)."""
        _check_level(level)
        blocks = [_matrix(columns) for columns, _, _ in figures]
        out = [Interval(None, None, "bootstrap", level) for _ in figures]
        wanted = [i for i, (_, _, point) in enumerate(figures) if point is not None]
        if not wanted or self.n_clusters == 0:
            return out
        resampled = self.sums(np.hstack([blocks[i] for i in wanted]))
        at = 0
        for i in wanted:
            width = blocks[i].shape[1]
            values = np.asarray(figures[i][1](resampled[:, at:at + width]), dtype=np.float64)
            out[i] = _percentile(values, level)
            at += width
        return out

    def paired(
        self, columns_a: ArrayLike, columns_b: ArrayLike, statistic: Statistic,
        level: float = LEVEL,
    ) -> PairedTest:
        """A - B on the same resamples: interval of the difference, p-value, detectable size.

        The rows of A and B must be matched (same row = same item, same cluster). The p-value
        is two-sided: twice the smaller share of resampled differences on either side of 0
        (with the usual +1 so it is never 0), so p < 1 - level exactly when the interval
        excludes 0. The detectable difference comes from the resampled differences' sd.
        """
        return self.paired_many([(columns_a, columns_b, statistic)], level)[0]

    def paired_many(
        self, figures: Sequence[tuple[ArrayLike, ArrayLike, Statistic]], level: float = LEVEL,
    ) -> list[PairedTest]:
        """:meth:`paired` of several figures in one pass over the resamples (cheaper)."""
        _check_level(level)
        pairs = []
        for columns_a, columns_b, _ in figures:
            a, b = _matrix(columns_a), _matrix(columns_b)
            if a.shape != b.shape:
                raise ValueError(
                    f"the two runs' columns differ in shape: {a.shape} vs {b.shape}")
            pairs.append((a, b))
        if self.n_clusters == 0:
            return [_no_paired(level) for _ in figures]
        resampled = self.sums(np.hstack([m for pair in pairs for m in pair]))
        out, at = [], 0
        for (a, b), (_, _, statistic) in zip(pairs, figures, strict=True):
            k = a.shape[1]
            full_a, full_b = a.sum(axis=0)[None, :], b.sum(axis=0)[None, :]
            point = float((statistic(full_a) - statistic(full_b))[0])
            diffs = statistic(resampled[:, at:at + k]) - statistic(resampled[:, at + k:at + 2 * k])
            at += 2 * k
            out.append(_paired_from(point, np.asarray(diffs, dtype=np.float64), level))
        return out


def _matrix(columns: ArrayLike) -> FloatArray:
    m = np.asarray(columns, dtype=np.float64)
    return m[:, None] if m.ndim == 1 else m


def _no_paired(level: float) -> PairedTest:
    return PairedTest(None, Interval(None, None, "bootstrap", level), None, "paired bootstrap",
                      None)


def _paired_from(point: float, diffs: FloatArray, level: float) -> PairedTest:
    if not np.isfinite(point):
        return _no_paired(level)
    diffs = diffs[np.isfinite(diffs)]
    if not diffs.size:
        return PairedTest(point, _no_paired(level).interval, None, "paired bootstrap", None)
    below = (np.sum(diffs <= 0.0) + 1) / (diffs.size + 1)
    above = (np.sum(diffs >= 0.0) + 1) / (diffs.size + 1)
    p_value = float(min(1.0, 2.0 * min(below, above)))
    se = float(np.std(diffs, ddof=1)) if diffs.size > 1 else None
    return PairedTest(point, _percentile(diffs, level), p_value, "paired bootstrap",
                      detectable_difference(se))


def _percentile(values: FloatArray, level: float) -> Interval:
    finite = values[np.isfinite(values)]
    if not finite.size:
        return Interval(None, None, "bootstrap", level)
    tail = (1.0 - level) / 2.0 * 100.0
    low, high = np.percentile(finite, [tail, 100.0 - tail])
    return Interval(float(low), float(high), "bootstrap", level)


# --- ready-made statistics ---------------------------------------------------------------


def ratio_statistic(numerator: int = 0, denominator: int = 1) -> Statistic:
    """sums[:, numerator] / sums[:, denominator] (NaN where the denominator is 0)."""

    def statistic(sums: FloatArray) -> FloatArray:
        den = sums[:, denominator]
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(den > 0, sums[:, numerator] / np.where(den > 0, den, 1.0), np.nan)

    return statistic


def ratio_columns(numerator: ArrayLike, denominator: ArrayLike) -> tuple[FloatArray, Statistic]:
    """(columns, statistic) of sum(numerator) / sum(denominator) over the resampled rows.

    For a share whose base varies by resample: false positives per 100 states
    (``ratio_columns(100 * fp_per_state, ones)``), a rate among the rows that have a property.
    """
    num = np.asarray(numerator, dtype=np.float64).ravel()
    den = np.asarray(denominator, dtype=np.float64).ravel()
    if num.shape != den.shape:
        raise ValueError(f"numerator and denominator differ in shape: {num.shape} vs {den.shape}")
    return np.column_stack([num, den]), ratio_statistic(0, 1)


def mean_columns(values: ArrayLike) -> tuple[FloatArray, Statistic]:
    """(columns, statistic) of a row mean: accuracy (0/1), Brier ((s - y)^2), MAE, log loss.

    ``boot.interval(*mean_columns(values), point)``.
    """
    v = np.asarray(values, dtype=np.float64).ravel()
    return np.column_stack([v, np.ones_like(v)]), ratio_statistic(0, 1)


def _bin_index(s: FloatArray, n_bins: int) -> NDArray[np.intp]:
    """The reliability bins of :func:`app.report.scores.reliability_bins`."""
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    return np.clip(np.digitize(s, edges[1:-1], right=False), 0, n_bins - 1).astype(np.intp)


def ece_columns(y: ArrayLike, s: ArrayLike, n_bins: int = 10) -> tuple[FloatArray, Statistic]:
    """(columns, statistic) of the expected calibration error with equal-width bins.

    ECE = sum over bins of |sum(s - y) in the bin| / n, so the columns are (s - y) in each
    bin and a count: ``boot.interval(*ece_columns(y, s, 10), point)``.
    """
    if n_bins < 1:
        raise ValueError(f"n_bins must be at least 1, got {n_bins}")
    ya = np.asarray(y, dtype=np.float64).ravel()
    sa = np.asarray(s, dtype=np.float64).ravel()
    if ya.shape != sa.shape:
        raise ValueError(f"labels and scores differ in shape: {ya.shape} vs {sa.shape}")
    columns = np.zeros((sa.size, n_bins + 1))
    columns[np.arange(sa.size), _bin_index(sa, n_bins)] = sa - ya
    columns[:, n_bins] = 1.0
    return columns, ece_statistic(n_bins)


def ece_statistic(n_bins: int = 10) -> Statistic:
    """ECE from the sums of :func:`ece_columns` (NaN where nothing is resampled)."""

    def statistic(sums: FloatArray) -> FloatArray:
        count = sums[:, n_bins]
        gap = np.abs(sums[:, :n_bins]).sum(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(count > 0, gap / np.where(count > 0, count, 1.0), np.nan)

    return statistic
