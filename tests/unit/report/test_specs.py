"""The figure table: every figure a figure function returns has a spec, and every spec a
figure; a typo'd key fails loudly."""

from __future__ import annotations

import pytest

from app.engine import Family
from app.report import specs
from app.report.figures import Params, choice_figures, noul_figures, score_figures
from app.report.load import QuestionRow


def _row(qtype: str, labels: tuple[str, ...], expected: str, label: str,
         p: float) -> QuestionRow:
    probs = {k: (p if k == label else (1 - p) / (len(labels) - 1)) for k in labels}
    return QuestionRow(decision_key="d", replicate=0, cell="c", state_key="s", status="done",
                       question_id="q", question_type=qtype, labels=labels, expected=expected,
                       answered=True, label=label, p_yes=probs.get("yes"), probs=probs,
                       expected_level=1.0)


@pytest.mark.parametrize(("family", "fn", "row"), [
    (Family.BINARY, noul_figures, _row("noul", ("yes", "no"), "yes", "yes", 0.9)),
    (Family.NOMINAL, choice_figures, _row("choice", ("A", "B"), "A", "A", 0.8)),
    (Family.ORDINAL, score_figures, _row("score", ("1", "2", "3"), "2", "2", 0.7)),
])
def test_every_computed_figure_has_a_spec_and_back(family: Family, fn: object,
                                                   row: QuestionRow) -> None:
    figures = fn([row], Params())  # type: ignore[operator]
    specs.check_keys(family, figures)  # raises on any difference


def test_a_typo_fails_loudly() -> None:
    with pytest.raises(KeyError, match="recal"):
        specs.spec(Family.BINARY, "recal")
    with pytest.raises(KeyError, match="not specified"):
        specs.check_keys(Family.BINARY, [*specs.SPECS[Family.BINARY], "recal"])


def test_rates_name_their_counts_and_intervals_their_method() -> None:
    for family in specs.SPECS:
        keys = set(specs.SPECS[family])
        for s in specs.specs_of(family):
            if s.kind is specs.FigureKind.RATE:
                assert s.hits in keys and s.total in keys, s.key
                assert s.method is specs.Method.WILSON
            if s.kind is specs.FigureKind.COUNT:
                assert not s.has_interval, s.key
            if s.kind is specs.FigureKind.AUC:
                assert s.method is specs.Method.DELONG


def test_columns_and_titles_come_from_the_table() -> None:
    params = {"threshold_recall": 0.3, "threshold_fp": 0.7, "top_share": 0.05}
    assert specs.title(Family.BINARY, "recall", params) == "recall >0.30"
    assert specs.title(Family.BINARY, "top_share", params) == "in top 5%"
    parts = dict(specs.part_columns(Family.BINARY))
    assert "auc" in parts[specs.RANKING] and "recall" in parts[specs.THRESHOLDS]
    assert "auc" in specs.compared(Family.BINARY)
    assert "accuracy" in specs.headline_keys(Family.NOMINAL)
