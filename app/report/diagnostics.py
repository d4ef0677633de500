"""What went wrong with the reads, per cell: unanswered questions, the read's failures by kind,
low-mass draws, draws.

A draw is one question read once (a joint read gives one per question of its canvas); a read
is a request sent to the model server. Only the read's own outcomes are a cell's
(``app.errors.OutcomeClass``): a worker lost, an interruption, a pause or an outage is the
run's, reported on its own (``app.store.infrastructure``), never here.

A cell is flagged when one of its rates over DECISIONS stands far above the rate of the other
cells: decisions the read failed (rejected, failed for a read's reason, a question refused),
decisions with an answer of label mass below 0.5, decisions with an answer whose argmax is not
a label. Decisions ended by the infrastructure, cancelled or still open are not counted; the
replicate copies of one rejected line are one decision. The test: one-sided exact binomial
against the other cells' pooled rate, Holm-corrected over the cells
(``scores.flag_outlier_rates``). The field report's 56 unanswered of ~1,653 in one cell
against 0 elsewhere is such a cell.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from app.errors import OutcomeClass, outcome_class
from app.report import scores as m
from app.report.figures import by_cell, count_values, quantiles
from app.report.load import CellCounts, QuestionRow
from app.store.records import DecisionStatus
from app.store.status_sql import LOW_MASS

__all__ = ["FLAG_METHOD", "FLAG_RATES", "diagnostics", "read_decisions"]

#: flag name -> (numerator, denominator) keys of a cell's diagnostics: decisions, never
#: attempts or draws
FLAG_RATES: dict[str, tuple[str, str]] = {
    "read_failures": ("read_failed_decisions", "read_decisions"),
    "low_label_mass": ("low_mass_decisions", "decisions_with_mass"),
    "argmax_not_label": ("argmax_not_label_decisions", "decisions_with_argmax"),
}
#: How a cell is flagged, as the report names it.
FLAG_METHOD = ("one-sided exact binomial test of each cell's rate against the rate of the "
               "other cells together, over decisions, Holm-corrected over the cells")
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
    return {"overall": _cell_diag(rows, total), "cells": per_cell, "flagged": flagged,
            "flag_method": f"{FLAG_METHOD} (alpha {alpha:g})"}


def _sum_failures(cells: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in cells:
        for kind, n in (c.failures or {}).items():
            out[kind] = out.get(kind, 0) + n
    return dict(sorted(out.items()))


def _read_failures(failures: Mapping[str, int] | None) -> dict[str, int]:
    """The read's own failed attempts by kind (the infrastructure's are not a cell's)."""
    return {k: n for k, n in sorted((failures or {}).items())
            if outcome_class(k) is OutcomeClass.READ}


def read_decisions(rows: Sequence[QuestionRow]) -> dict[str, int]:
    """A cell's decisions as the flags count them: the read decided, the read failed, with a
    low-mass answer, with an answer whose argmax is not a label, and the denominators of the
    last two. A decision is (line, replicate), except that the replicate copies of a rejected
    line are one (rejected once, at submit); one ended by the infrastructure (its retries
    spent on a worker lost, an outage...), cancelled or still open is not the read's."""
    decisions: dict[tuple[str, int], list[QuestionRow]] = {}
    for r in rows:
        replicate = -1 if r.status == DecisionStatus.REJECTED else r.replicate
        decisions.setdefault((r.decision_key, replicate), []).append(r)
    out = dict.fromkeys(("read_decisions", "read_failed_decisions", "low_mass_decisions",
                         "decisions_with_mass", "argmax_not_label_decisions",
                         "decisions_with_argmax"), 0)
    for questions in decisions.values():
        first = questions[0]
        if not _read_decided(first):
            continue
        out["read_decisions"] += 1
        out["read_failed_decisions"] += any(q.unanswered for q in questions)
        masses = [q.label_mass for q in questions if q.label_mass is not None]
        out["decisions_with_mass"] += bool(masses)
        out["low_mass_decisions"] += any(mass < LOW_MASS for mass in masses)
        argmax = [q.argmax_is_label for q in questions if q.argmax_is_label is not None]
        out["decisions_with_argmax"] += bool(argmax)
        out["argmax_not_label_decisions"] += not all(argmax)
    return out


def _read_decided(row: QuestionRow) -> bool:
    """The decision ended, and not by the infrastructure (nor cancelled)."""
    if row.status in (DecisionStatus.DONE, DecisionStatus.REJECTED):
        return True
    return (row.status == DecisionStatus.FAILED
            and outcome_class(row.error_kind or "") is OutcomeClass.READ)


def _known(count: int | None, cell: CellCounts) -> int:
    """Draws whose diagnostic is known (every draw, unless the cell says otherwise)."""
    return cell.draw_rows if count is None else count


def _rate(num: int, den: int) -> float | None:
    return num / den if den else None


def _cell_diag(rows: Sequence[QuestionRow], counts: CellCounts) -> dict[str, Any]:
    answered = [r for r in rows if r.answered]
    failures = _read_failures(counts.failures)
    failed = sum(failures.values())
    read_attempts = counts.attempts - sum((counts.failures or {}).values()) + failed
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
        # attempts the read decided (the infrastructure's are the run's: ``infrastructure``)
        "attempts": read_attempts, "failed_attempts": failed,
        "failure_rate": _rate(failed, read_attempts), "failures": failures,
        **read_decisions(rows),
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
