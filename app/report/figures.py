"""Every figure of a report, overall and per cell, from report rows (no SQL here).

A figure block is ``{"replicates": k, "figures": {name: value}, "std": {name: value}}``:
with one replicate ``figures`` are the run's figures and ``std`` is empty; with several, each
figure is computed per replicate and ``figures`` holds the mean, ``std`` the sample standard
deviation across replicates.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.engine import Family, QuestionKind, kind_named
from app.errors import InputError
from app.report import scores as m
from app.report.load import QuestionRow

__all__ = [
    "Params",
    "binary_rows",
    "by_cell",
    "calibration_figures",
    "choice_figures",
    "confusion_table",
    "count_values",
    "figure_block",
    "figures_of",
    "is_binary",
    "is_positive",
    "noul_arrays",
    "noul_figures",
    "quantiles",
    "score_figures",
    "section",
    "typed_rows",
]

Figures = dict[str, Any]
FigureFn = Callable[[Sequence["QuestionRow"], "Params"], Figures]


@dataclass(frozen=True)
class Params:
    """Report thresholds (the CLI flags)."""

    threshold_recall: float = 0.30
    threshold_fp: float = 0.70
    top_share: float = 0.05
    band_low: float = 0.30
    band_high: float = 0.70
    n_bins: int = 10


def typed_rows(rows: Iterable[QuestionRow], qtype: str) -> list[QuestionRow]:
    """Rows of one question type that carry an expected label."""
    return [r for r in rows if r.question_type == qtype and r.expected is not None]


def is_binary(qtype: str) -> bool:
    """Whether a question of this type is answered with P(positive)."""
    try:
        return kind_named(qtype).family is Family.BINARY
    except InputError:  # a kind no longer registered
        return False


def binary_rows(rows: Iterable[QuestionRow]) -> list[QuestionRow]:
    """Rows of the yes/no kinds that carry an expected label."""
    return [r for r in rows if r.expected is not None and is_binary(r.question_type)]


def is_positive(row: QuestionRow) -> bool:
    """A yes/no row whose expected label is the positive one (the first: yes)."""
    return bool(row.labels) and row.expected == row.labels[0]


def noul_arrays(rows: Sequence[QuestionRow]) -> tuple[np.ndarray, np.ndarray, int]:
    """(y, P(yes), distinct states) of the answered labelled yes/no rows (positive: the first
    label)."""
    done = [r for r in rows if r.answered and r.p_yes is not None]
    y = np.array([1 if is_positive(r) else 0 for r in done], dtype=np.int64)
    s = np.array([float(r.p_yes) for r in done if r.p_yes is not None], dtype=np.float64)
    return y, s, len({r.state_key for r in done})


def noul_figures(rows: Sequence[QuestionRow], p: Params) -> Figures:
    """The field report's figures for labelled yes/no questions."""
    y, s, n_states = noul_arrays(rows)
    recall_hits, recall = m.recall_at(y, s, p.threshold_recall)
    top_hits, top = m.top_share(y, s, p.top_share)
    labelled, unanswered = len(rows), sum(r.unanswered for r in rows)
    band = m.referral_band(s, p.band_low, p.band_high)
    rank_median, rank_worst = m.rank_summary(y, s)
    fp, fp_1000, fp_states = m.false_positives(y, s, p.threshold_fp, n_states)
    return {
        "n": int(y.size), "positives": int(y.sum()), "negatives": int(y.size - y.sum()),
        "labelled": labelled, "unanswered": unanswered,
        "unanswered_share": unanswered / labelled if labelled else None,
        "distinct_states": n_states,
        "auc": m.auc(y, s),
        "recall": recall, "recall_hits": recall_hits,
        "top_share": top, "top_share_hits": top_hits,
        "top_share_cap": m.top_share_cap(int(y.size), int(y.sum()), p.top_share),
        "rank_median_pct": rank_median, "rank_worst_pct": rank_worst,
        "fp_count": fp, "fp_per_1000_neg": fp_1000, "fp_per_100_states": fp_states,
        "referral_band": band, "referral_band_share": band / y.size if y.size else None,
        "referral_band_pos": m.referral_band(s[y == 1], p.band_low, p.band_high),
        "ece": m.ece(y, s, p.n_bins), "brier": m.brier(y, s),
    }


def _answered(rows: Sequence[QuestionRow]) -> list[QuestionRow]:
    return [r for r in rows if r.answered and r.label is not None]


def _unanswered(rows: Sequence[QuestionRow]) -> Figures:
    labelled, unanswered = len(rows), sum(r.unanswered for r in rows)
    return {"labelled": labelled, "unanswered": unanswered,
            "unanswered_share": unanswered / labelled if labelled else None}


def choice_figures(rows: Sequence[QuestionRow], p: Params) -> Figures:
    """Accuracy and log loss of labelled choice questions."""
    done = _answered(rows)
    truth = [str(r.expected) for r in done]
    p_true = [float((r.probs or {}).get(str(r.expected), 0.0)) for r in done]
    return {
        "n": len(done), **_unanswered(rows),
        "accuracy": m.accuracy(truth, [str(r.label) for r in done]),
        "log_loss": m.log_loss_true(p_true),
    }


def score_figures(rows: Sequence[QuestionRow], p: Params) -> Figures:
    """MAE of the expected level and accuracy of the top level, labelled score questions."""
    done = [r for r in _answered(rows) if str(r.expected) in r.labels]
    leveled = [(r, r.expected_level) for r in done if r.expected_level is not None]
    levels = [r.labels.index(str(r.expected)) for r, _ in leveled]
    return {
        "n": len(done), **_unanswered(rows),
        "mae_level": m.mae(levels, [level for _, level in leveled]),
        "accuracy": m.accuracy([str(r.expected) for r in done], [str(r.label) for r in done]),
    }


#: The figures of each family's questions.
_FIGURES: Mapping[Family, FigureFn] = {
    Family.BINARY: noul_figures, Family.NOMINAL: choice_figures, Family.ORDINAL: score_figures,
}


def figures_of(kind: QuestionKind) -> FigureFn:
    """The figure function of ``kind``'s questions (by its family)."""
    return _FIGURES[kind.family]


def confusion_table(rows: Sequence[QuestionRow]) -> dict[str, Any]:
    """Pooled confusion table (rows expected, columns answered) over the union of labels."""
    done = _answered(rows)
    labels = sorted({str(r.expected) for r in done} | {str(r.label) for r in done})
    truth = [str(r.expected) for r in done]
    return {"labels": labels, "matrix": m.confusion(truth, [str(r.label) for r in done], labels)}


def figure_block(
    rows: Sequence[QuestionRow], fn: Callable[[Sequence[QuestionRow], Params], Figures], p: Params
) -> dict[str, Any]:
    """Figures of ``rows``; mean and standard deviation across replicates when several."""
    groups = _grouped(rows, lambda r: r.replicate)
    if len(groups) <= 1:
        return {"replicates": len(groups), "figures": fn(rows, p), "std": {}}
    per_rep = [fn(groups[k], p) for k in sorted(groups)]
    mean, std = _mean_std(per_rep)
    return {"replicates": len(groups), "figures": mean, "std": std}


def _mean_std(per_rep: Sequence[Figures]) -> tuple[Figures, Figures]:
    mean: Figures = {}
    std: Figures = {}
    for name in per_rep[0]:
        values = [f[name] for f in per_rep if f[name] is not None]
        if not values:
            mean[name], std[name] = None, None
            continue
        arr = np.asarray(values, dtype=np.float64)
        same_int = all(isinstance(v, int) for v in values) and len(set(values)) == 1
        mean[name] = values[0] if same_int else float(arr.mean())
        std[name] = float(arr.std(ddof=1)) if arr.size > 1 else None
    return mean, std


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


def section(
    rows: Sequence[QuestionRow], fn: Callable[[Sequence[QuestionRow], Params], Figures], p: Params
) -> dict[str, Any]:
    """``{"overall": block, "cells": {cell: block}}`` for one question type's rows."""
    return {
        "overall": figure_block(rows, fn, p),
        "cells": {cell: figure_block(group, fn, p) for cell, group in by_cell(rows).items()},
    }


def calibration_figures(rows: Sequence[QuestionRow], p: Params) -> dict[str, Any]:
    """Reliability bins, ECE and Brier score overall and per question id (all replicates)."""
    by_question = _grouped(rows, lambda r: r.question_id)
    return {
        "overall": _calibration_of(rows, p),
        "questions": {q: _calibration_of(by_question[q], p) for q in sorted(by_question)},
    }


def _calibration_of(rows: Sequence[QuestionRow], p: Params) -> dict[str, Any]:
    y, s, _ = noul_arrays(rows)
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
    counts = Counter(str(v) for v in values)
    return {k: counts[k] for k in sorted(counts)}


def quantiles(values: Sequence[float], qs: Mapping[str, float]) -> dict[str, float | None]:
    """Named quantiles of ``values`` (None when empty)."""
    if not values:
        return {name: None for name in qs}
    arr = np.asarray(values, dtype=np.float64)
    return {name: float(np.quantile(arr, q)) for name, q in qs.items()}
