"""Report rows as numpy columns, and their replicates averaged: what figures are computed on.

``columns_of`` reads the rows of one question kind once (O(n) Python); every figure, interval
and grouping (per question, per cell, per replicate) then works on index arrays. ``averaged``
turns the replicate copies of one (decision, question) into one answer: the mean P(yes), the
mean of the answers' probabilities (so its label is the argmax of the mean probabilities, and
a score's level the mean level), so that a figure and its interval come from the same rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
from numpy.typing import NDArray

from app.report.load import QuestionRow

__all__ = ["Columns", "averaged", "columns_of", "grouped"]

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]


@dataclass(frozen=True)
class Columns:
    """One entry per report row (or per (decision, question) once ``averaged``).

    Codes index the name tuples (``question_names``, ``cell_names``); ``decision`` is the
    cluster of the bootstrap (the questions and replicates of one decision move together).
    NaN marks what a row has not: no P(yes), no label, no level.
    """

    decision: IntArray
    replicate: IntArray
    question: IntArray
    cell: IntArray
    state: IntArray
    y: IntArray  #: 1: the expected label is the positive one (yes/no)
    s: FloatArray  #: P(yes) of an answered row, else NaN
    has_label: BoolArray  #: answered with a label
    correct: FloatArray  #: 1.0 answered label == expected, 0.0 other label, NaN no label
    p_true: FloatArray  #: probability of the expected label (NaN no label)
    in_labels: BoolArray  #: the expected label is one of the question's labels
    level_true: FloatArray  #: the expected label's level (index), NaN when not a label
    level_pred: FloatArray  #: the answer's expected level, NaN when none
    unanswered: BoolArray  #: settled without an answer
    question_names: tuple[str, ...]
    cell_names: tuple[str, ...]
    #: the row each entry came from (an object array; its probabilities: ``averaged`` takes
    #: the argmax); None once averaged
    rows: NDArray[np.object_] | None = None

    def __len__(self) -> int:
        return int(self.decision.size)

    def take(self, index: NDArray[np.intp] | BoolArray) -> Columns:
        """The entries at ``index`` (a boolean mask or positions)."""
        idx = np.flatnonzero(index) if np.asarray(index).dtype == bool else np.asarray(index)
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, np.ndarray):
                out[f.name] = value[idx]
            else:
                out[f.name] = value
        return Columns(**out)

    @property
    def replicates(self) -> int:
        return int(np.unique(self.replicate).size)


def _codes(values: Iterable[str]) -> tuple[IntArray, tuple[str, ...]]:
    """Codes of ``values`` in the sorted order of their distinct values (a dict: O(n))."""
    seen: dict[str, int] = {}
    first = np.fromiter((seen.setdefault(v, len(seen)) for v in values), np.int64)
    names = sorted(seen)
    order = np.empty(len(names), dtype=np.int64)
    order[[seen[n] for n in names]] = np.arange(len(names))
    return order[first] if first.size else first, tuple(names)


def columns_of(rows: Sequence[QuestionRow], *, typed: bool = True) -> Columns:
    """The columns of ``rows``; without ``typed`` the choice/score fields (label, level) are
    left empty (NaN): the yes/no figures do not read them."""
    n = len(rows)
    nan = float("nan")
    decision, _ = _codes(r.decision_key for r in rows)
    question, qnames = _codes(r.question_id for r in rows)
    cell, cnames = _codes(r.cell for r in rows)
    state, _ = _codes(r.state_key for r in rows)
    y = np.fromiter((bool(r.labels) and r.expected == r.labels[0] for r in rows), bool, n)
    s = np.fromiter((float(r.p_yes) if r.answered and r.p_yes is not None else nan
                     for r in rows), np.float64, n)
    has_label = np.fromiter((r.answered and r.label is not None for r in rows), bool, n)
    empty = np.full(n, nan)
    correct, p_true, level_true, level_pred = empty, empty, empty, empty
    in_labels = np.zeros(n, dtype=bool)
    if typed:
        correct = np.fromiter((nan if not (r.answered and r.label is not None)
                               else float(str(r.label) == str(r.expected)) for r in rows),
                              np.float64, n)
        p_true = np.fromiter((nan if not (r.answered and r.label is not None)
                              else float((r.probs or {}).get(str(r.expected), 0.0))
                              for r in rows), np.float64, n)
        in_labels = np.fromiter((str(r.expected) in r.labels for r in rows), bool, n)
        level_true = np.fromiter((r.labels.index(str(r.expected))
                                  if str(r.expected) in r.labels else nan for r in rows),
                                 np.float64, n)
        level_pred = np.fromiter((float(r.expected_level) if r.answered and r.label is not None
                                  and r.expected_level is not None else nan for r in rows),
                                 np.float64, n)
    return Columns(
        decision=decision, replicate=np.fromiter((r.replicate for r in rows), np.int64, n),
        question=question, cell=cell, state=state, y=y.astype(np.int64), s=s,
        has_label=has_label, correct=correct, p_true=p_true, in_labels=in_labels,
        level_true=level_true, level_pred=level_pred,
        unanswered=np.fromiter((r.unanswered for r in rows), bool, n),
        question_names=qnames, cell_names=cnames, rows=_objects(rows),
    )


def _objects(rows: Sequence[QuestionRow]) -> NDArray[np.object_]:
    out = np.empty(len(rows), dtype=object)
    out[:] = list(rows)
    return out


def grouped(codes: IntArray, names: Sequence[str]) -> dict[str, NDArray[np.intp]]:
    """Positions of each code's entries, by name, names in sorted order (O(n log n))."""
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(len(names) + 1))
    return {names[i]: order[bounds[i]:bounds[i + 1]] for i in range(len(names))
            if bounds[i + 1] > bounds[i]}


def _mean_of(inv: IntArray, groups: int, values: FloatArray) -> FloatArray:
    """Per-group mean of the finite ``values`` (NaN where a group has none)."""
    ok = np.isfinite(values)
    total = np.bincount(inv, np.where(ok, values, 0.0), minlength=groups)
    count = np.bincount(inv, ok.astype(np.float64), minlength=groups)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.where(count > 0, count, 1.0), np.nan)


def averaged(cols: Columns) -> Columns:
    """One entry per (decision, question): its replicates' answers averaged (see the module).

    An entry is answered when any replicate is; unanswered when none is and one settled
    without an answer.
    """
    if not len(cols):
        return cols
    key = cols.decision * (len(cols.question_names) + 1) + cols.question
    _, first, inv = np.unique(key, return_index=True, return_inverse=True)
    inv = inv.ravel()
    g = first.size
    s = _mean_of(inv, g, cols.s)
    has_label = np.bincount(inv, cols.has_label.astype(np.float64), minlength=g) > 0
    correct = _mean_of(inv, g, cols.correct)
    split = np.flatnonzero((correct > 0) & (correct < 1))  # replicates disagree: argmax
    if split.size and cols.rows is not None:
        correct[split] = _argmax_correct(cols, inv, split)
    answered_any = np.bincount(inv, (np.isfinite(cols.s) | cols.has_label).astype(np.float64),
                               minlength=g) > 0
    unanswered = (np.bincount(inv, cols.unanswered.astype(np.float64), minlength=g) > 0)
    return Columns(
        decision=cols.decision[first], replicate=np.zeros(g, np.int64),
        question=cols.question[first], cell=cols.cell[first], state=cols.state[first],
        y=cols.y[first], s=s, has_label=has_label, correct=correct,
        p_true=_mean_of(inv, g, cols.p_true), in_labels=cols.in_labels[first],
        level_true=cols.level_true[first], level_pred=_mean_of(inv, g, cols.level_pred),
        unanswered=unanswered & ~answered_any, question_names=cols.question_names,
        cell_names=cols.cell_names, rows=None,
    )


def _argmax_correct(cols: Columns, inv: IntArray, groups: NDArray[np.intp]) -> FloatArray:
    """Whether the argmax of the mean probabilities is the expected label, for ``groups``
    whose replicates answered differently (the only ones needing the probabilities)."""
    assert cols.rows is not None
    wanted = np.zeros(int(inv.max()) + 1, dtype=bool)
    wanted[groups] = True
    sums: dict[int, dict[str, float]] = {}
    expected: dict[int, str] = {}
    for i in np.flatnonzero(wanted[inv] & cols.has_label).tolist():
        row = cols.rows[i]
        acc = sums.setdefault(int(inv[i]), {})
        for label, p in (row.probs or {}).items():
            acc[label] = acc.get(label, 0.0) + float(p)
        expected[int(inv[i])] = str(row.expected)
    out = np.empty(groups.size)
    for j, grp in enumerate(groups.tolist()):
        acc = sums.get(grp, {})
        out[j] = float(bool(acc) and max(acc, key=lambda k: acc[k]) == expected[grp])
    return out
