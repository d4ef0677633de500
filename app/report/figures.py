"""The figures of each family of questions and their intervals, from report rows (no SQL).

Every key a figure function returns has its row in ``specs.SPECS`` (checked by
``sections.figure_block``); blocks, sections and replicates are ``sections.py``'s.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from app.engine import Family, QuestionKind, kind_named
from app.errors import InputError
from app.report import scores as m
from app.report.columns import Columns, columns_of
from app.report.intervals import (
    ClusteredBootstrap,
    Interval,
    Statistic,
    auc_interval,
    ece_columns,
    mean_columns,
    median_interval,
    ratio_statistic,
)
from app.report.load import QuestionRow

__all__ = [
    "FamilyFigures",
    "Params",
    "binary_rows",
    "by_cell",
    "calibration_figures",
    "choice_figures",
    "confusion_table",
    "count_values",
    "figures_of",
    "is_binary",
    "is_positive",
    "noul_arrays",
    "noul_figures",
    "quantiles",
    "score_figures",
    "typed_rows",
]

Figures = dict[str, Any]


@dataclass(frozen=True)
class Params:
    """Report thresholds (the CLI flags)."""

    threshold_recall: float = 0.30
    threshold_fp: float = 0.70
    top_share: float = 0.05
    band_low: float = 0.30
    band_high: float = 0.70
    n_bins: int = 10
    seed: int = 0  #: the bootstrap's seed: the same report prints the same intervals


def typed_rows(rows: Iterable[QuestionRow], qtype: str) -> list[QuestionRow]:
    """Rows of one question type that carry an expected label."""
    return [r for r in rows if r.question_type == qtype and r.expected is not None]


def is_binary(qtype: str) -> bool:
    """Whether a question of this type is answered with P(positive)."""
    try:
        return kind_named(qtype).family is Family.BINARY
    except InputError:  # a kind no longer registered
        return False


def binary_types(rows: Iterable[QuestionRow]) -> frozenset[str]:
    """The question types of ``rows`` that are yes/no kinds (each type looked up once)."""
    return frozenset(t for t in {r.question_type for r in rows} if is_binary(t))


def binary_rows(rows: Sequence[QuestionRow]) -> list[QuestionRow]:
    """Rows of the yes/no kinds that carry an expected label."""
    binary = binary_types(rows)
    return [r for r in rows if r.expected is not None and r.question_type in binary]


def is_positive(row: QuestionRow) -> bool:
    """A yes/no row whose expected label is the positive one (the first: yes)."""
    return bool(row.labels) and row.expected == row.labels[0]


def noul_arrays(rows: Sequence[QuestionRow]) -> tuple[np.ndarray, np.ndarray, int]:
    """(y, P(yes), distinct states) of the answered labelled yes/no rows (positive: the first
    label)."""
    done = [r for r in rows if r.answered and r.p_yes is not None]
    y, s = _scored(done)
    return y, s, len({r.state_key for r in done})


def _scored(done: Sequence[QuestionRow]) -> tuple[np.ndarray, np.ndarray]:
    """(y, P(yes)) of answered yes/no rows."""
    y = np.fromiter((bool(r.labels) and r.expected == r.labels[0] for r in done), bool,
                    len(done)).astype(np.int64)
    s = np.fromiter((float(r.p_yes or 0.0) for r in done), np.float64, len(done))
    return y, s


class FamilyFigures:
    """The figures of one family's questions and their intervals over items.

    Called on rows or ``Columns``: the figures of those entries as they are (one replicate;
    ``sections.figure_block`` averages replicates first). ``intervals`` gives the interval of
    every figure whose method is not a Wilson rate (those come from the counts, ``specs``);
    its bootstrap resamples the decisions of the entries ``done`` marks (the answered ones the
    figures are computed on).
    """

    def __init__(self, family: Family,
                 figures: Callable[[Columns, Params], Figures],
                 intervals: Callable[[Columns, Params, Figures, ClusteredBootstrap],
                                     dict[str, Interval]],
                 done: Callable[[Columns], NDArray[np.bool_]]) -> None:
        self.family = family
        self._figures = figures
        self._intervals = intervals
        self.done = done

    def __call__(self, rows: Sequence[QuestionRow] | Columns, p: Params) -> Figures:
        cols = rows if isinstance(rows, Columns) else columns_of(
            rows, typed=self.family is not Family.BINARY)
        return self._figures(cols, p)

    def intervals(self, cols: Columns, p: Params, figures: Figures,
                  boot: ClusteredBootstrap | None = None) -> dict[str, Interval]:
        """Intervals of the figures the counts do not give (AUC, bootstrap, median); ``boot``
        over the decisions of ``cols``' ``done`` entries, in their order (made when None)."""
        if boot is None:
            boot = ClusteredBootstrap(cols.decision[self.done(cols)], seed=p.seed)
        return self._intervals(cols, p, figures, boot)


def _answered_p(c: Columns) -> NDArray[np.bool_]:
    return np.isfinite(c.s)


def _with_label(c: Columns) -> NDArray[np.bool_]:
    return c.has_label


def _bootstrapped(boot: ClusteredBootstrap,
                  figures: dict[str, tuple[tuple[np.ndarray, Statistic], Any]]
                  ) -> dict[str, Interval]:
    """The bootstrap intervals of several figures in one pass over the resamples."""
    keys = list(figures)
    found = boot.intervals([(*figures[k][0], figures[k][1]) for k in keys])
    return dict(zip(keys, found, strict=True))


def _labelled(c: Columns) -> Figures:
    labelled, unanswered = len(c), int(c.unanswered.sum())
    return {"labelled": labelled, "unanswered": unanswered,
            "unanswered_share": unanswered / labelled if labelled else None}


def _noul(c: Columns, p: Params) -> Figures:
    done = np.isfinite(c.s)
    y, s = c.y[done], c.s[done]
    n_states = int(np.unique(c.state[done]).size)
    recall_hits, recall = m.recall_at(y, s, p.threshold_recall)
    ranks = m.ranking(y, s, p.top_share)
    band = m.referral_band(s, p.band_low, p.band_high)
    fp, fp_1000, fp_states = m.false_positives(y, s, p.threshold_fp, n_states)
    return {
        "n": int(y.size), "positives": int(y.sum()), "negatives": int(y.size - y.sum()),
        **_labelled(c), "distinct_states": n_states,
        "auc": ranks.auc,
        "recall": recall, "recall_hits": recall_hits,
        "top_share": ranks.top_share, "top_share_hits": ranks.top_hits,
        "top_share_cap": m.top_share_cap(int(y.size), int(y.sum()), p.top_share),
        "rank_median_pct": ranks.rank_median, "rank_worst_pct": ranks.rank_worst,
        "fp_count": fp, "fp_per_1000_neg": fp_1000, "fp_per_100_states": fp_states,
        "referral_band": band, "referral_band_share": band / y.size if y.size else None,
        "referral_band_pos": m.referral_band(s[y == 1], p.band_low, p.band_high),
        "ece": m.ece(y, s, p.n_bins), "brier": m.brier(y, s),
    }


def _noul_intervals(c: Columns, p: Params, f: Figures,
                    boot: ClusteredBootstrap) -> dict[str, Interval]:
    done = np.isfinite(c.s)
    y, s = c.y[done], c.s[done]
    return {
        "auc": auc_interval(y, s),
        "rank_median_pct": median_interval(m.positive_rank_percentiles(y, s)),
        **_bootstrapped(boot, {"ece": (ece_columns(y, s, p.n_bins), f["ece"]),
                               "brier": (mean_columns((s - y) ** 2), f["brier"])}),
    }


def _choice(c: Columns, p: Params) -> Figures:
    done = c.has_label
    correct = c.correct[done]
    return {
        "n": int(done.sum()), **_labelled(c),
        "accuracy": float(correct.mean()) if correct.size else None,
        "log_loss": m.log_loss_true(c.p_true[done]),
    }


def _choice_intervals(c: Columns, p: Params, f: Figures,
                      boot: ClusteredBootstrap) -> dict[str, Interval]:
    done = c.has_label
    loss = -np.log(np.clip(c.p_true[done], 1e-15, 1.0))
    return _bootstrapped(boot, {"accuracy": (mean_columns(c.correct[done]), f["accuracy"]),
                                "log_loss": (mean_columns(loss), f["log_loss"])})


def _score_rows(c: Columns) -> tuple[NDArray[np.bool_], NDArray[np.bool_]]:
    """(answered with the expected label a level, of those: with an expected level)."""
    done = c.has_label & c.in_labels
    return done, done & np.isfinite(c.level_pred)


def _score(c: Columns, p: Params) -> Figures:
    done, leveled = _score_rows(c)
    correct = c.correct[done]
    return {
        "n": int(done.sum()), **_labelled(c),
        "mae_level": m.mae(c.level_true[leveled], c.level_pred[leveled]),
        "accuracy": float(correct.mean()) if correct.size else None,
    }


def _score_done(c: Columns) -> NDArray[np.bool_]:
    return _score_rows(c)[0]


def _score_intervals(c: Columns, p: Params, f: Figures,
                     boot: ClusteredBootstrap) -> dict[str, Interval]:
    done, leveled = _score_rows(c)
    lev = leveled[done]
    error = np.where(lev, np.abs(np.nan_to_num(c.level_true[done] - c.level_pred[done])), 0.0)
    mae = (np.column_stack([error, lev.astype(np.float64)]), ratio_statistic(0, 1))
    return _bootstrapped(boot, {"mae_level": (mae, f["mae_level"]),
                                "accuracy": (mean_columns(c.correct[done]), f["accuracy"])})


#: the figures of labelled yes/no questions (the field report's)
noul_figures = FamilyFigures(Family.BINARY, _noul, _noul_intervals, _answered_p)
#: accuracy and log loss of labelled choice questions
choice_figures = FamilyFigures(Family.NOMINAL, _choice, _choice_intervals, _with_label)
#: MAE of the expected level and accuracy of the top level, labelled score questions
score_figures = FamilyFigures(Family.ORDINAL, _score, _score_intervals, _score_done)

#: The figures of each family's questions.
_FIGURES: Mapping[Family, FamilyFigures] = {
    Family.BINARY: noul_figures, Family.NOMINAL: choice_figures, Family.ORDINAL: score_figures,
}


def figures_of(kind: QuestionKind) -> FamilyFigures:
    """The figures of ``kind``'s questions (by its family)."""
    return _FIGURES[kind.family]


def confusion_table(rows: Sequence[QuestionRow]) -> dict[str, Any]:
    """Confusion table (rows expected, columns answered) over the union of labels of ``rows``
    (one question's: the report makes one per question; each replicate counted)."""
    done = [r for r in rows if r.answered and r.label is not None]
    labels = sorted({str(r.expected) for r in done} | {str(r.label) for r in done})
    truth = [str(r.expected) for r in done]
    return {"labels": labels, "matrix": m.confusion(truth, [str(r.label) for r in done], labels)}


def _grouped(rows: Iterable[QuestionRow], key: Callable[[QuestionRow], Any]
             ) -> dict[Any, list[QuestionRow]]:
    groups: dict[Any, list[QuestionRow]] = {}
    for r in rows:
        groups.setdefault(key(r), []).append(r)
    return groups


def by_cell(rows: Sequence[QuestionRow]) -> dict[str, list[QuestionRow]]:
    """Rows grouped by cell, cells in sorted order."""
    groups = _grouped(rows, lambda r: r.cell)
    return {cell: groups[cell] for cell in sorted(groups)}


def calibration_figures(rows: Sequence[QuestionRow], p: Params, *,
                        pooled: bool = True) -> dict[str, Any]:
    """Reliability bins, ECE and Brier score per question id and over all of them (all
    replicates); over several questions ``"pooled": true``, and only with ``pooled``."""
    by_question = _grouped(rows, lambda r: r.question_id)
    many = len(by_question) > 1
    return {
        "overall": {**_calibration_of(rows, p), "pooled": many} if pooled or not many
        else None,
        "questions": {q: _calibration_of(by_question[q], p) for q in sorted(by_question)},
    }


def _calibration_of(rows: Sequence[QuestionRow], p: Params) -> dict[str, Any]:
    y, s = _scored([r for r in rows if r.answered and r.p_yes is not None])
    bins = m.reliability_bins(y, s, p.n_bins)
    return {
        "n": int(y.size), "positives": int(y.sum()), "auc": m.auc(y, s),
        "ece": m.ece(y, s, p.n_bins), "brier": m.brier(y, s),
        "reliability": [
            {"low": b.low, "high": b.high, "count": b.count, "mean_score": b.mean_score,
             "observed": b.observed}
            for b in bins
        ],
    }


def count_values(values: Iterable[Any]) -> dict[str, int]:
    """Counts of each value, keys as strings in sorted order."""
    counts: dict[str, int] = {}
    for v, n in Counter(values).items():  # counted as they are (no str per value), then named
        counts[str(v)] = counts.get(str(v), 0) + n
    return {k: counts[k] for k in sorted(counts)}


def quantiles(values: Sequence[float], qs: Mapping[str, float]) -> dict[str, float | None]:
    """Named quantiles of ``values`` (None when empty)."""
    if not values:
        return {name: None for name in qs}
    arr = np.asarray(values, dtype=np.float64)
    return {name: float(np.quantile(arr, q)) for name, q in qs.items()}
