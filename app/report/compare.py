"""Two runs of the same decisions, figure by figure: the difference, its interval, a paired
test and a verdict in plain words (``report A --against B``).

Items are matched by (decision key, question id); each run's replicates are averaged per item
first (the mean P(yes), or the mean probability of each label, across the replicates that
answered), and only the items both runs answered enter a figure, so a difference is never an
artefact of coverage. Per question (never pooled across questions), overall and per cell of
run A, each figure of ``COMPARED`` gets ``a``, ``b``, ``diff`` (a - b), its 95% ``interval``,
a paired ``p_value``, ``p_adjusted`` (Holm: over the questions for the overall figures, over the
cells of a question for the per-cell ones), the ``detectable`` difference (80% power at this
size) and a ``verdict``:

- AUC: DeLong's test of two correlated AUCs;
- a share of items (recall, in top share, false positives among the no's, accuracy): McNemar
  mid-p on the items where the runs disagree, Newcombe's interval of the paired difference;
- everything else (ECE, Brier, log loss, MAE): the paired bootstrap over decisions (clusters),
  with a fixed seed (``Params.seed``).

``noise_floor``: with replicates in both runs, the spread of each figure between the replicates
of one run, beside the difference between the runs. ``disagreement``: over the questions both
runs answered, per cell and overall, how many got another answer label and how far apart the
two answers' probabilities are (total variation distance), and the questions furthest apart.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from itertools import combinations
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy.stats import rankdata

from app.engine import Family, all_kinds
from app.report.figures import Params, is_positive
from app.report.intervals import (
    ClusteredBootstrap,
    Interval,
    PairedTest,
    delong,
    delong_paired,
    ece_columns,
    holm,
    mcnemar_paired,
    mean_columns,
)
from app.report.load import QuestionRow
from app.report.review import state_words

__all__ = ["ALPHA", "COMPARED", "Compared", "compare_rows", "compared_of", "disagreement",
           "num_text", "verdict_text"]

#: a difference whose adjusted p-value is below this is called real
ALPHA = 0.05
#: questions listed in ``disagreement``'s ``largest``
LARGEST = 10
CORRECTION = "Holm"

Float = NDArray[np.float64]
Bool = NDArray[np.bool_]


@dataclass(frozen=True)
class Compared:
    """One figure compared between two runs: how it is tested and which way is better.

    ``values`` are per item and per run: for yes/no P(yes); for choice (correct, P(true
    label)); for score (correct, |level error|). ``y`` is the item's truth (yes/no: 1 for yes).
    """

    key: str  #: the figure's key in the report (``figures.py``)
    symbol: str  #: as printed after Δ: "AUC", "recall"
    test: str  #: "delong" | "mcnemar" | "bootstrap"
    higher_better: bool
    better: str  #: what the better run does: "ranks better"
    digits: int = 3
    scale: float = 1.0  #: shown x scale (false positives per 1,000 no's)


#: The figures compared per family, in order.
COMPARED: Mapping[Family, tuple[Compared, ...]] = {
    Family.BINARY: (
        Compared("auc", "AUC", "delong", True, "ranks better"),
        Compared("recall", "recall", "mcnemar", True, "finds more of the yes's"),
        Compared("top_share", "in top share", "mcnemar", True,
                 "puts more yes's in the top share"),
        Compared("fp_per_1000_neg", "FP per 1,000 no", "mcnemar", False,
                 "raises fewer false alarms", digits=1, scale=1000.0),
        Compared("ece", "ECE", "bootstrap", False, "is better calibrated", digits=4),
        Compared("brier", "Brier", "bootstrap", False, "has the lower Brier score", digits=4),
    ),
    Family.NOMINAL: (
        Compared("accuracy", "accuracy", "mcnemar", True, "is more accurate"),
        Compared("log_loss", "log loss", "bootstrap", False, "has the lower log loss"),
    ),
    Family.ORDINAL: (
        Compared("accuracy", "accuracy", "mcnemar", True, "is more accurate"),
        Compared("mae_level", "MAE of level", "bootstrap", False, "is closer to the level"),
    ),
}

_METHOD = {"delong": "DeLong", "mcnemar": "McNemar mid-p", "bootstrap": "paired bootstrap"}


# --- items: replicates averaged per (decision, question) -------------------------------------


@dataclass(frozen=True)
class _Items:
    """One run's answered items of one kind: one entry per (decision, question)."""

    keys: NDArray[np.str_]  #: "decision\x1fquestion", sorted, unique
    decision: NDArray[np.str_]
    question: NDArray[np.str_]
    cell: NDArray[np.str_]
    y: Float  #: yes/no: 1 for yes; otherwise 0
    values: Float  #: (n, k) per-item values (see ``Compared``)
    #: per replicate: (item index, values) of the items that replicate answered
    replicates: Mapping[int, tuple[NDArray[np.intp], Float]]


def _row_values(family: Family, r: QuestionRow) -> tuple[float, ...] | None:
    """An answered row's values (``Compared``), None when it carries none."""
    if family is Family.BINARY:
        return None if r.p_yes is None else (float(r.p_yes),)
    if r.label is None:
        return None
    probs = r.probs or {}
    if family is Family.NOMINAL:
        return (float(r.label == r.expected), float(probs.get(str(r.expected), 0.0)))
    if str(r.expected) not in r.labels or r.expected_level is None:
        return None
    level = float(r.labels.index(str(r.expected)))
    return (float(r.label == r.expected), abs(level - float(r.expected_level)))


def _by_kind(rows: Sequence[QuestionRow]) -> dict[str, list[QuestionRow]]:
    """The answered, labelled rows of each question type."""
    out: dict[str, list[QuestionRow]] = {}
    for r in rows:
        if r.answered and r.expected is not None:
            out.setdefault(r.question_type, []).append(r)
    return out


def _items(rows: Sequence[QuestionRow], family: Family) -> _Items | None:
    """One kind's answered labelled rows as items (replicates averaged)."""
    picked: list[QuestionRow] = []
    values: list[tuple[float, ...]] = []
    for r in rows:
        v = _row_values(family, r)
        if v is not None:
            picked.append(r)
            values.append(v)
    if not picked:
        return None
    key = np.array([f"{r.decision_key}\x1f{r.question_id}" for r in picked])
    keys, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    vals = np.asarray(values, dtype=np.float64)
    count = np.bincount(inverse, minlength=keys.size).astype(np.float64)
    mean = np.column_stack([np.bincount(inverse, vals[:, j], minlength=keys.size) / count
                            for j in range(vals.shape[1])])
    firsts = [picked[i] for i in first]
    if family is not Family.BINARY:  # as the report averages them (``columns.averaged``)
        split = np.flatnonzero((mean[:, 0] > 0) & (mean[:, 0] < 1))
        mean[split, 0] = _argmax_correct(picked, inverse, firsts, split)
    if family is Family.ORDINAL:  # the error of the mean expected level
        predicted = np.bincount(inverse, [float(r.expected_level or 0.0) for r in picked],
                                minlength=keys.size) / count
        truth = np.array([float(r.labels.index(str(r.expected))) for r in firsts])
        mean[:, 1] = np.abs(truth - predicted)
    reps = np.array([r.replicate for r in picked])
    replicates = {int(k): (inverse[reps == k], vals[reps == k]) for k in np.unique(reps)}
    return _Items(
        keys=keys,
        decision=np.array([r.decision_key for r in firsts]),
        question=np.array([r.question_id for r in firsts]),
        cell=np.array([r.cell for r in firsts]),
        y=np.array([float(is_positive(r)) if family is Family.BINARY else 0.0
                    for r in firsts]),
        values=mean, replicates=replicates)


def _argmax_correct(picked: Sequence[QuestionRow], inverse: NDArray[np.intp],
                    firsts: Sequence[QuestionRow], items: NDArray[np.intp]) -> Float:
    """Whether the argmax of the summed probabilities is the expected label, for ``items``
    whose replicates answered differently (``columns.averaged``'s rule)."""
    wanted = set(items.tolist())
    sums: dict[int, dict[str, float]] = {}
    for r, i in zip(picked, inverse.tolist(), strict=True):
        if i in wanted:
            acc = sums.setdefault(i, {})
            for label, p in (r.probs or {}).items():
                acc[label] = acc.get(label, 0.0) + float(p)
    out = np.zeros(items.size)
    for j, i in enumerate(items.tolist()):
        acc = sums.get(i, {})
        out[j] = float(bool(acc) and max(acc, key=lambda k: acc[k]) == str(firsts[i].expected))
    return out


# --- per figure: point, paired test ---------------------------------------------------------


def _top_hits(s: Float, share: float) -> Bool:
    ranks = rankdata(-s, method="average")
    return np.asarray(ranks <= share * s.size)


def _hits(c: Compared, y: Float, v: Float, p: Params) -> tuple[Bool, Bool]:
    """(items counted, hits among them) of a share figure."""
    if c.key == "recall":
        return y == 1, v[:, 0] > p.threshold_recall
    if c.key == "top_share":
        return y == 1, _top_hits(v[:, 0], p.top_share)
    if c.key == "fp_per_1000_neg":
        return y == 0, v[:, 0] > p.threshold_fp
    return np.ones(y.size, dtype=bool), v[:, 0] == 1.0  # accuracy


def _columns(c: Compared, y: Float, v: Float, p: Params) -> tuple[Float, Any]:
    if c.key == "ece":
        return ece_columns(y, v[:, 0], p.n_bins)
    if c.key == "brier":
        return mean_columns((v[:, 0] - y) ** 2)
    if c.key == "log_loss":
        return mean_columns(-np.log(np.clip(v[:, 1], 1e-15, 1.0)))
    return mean_columns(v[:, 1])  # mae_level


def _point(c: Compared, y: Float, v: Float, p: Params) -> float | None:
    """The figure of one run on these items."""
    if not y.size:
        return None
    if c.test == "delong":
        return delong(y.astype(np.int64), v[:, 0])[0]
    if c.test == "mcnemar":
        counted, hits = _hits(c, y, v, p)
        n = int(counted.sum())
        return float(hits[counted].sum()) / n * c.scale if n else None
    cols, statistic = _columns(c, y, v, p)
    value = float(statistic(cols.sum(axis=0)[None, :])[0])
    return value if np.isfinite(value) else None


def _paired(c: Compared, y: Float, va: Float, vb: Float, p: Params) -> PairedTest:
    """DeLong or McNemar (the bootstrap's figures go together: ``_block``)."""
    if c.test == "delong":
        return delong_paired(y.astype(np.int64), va[:, 0], vb[:, 0])
    counted, hits_a = _hits(c, y, va, p)
    _, hits_b = _hits(c, y, vb, p)
    return _scaled(mcnemar_paired(hits_a[counted], hits_b[counted]), c.scale)


def _scaled(t: PairedTest, scale: float) -> PairedTest:
    if scale == 1.0:
        return t
    i = t.interval
    return PairedTest(
        None if t.diff is None else t.diff * scale,
        Interval(None if i.low is None else i.low * scale,
                 None if i.high is None else i.high * scale, i.method, i.level),
        t.p_value, t.method, None if t.detectable is None else t.detectable * scale)


def _pair(c: Compared, a: float | None, b: float | None, test: PairedTest | None,
          n: int) -> dict[str, Any]:
    if test is None:
        test = PairedTest(None, Interval(None, None, _METHOD[c.test]), None, _METHOD[c.test],
                          None)
    return {"a": a, "b": b, "diff": test.diff, "interval": test.interval.as_dict(),
            "p_value": test.p_value, "p_adjusted": None, "method": test.method,
            "detectable": test.detectable, "n": n, "verdict": None}


def _once(make: Callable[[], ClusteredBootstrap]) -> Callable[[], ClusteredBootstrap]:
    """``make`` called on first use only (no bootstrap where no figure needs one)."""
    made: list[ClusteredBootstrap] = []

    def boot() -> ClusteredBootstrap:
        if not made:
            made.append(make())
        return made[0]

    return boot


def _subset(parent: Callable[[], ClusteredBootstrap], rows: Bool) -> ClusteredBootstrap:
    return parent().subset(rows)


def _block(cs: Sequence[Compared], y: Float, va: Float, vb: Float, p: Params,
           boot: Callable[[], ClusteredBootstrap]) -> dict[str, Any]:
    """Every compared figure of one item set; the bootstrapped ones in one pass."""
    points = {c.key: (_point(c, y, va, p), _point(c, y, vb, p)) for c in cs}
    tests: dict[str, PairedTest | None] = {}
    resampled = []
    for c in cs:
        a, b = points[c.key]
        if a is None or b is None:
            tests[c.key] = None
        elif c.test == "bootstrap":
            resampled.append(c)
        else:
            tests[c.key] = _paired(c, y, va, vb, p)
    if resampled:
        figures = []
        for c in resampled:
            cols_a, statistic = _columns(c, y, va, p)
            figures.append((cols_a, _columns(c, y, vb, p)[0], statistic))
        tests.update(zip((c.key for c in resampled), boot().paired_many(figures), strict=True))
    return {c.key: _pair(c, *points[c.key], tests[c.key], int(y.size)) for c in cs}


# --- verdicts -----------------------------------------------------------------------------


def num_text(value: float | None, digits: int, *, sign: bool = False) -> str:
    """A compared figure to ``digits`` decimals, ``sign``: with its sign; "-" for None."""
    if value is None:
        return "-"
    return f"{value:+.{digits}f}" if sign else f"{value:.{digits}f}"


def _p_text(p: float) -> str:
    return "p < 0.001" if p < 0.001 else f"p = {p:.2g}"


def verdict_text(c: Compared, pair: Mapping[str, Any], a: str, b: str, *,
                 adjusted_over: int = 1) -> dict[str, Any]:
    """The verdict of one figure: ``{text, real, better}`` (``better``: the better run's name,
    None without a real difference)."""
    diff, p_adj = pair["diff"], pair["p_adjusted"]
    if diff is None or p_adj is None:
        why = (f"not computable on the {pair['n']} question(s) both runs answered (too few, or "
               "only yes or only no among them)" if pair["n"] else
               "no question answered by both runs")
        return {"text": f"no comparison of {c.symbol}: {why}", "real": None, "better": None}
    interval = pair["interval"]
    width = (f" [{num_text(interval['low'], c.digits, sign=True)}, "
             f"{num_text(interval['high'], c.digits, sign=True)}]"
             if interval["low"] is not None and interval["high"] is not None else "")
    method = pair["method"] + (f", {CORRECTION} over {adjusted_over}" if adjusted_over > 1
                               else "")
    figure = (f"Δ{c.symbol} {num_text(diff, c.digits, sign=True)}{width}, {_p_text(p_adj)} "
              f"({method})")
    if p_adj < ALPHA and diff != 0:
        better = a if (diff > 0) == c.higher_better else b
        return {"text": f"{better} {c.better}: {figure}", "real": True, "better": better}
    text = f"no difference beyond noise: {figure}"
    if pair["detectable"] is not None:
        text += (f"; this comparison detects |Δ{c.symbol}| ≥ "
                 f"{num_text(pair['detectable'], c.digits)} with 80% power")
    return {"text": text, "real": False, "better": None}


def _adjust(pairs: Sequence[dict[str, Any]]) -> None:
    for pair, adjusted in zip(pairs, holm([q["p_value"] for q in pairs]), strict=True):
        pair["p_adjusted"] = adjusted


# --- the comparison --------------------------------------------------------------------------


def _matched(ia: _Items, ib: _Items) -> tuple[NDArray[np.intp], NDArray[np.intp]]:
    _, at_a, at_b = np.intersect1d(ia.keys, ib.keys, assume_unique=True, return_indices=True)
    return at_a, at_b


def _kind_questions(ia: _Items, ib: _Items, cs: Sequence[Compared], p: Params
                    ) -> dict[str, dict[str, Any]]:
    at_a, at_b = _matched(ia, ib)
    question, cell = ia.question[at_a], ia.cell[at_a]
    y, decision = ia.y[at_a], ia.decision[at_a]
    va, vb = ia.values[at_a], ib.values[at_b]
    seed = getattr(p, "seed", 0)
    # one bootstrap over the kind's decisions, one per cell: a question asked in every
    # decision (of a cell) shares their resamples (``ClusteredBootstrap.subset``)
    kind_boot = _once(lambda: ClusteredBootstrap(decision, seed=seed))
    cell_boots = {str(name): _once(partial(_subset, kind_boot, cell == name))
                  for name in np.unique(cell)}
    out: dict[str, dict[str, Any]] = {}
    for qid in np.unique(question):
        mask = question == qid
        cells = {}
        for name in np.unique(cell[mask]):
            in_cell = cell == name
            m = mask & in_cell
            cells[str(name)] = _block(cs, y[m], va[m], vb[m], p, _once(
                partial(_subset, cell_boots[str(name)], mask[in_cell])))
        out[str(qid)] = {
            "n": int(mask.sum()), "positives": int(y[mask].sum()),
            "overall": _block(cs, y[mask], va[mask], vb[mask], p,
                              _once(partial(_subset, kind_boot, mask))),
            "cells": cells,
        }
    return out


def _pooled(ia: _Items, ib: _Items, cs: Sequence[Compared], p: Params) -> dict[str, Any]:
    """The kind's figures over all its questions together (``--pooled``), labelled so."""
    at_a, at_b = _matched(ia, ib)
    y, decision = ia.y[at_a], ia.decision[at_a]
    return {"pooled": True, "questions": sorted({str(q) for q in ia.question[at_a]}),
            "n": int(y.size), "positives": int(y.sum()),
            "overall": _block(cs, y, ia.values[at_a], ib.values[at_b], p, _once(
                lambda: ClusteredBootstrap(decision, seed=getattr(p, "seed", 0))))}


def _noise(ia: _Items, ib: _Items, cs: Sequence[Compared], p: Params
           ) -> dict[str, dict[str, Any]] | None:
    """Per question: each figure per replicate of each run (on the matched items), its sd,
    and the largest difference between two replicates of one run."""
    if len(ia.replicates) < 2 or len(ib.replicates) < 2:
        return None
    at_a, at_b = _matched(ia, ib)
    out: dict[str, dict[str, Any]] = {}
    for qid in np.unique(ia.question[at_a]):
        figures: dict[str, Any] = {}
        sel_a, sel_b = at_a[ia.question[at_a] == qid], at_b[ia.question[at_a] == qid]
        for c in cs:
            per_a = _per_replicate(c, ia, sel_a, p)
            per_b = _per_replicate(c, ib, sel_b, p)
            figures[c.key] = _spread(per_a, per_b)
        out[str(qid)] = figures
    return out


def _per_replicate(c: Compared, items: _Items, selected: NDArray[np.intp],
                   p: Params) -> list[float]:
    out = []
    for k in sorted(items.replicates):
        index, values = items.replicates[k]
        keep = np.isin(index, selected)
        value = _point(c, items.y[index[keep]], values[keep], p)
        if value is not None:
            out.append(value)
    return out


def _spread(per_a: Sequence[float], per_b: Sequence[float]) -> dict[str, Any]:
    within = [abs(x - z) for run in (per_a, per_b) for x, z in combinations(run, 2)]
    return {
        "replicates_a": list(per_a), "replicates_b": list(per_b),
        "sd_a": float(np.std(per_a, ddof=1)) if len(per_a) > 1 else None,
        "sd_b": float(np.std(per_b, ddof=1)) if len(per_b) > 1 else None,
        "largest_within": max(within) if within else None,
    }


def compare_rows(rows_a: Sequence[QuestionRow], rows_b: Sequence[QuestionRow], p: Params,
                 *, a: str = "a", b: str = "b", pooled: bool = False) -> dict[str, Any]:
    """The comparison of two runs' rows (``a``, ``b``: their names, as the verdicts say them):
    ``{a, b, matched, only_a, only_b, correction, questions, pooled, verdicts, noise_floor,
    disagreement}``; ``questions`` maps each question id to ``{kind, n, positives, overall:
    {figure: PAIR}, cells: {cell: {figure: PAIR}}}``; with ``pooled`` (the report's
    ``--pooled``), ``pooled`` maps each kind with several questions to its figures over all
    of them (``{pooled: true, questions, n, positives, overall}``), else it is None."""
    keys_a = {(r.decision_key, r.question_id) for r in rows_a}
    keys_b = {(r.decision_key, r.question_id) for r in rows_b}
    questions: dict[str, dict[str, Any]] = {}
    pools: dict[str, dict[str, Any]] = {}
    noise: dict[str, dict[str, Any]] = {}
    kinds_a, kinds_b = _by_kind(rows_a), _by_kind(rows_b)
    for kind in all_kinds():
        cs = COMPARED.get(kind.family)
        ia = _items(kinds_a.get(kind.name, []), kind.family) if cs else None
        ib = _items(kinds_b.get(kind.name, []), kind.family) if cs else None
        if cs is None or ia is None or ib is None:
            continue
        found = _kind_questions(ia, ib, cs, p)
        for qid, section in found.items():
            questions[qid] = {"kind": kind.name, **section}
        if pooled and len(found) > 1:
            pools[kind.name] = _pooled(ia, ib, cs, p)
        noise.update(_noise(ia, ib, cs, p) or {})
    verdicts = _judge(questions, a, b) + _judge_pooled(pools, a, b)
    return {
        "a": a, "b": b, "matched": len(keys_a & keys_b), "only_a": len(keys_a - keys_b),
        "only_b": len(keys_b - keys_a),
        "correction": f"{CORRECTION}: over the questions for each figure overall, over the "
                      "cells of a question for each figure per cell",
        "questions": questions, "pooled": pools or None, "verdicts": verdicts,
        "noise_floor": noise or None,
        "disagreement": disagreement(rows_a, rows_b),
    }


def compared_of(kind: str) -> tuple[Compared, ...]:
    """The compared figures of the kind named ``kind`` (none for an unknown kind)."""
    for k in all_kinds():
        if k.name == kind:
            return COMPARED.get(k.family, ())
    return ()


def _tested(pairs: Sequence[Mapping[str, Any]]) -> int:
    """How many p-values Holm adjusted over (a pair without one is not in the family)."""
    return sum(1 for pair in pairs if pair["p_value"] is not None)


def _judge(questions: dict[str, dict[str, Any]], a: str, b: str) -> list[dict[str, Any]]:
    """Holm-adjust the p-values, write each figure's verdict; the overall verdict lines."""
    by_figure: dict[str, list[dict[str, Any]]] = {}
    for section in questions.values():
        for key, pair in section["overall"].items():
            by_figure.setdefault(f"{section['kind']}.{key}", []).append(pair)
        for key in section["overall"]:
            _adjust([cell[key] for cell in section["cells"].values()])
    for pairs in by_figure.values():
        _adjust(pairs)
    lines = []
    for qid, section in questions.items():
        for c in compared_of(section["kind"]):
            over = _tested(by_figure[f"{section['kind']}.{c.key}"])
            pair = section["overall"][c.key]
            pair["verdict"] = verdict_text(c, pair, a, b, adjusted_over=over)
            lines.append({"question": qid, "figure": c.key, **pair["verdict"]})
            cells = [cell[c.key] for cell in section["cells"].values()]
            for cell_pair in cells:
                cell_pair["verdict"] = verdict_text(c, cell_pair, a, b,
                                                    adjusted_over=_tested(cells))
    return lines


def _judge_pooled(pools: dict[str, dict[str, Any]], a: str, b: str) -> list[dict[str, Any]]:
    """The pooled figures' verdicts (one test per kind and figure: no correction)."""
    lines = []
    for kind, section in pools.items():
        for c in compared_of(kind):
            pair = section["overall"][c.key]
            pair["p_adjusted"] = pair["p_value"]
            pair["verdict"] = verdict_text(c, pair, a, b)
            lines.append({"question": f"{kind} pooled over {len(section['questions'])} "
                                      "questions", "figure": c.key, "pooled": True,
                          **pair["verdict"]})
    return lines


# --- where the answers differ ---------------------------------------------------------------

_Key = tuple[str, int, str]


def _key(r: QuestionRow) -> _Key:
    return (r.decision_key, r.replicate, r.question_id)


def _distance(a: QuestionRow, b: QuestionRow) -> float:
    pa, pb = a.probs or {}, b.probs or {}
    if len(pa) == 2 and pa.keys() == pb.keys():  # yes/no: the usual case, and the fast one
        (k1, v1), (k2, v2) = pa.items()
        return 0.5 * (abs(v1 - pb[k1]) + abs(v2 - pb[k2]))
    if pa.keys() == pb.keys():
        return 0.5 * sum(abs(float(v) - float(pb[k])) for k, v in pa.items())
    return 0.5 * sum(abs(float(pa.get(k, 0.0)) - float(pb.get(k, 0.0)))
                     for k in set(pa) | set(pb))


def _tally(pairs: Sequence[tuple[QuestionRow, QuestionRow, float]]) -> dict[str, Any]:
    n = len(pairs)
    differ = sum(1 for a, b, _ in pairs if a.label != b.label)
    distances = [d for _, _, d in pairs]
    return {"both_answered": n, "differ": differ, "differ_rate": differ / n if n else None,
            "mean_distance": sum(distances) / n if n else None,
            "max_distance": max(distances) if n else None}


def disagreement(rows_a: Sequence[QuestionRow], rows_b: Sequence[QuestionRow],
                 *, largest: int = LARGEST) -> dict[str, Any]:
    """Where two runs' answers to the same questions differ, and by how much: overall, per
    cell (of run A), and the ``largest`` questions furthest apart (replicate by replicate)."""
    by_key = {_key(r): r for r in rows_b if r.answered}
    pairs = [(a, b, _distance(a, b)) for a in rows_a
             if a.answered and (b := by_key.get(_key(a))) is not None]
    cells: dict[str, list[tuple[QuestionRow, QuestionRow, float]]] = {}
    for pair in pairs:
        cells.setdefault(pair[0].cell, []).append(pair)
    furthest = heapq.nsmallest(largest, pairs, key=lambda p: (-p[2], _key(p[0])))
    return {
        "overall": _tally(pairs),
        "cells": {cell: _tally(cells[cell]) for cell in sorted(cells)},
        "largest": [{"decision": a.decision_key, "replicate": a.replicate,
                     "question": a.question_id, "cell": a.cell, "a": a.label, "b": b.label,
                     "p_yes_a": a.p_yes, "p_yes_b": b.p_yes, "distance": d,
                     "state": state_words(a.state_key)} for a, b, d in furthest],
    }
