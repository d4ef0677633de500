"""Two runs of the same decisions side by side, figure by figure, per cell, with the difference.

Rows are matched by (decision key, replicate, question id); figures of both runs are computed
on the matched rows only, so a difference is never an artefact of different coverage. The
difference is ``a - b``.

Where they disagree (``disagreement``): over the questions both runs answered, per cell and
overall, how many got another answer label, and how far apart the two answers' probabilities
are (total variation distance: half the summed absolute difference per label; for yes/no,
the difference of P(yes)); and the questions furthest apart. Two answer sources on the same
decisions (dreads' reads against vLLM's own reader, say) are compared this way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from app.engine import all_kinds
from app.report.figures import Params, by_cell, figures_of, typed_rows
from app.report.load import QuestionRow
from app.report.review import state_words
from app.report.sections import figure_block

__all__ = ["compare_rows", "diff_figures", "disagreement"]

#: questions listed in ``disagreement``'s ``largest``
LARGEST = 10

_Key = tuple[str, int, str]


def _key(r: QuestionRow) -> _Key:
    return (r.decision_key, r.replicate, r.question_id)


def diff_figures(a: dict[str, Any], b: dict[str, Any]) -> dict[str, float | None]:
    """``a - b`` for every numeric figure both have (None where either is missing)."""
    out: dict[str, float | None] = {}
    for name, va in a.items():
        vb = b.get(name)
        numeric = isinstance(va, int | float) and isinstance(vb, int | float)
        out[name] = float(va - vb) if numeric else None
    return out


def compare_rows(
    rows_a: Sequence[QuestionRow], rows_b: Sequence[QuestionRow], p: Params
) -> dict[str, Any]:
    """Side-by-side figures of two runs on their matched rows, overall and per cell of run A."""
    keys_a = {_key(r) for r in rows_a}
    keys_b = {_key(r) for r in rows_b}
    matched = keys_a & keys_b
    cells = {_key(r): r.cell for r in rows_a}
    a = [r for r in rows_a if _key(r) in matched]
    # Run B's rows are grouped under run A's cells so the same decisions line up.
    b = [_recell(r, cells[_key(r)]) for r in rows_b if _key(r) in matched]
    out: dict[str, Any] = {
        "matched": len(matched), "only_a": len(keys_a - keys_b), "only_b": len(keys_b - keys_a),
        "disagreement": disagreement(a, b),
    }
    for kind in all_kinds():
        name, fn = kind.name, figures_of(kind)
        ta, tb = typed_rows(a, name), typed_rows(b, name)
        cells_a, cells_b = by_cell(ta), by_cell(tb)
        out[name] = {
            "overall": _pair(ta, tb, fn, p),
            "cells": {c: _pair(cells_a[c], cells_b.get(c, []), fn, p) for c in cells_a},
        }
    return out


def _recell(r: QuestionRow, cell: str) -> QuestionRow:
    return r if r.cell == cell else replace(r, cell=cell)


def _pair(
    a: Sequence[QuestionRow], b: Sequence[QuestionRow], fn: Any, p: Params
) -> dict[str, Any]:
    block_a = figure_block(a, fn, p)
    block_b = figure_block(b, fn, p)
    return {"a": block_a, "b": block_b,
            "diff": diff_figures(block_a["figures"], block_b["figures"])}


def _distance(a: QuestionRow, b: QuestionRow) -> float:
    pa, pb = a.probs or {}, b.probs or {}
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
    cell (of run A), and the ``largest`` questions furthest apart."""
    by_key = {_key(r): r for r in rows_b if r.answered}
    pairs = [(a, by_key[_key(a)], _distance(a, by_key[_key(a)]))
             for a in rows_a if a.answered and _key(a) in by_key]
    cells: dict[str, list[tuple[QuestionRow, QuestionRow, float]]] = {}
    for pair in pairs:
        cells.setdefault(pair[0].cell, []).append(pair)
    furthest = sorted(pairs, key=lambda p: (-p[2], _key(p[0])))[:largest]
    return {
        "overall": _tally(pairs),
        "cells": {cell: _tally(cells[cell]) for cell in sorted(cells)},
        "largest": [{"decision": a.decision_key, "replicate": a.replicate,
                     "question": a.question_id, "cell": a.cell, "a": a.label, "b": b.label,
                     "p_yes_a": a.p_yes, "p_yes_b": b.p_yes, "distance": d,
                     "state": state_words(a.state_key)} for a, b, d in furthest],
    }
