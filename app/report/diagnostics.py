"""What went wrong, per cell: unanswered questions, failures by kind, low-mass draws, draws.

A draw is one question read once (a joint read gives one per question of its canvas); a read
is a request sent to the model server. A cell is flagged when one of its rates (unanswered,
failed attempts, draws with label mass below 0.5, draws whose argmax is not a label) stands
far above the rate of the other cells: a one-sided exact binomial test, Bonferroni-corrected
over the cells (``metrics.flag_outlier_rates``). The field report's 56 unanswered of ~1,653
in one cell against 0 elsewhere is such a cell.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from app.report import scores as m
from app.report.figures import by_cell, count_values, quantiles
from app.report.load import CellCounts, QuestionRow

__all__ = ["FLAG_RATES", "diagnostics"]

#: flag name -> (numerator, denominator) keys of a cell's diagnostics
FLAG_RATES: dict[str, tuple[str, str]] = {
    "unanswered": ("unanswered", "questions"),
    "failures": ("failed_attempts", "attempts"),
    "low_label_mass": ("low_mass_draws", "mass_draws"),
    "argmax_not_label": ("argmax_not_label_draws", "label_draws"),
}
_STDERR_Q = {"p50": 0.5, "p90": 0.9, "p99": 0.99, "max": 1.0}


def diagnostics(
    rows: Sequence[QuestionRow], cells: Mapping[str, CellCounts], alpha: float = 0.01
) -> dict[str, Any]:
    """``{"overall": {...}, "cells": {cell: {..., "flags": [...]}}, "flagged": [...]}``."""
    grouped = by_cell(rows)
    names = sorted(set(grouped) | set(cells))
    per_cell = {c: _cell_diag(grouped.get(c, []), cells.get(c, CellCounts())) for c in names}
    total = CellCounts(
        draw_rows=sum(c.draw_rows for c in cells.values()),
        low_mass_draws=sum(c.low_mass_draws for c in cells.values()),
        argmax_not_label_draws=sum(c.argmax_not_label_draws for c in cells.values()),
        attempts=sum(c.attempts for c in cells.values()),
        failures=_sum_failures(cells.values()),
        mass_draws=sum(_known(c.mass_draws, c) for c in cells.values()),
        label_draws=sum(_known(c.label_draws, c) for c in cells.values()),
    )
    flagged = _flag_cells(per_cell, alpha)
    return {"overall": _cell_diag(rows, total), "cells": per_cell, "flagged": flagged}


def _sum_failures(cells: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in cells:
        for kind, n in (c.failures or {}).items():
            out[kind] = out.get(kind, 0) + n
    return dict(sorted(out.items()))


def _known(count: int | None, cell: CellCounts) -> int:
    """Draws whose diagnostic is known (every draw, unless the cell says otherwise)."""
    return cell.draw_rows if count is None else count


def _rate(num: int, den: int) -> float | None:
    return num / den if den else None


def _cell_diag(rows: Sequence[QuestionRow], counts: CellCounts) -> dict[str, Any]:
    answered = [r for r in rows if r.answered]
    failures = dict(sorted((counts.failures or {}).items()))
    failed = sum(failures.values())
    decisions = {(r.decision_key, r.replicate): r.status for r in rows}
    return {
        "questions": len(rows), "answered": len(answered),
        "unanswered": sum(r.unanswered for r in rows),
        "unanswered_rate": _rate(sum(r.unanswered for r in rows), len(rows)),
        "in_flight": sum(r.in_flight for r in rows),
        "decision_statuses": count_values(decisions.values()),
        "draw_rows": counts.draw_rows, "low_mass_draws": counts.low_mass_draws,
        # shares over the draws whose diagnostic is known: unknown is not "fine" (None: "-")
        "mass_draws": _known(counts.mass_draws, counts),
        "low_mass_share": _rate(counts.low_mass_draws, _known(counts.mass_draws, counts)),
        "label_draws": _known(counts.label_draws, counts),
        "argmax_not_label_draws": counts.argmax_not_label_draws,
        "argmax_not_label_share": _rate(counts.argmax_not_label_draws,
                                        _known(counts.label_draws, counts)),
        "attempts": counts.attempts, "failed_attempts": failed,
        "failure_rate": _rate(failed, counts.attempts), "failures": failures,
        "draws_mean": _mean([r.draws for r in answered if r.draws is not None]),
        "draws": count_values(r.draws for r in answered),
        "stop_reasons": count_values(r.stop_reason for r in answered),
        "stderr": quantiles([r.stderr for r in answered if r.stderr is not None], _STDERR_Q),
        "flags": [],
    }


def _mean(values: Sequence[int]) -> float | None:
    return sum(values) / len(values) if values else None


def _flag_cells(per_cell: dict[str, dict[str, Any]], alpha: float) -> list[dict[str, Any]]:
    flagged: list[dict[str, Any]] = []
    names = list(per_cell)
    for flag, (num_key, den_key) in FLAG_RATES.items():
        nums = [int(per_cell[c][num_key]) for c in names]
        dens = [int(per_cell[c][den_key]) for c in names]
        results = m.flag_outlier_rates(nums, dens, alpha)
        for cell, num, den, (hit, p_value) in zip(names, nums, dens, results, strict=True):
            if hit:
                per_cell[cell]["flags"].append(flag)
                flagged.append({"cell": cell, "flag": flag, "count": num, "total": den,
                                "rate": _rate(num, den),
                                "others_rate": _rate(sum(nums) - num, sum(dens) - den),
                                "p_value": p_value})
    return flagged
