"""The per-cell flag counts the read's failures in decisions: a rejected line under replicates is
one, a decision the infrastructure ended is none of a cell's, and Holm's correction keeps the
family-wise error over the cells."""

from __future__ import annotations

from typing import Any

from app.report import scores as m
from app.report.diagnostics import diagnostics, read_decisions
from app.report.load import CellCounts, QuestionRow


def _row(key: str, *, cell: str = "c", rep: int = 0, status: str = "done",
         answered: bool = True, mass: float | None = 0.95, error: str | None = None,
         qid: str = "q", argmax: bool | None = True) -> QuestionRow:
    answer: dict[str, Any] = ({"label": "yes", "p_yes": 0.8, "probs": {"yes": 0.8, "no": 0.2},
                               "label_mass": mass, "argmax_is_label": argmax}
                              if answered else {})
    return QuestionRow(decision_key=key, replicate=rep, cell=cell, state_key=key, status=status,
                       question_id=qid, question_type="noul", labels=("yes", "no"),
                       expected="yes", answered=answered, error_kind=error, **answer)


def test_a_rejected_line_under_five_replicates_is_one_decision() -> None:
    rows = [_row(f"d{i}", rep=r) for i in range(10) for r in range(5)]
    rows += [_row("bad", rep=r, status="rejected", answered=False, error="rejected")
             for r in range(5)]
    counts = read_decisions(rows)
    assert (counts["read_failed_decisions"], counts["read_decisions"]) == (1, 51)


def test_decisions_the_infrastructure_ended_or_still_open_are_not_the_reads() -> None:
    rows = [_row("ok"),
            _row("outage", status="failed", answered=False, error="server_error"),
            _row("lost", status="failed", answered=False, error="worker_lost"),
            _row("cancelled", status="cancelled", answered=False),
            _row("open", status="pending", answered=False),
            _row("malformed", status="failed", answered=False, error="malformed_response"),
            _row("poison", status="failed", answered=False, error="poison")]
    counts = read_decisions(rows)
    assert (counts["read_failed_decisions"], counts["read_decisions"]) == (2, 3)


def test_a_refused_question_fails_its_decision_once_and_mass_counts_per_decision() -> None:
    rows = [_row("two", qid="a", mass=0.3, argmax=False), _row("two", qid="b", mass=0.2),
            _row("refused", qid="a"), _row("refused", qid="b", answered=False),
            _row("unknown", mass=None, argmax=None)]
    counts = read_decisions(rows)
    assert counts == {"read_decisions": 3, "read_failed_decisions": 1,
                      "low_mass_decisions": 1, "decisions_with_mass": 2,
                      "argmax_not_label_decisions": 1, "decisions_with_argmax": 2}


def test_retries_and_infrastructure_attempts_do_not_flag_a_cell() -> None:
    """The cell that was running when a worker died has many failed attempts, all the
    infrastructure's: nothing is flagged, and its failures by kind are the read's only."""
    rows = [_row(f"{cell}{i}", cell=cell) for cell in "abcd" for i in range(100)]
    cells = {c: CellCounts(attempts=100, failures={}) for c in "bcd"}
    cells["a"] = CellCounts(attempts=228, failures={"worker_lost": 78, "cancelled": 50})
    diag = diagnostics(rows, cells)
    assert diag["flagged"] == []
    assert diag["cells"]["a"]["failures"] == {} and diag["cells"]["a"]["attempts"] == 100


def test_a_cell_whose_reads_are_worse_is_flagged_over_decisions() -> None:
    rows = [_row(f"{cell}{i}", cell=cell, mass=0.2 if cell == "d" and i < 20 else 0.95)
            for cell in "abcd" for i in range(100)]
    diag = diagnostics(rows, {c: CellCounts() for c in "abcd"})
    assert [(f["cell"], f["flag"], f["count"], f["total"]) for f in diag["flagged"]] == [
        ("d", "low_label_mass", 20, 100)]
    assert "Holm" in diag["flag_method"]


def test_holm_steps_down_from_the_smallest_p_value() -> None:
    # alpha 0.05 over 4: 0.001 <= 0.0125, 0.01 <= 0.0167, then 0.03 > 0.025 stops: 0.04 kept
    assert m.holm_reject([0.04, 0.01, 0.03, 0.001], 0.05) == [False, True, False, True]
    # Bonferroni would keep the second (0.015 > 0.0125); Holm rejects it
    assert m.holm_reject([0.001, 0.015, 0.5, 0.9], 0.05) == [True, True, False, False]
    assert m.holm_reject([], 0.05) == []
