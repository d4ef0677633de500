"""Figure blocks over report rows (no database): replicates, comparison, expected labels."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from app.engine import parse_question
from app.engine.questions import answer_label
from app.errors import InputError
from app.report.figures import Params, figure_block, noul_figures
from app.report.load import QuestionRow


def _row(key: str, p: float, y: int, rep: int = 0, cell: str = "c") -> QuestionRow:
    return QuestionRow(decision_key=key, replicate=rep, cell=cell, state_key=key, status="done",
                       question_id="q", question_type="noul", labels=("yes", "no"),
                       expected="yes" if y else "no", answered=True, label="yes",
                       p_yes=p, probs={"yes": p, "no": 1 - p})


def test_replicates_give_mean_and_sample_sd() -> None:
    y = [1, 0, 1, 0]
    reps = [[0.9, 0.2, 0.8, 0.1], [0.4, 0.5, 0.8, 0.1], [0.9, 0.95, 0.3, 0.1]]
    rows = [_row(f"d{i}", p, y[i], rep) for rep, ps in enumerate(reps) for i, p in enumerate(ps)]
    block = figure_block(rows, noul_figures, Params())
    aucs = [roc_auc_score(y, ps) for ps in reps]
    assert block["replicates"] == 3
    assert block["figures"]["auc"] == pytest.approx(np.mean(aucs))
    assert block["std"]["auc"] == pytest.approx(np.std(aucs, ddof=1))
    assert block["figures"]["n"] == 4 and block["std"]["n"] == 0.0


@pytest.mark.parametrize(("given", "qtype", "expected"), [
    ("YES", "noul", "yes"), (True, "noul", "yes"), ("false", "noul", "no"), ("maybe", "noul", None),
    ("B", "choice", "B"), ("green", "choice", "B"), ("purple", "choice", None),
    (None, "choice", None),
])
def test_expected_values_become_canvas_labels(given: object, qtype: str,
                                              expected: str | None) -> None:
    """The report reads an expected value as submit does (one parser, one set of yes/no
    words)."""
    spec = ({"type": "noul", "instructions": "?"} if qtype == "noul" else
            {"type": qtype, "criteria": {"red": None, "green": None}})
    question = parse_question("q", spec)
    try:
        label = answer_label(question, given)
    except InputError:
        label = None
    assert label == expected
