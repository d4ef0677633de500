"""Figure blocks over report rows (no database): per question, intervals, replicates, the
top-share cap, comparison, expected labels."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from app.engine import Family, parse_question
from app.engine.questions import answer_label
from app.errors import InputError
from app.report import specs
from app.report.figures import Params, choice_figures, noul_figures, score_figures
from app.report.load import QuestionRow
from app.report.sections import figure_block, kind_sections


def _row(key: str, p: float, y: int, rep: int = 0, cell: str = "c",
         question: str = "q") -> QuestionRow:
    return QuestionRow(decision_key=key, replicate=rep, cell=cell, state_key=key, status="done",
                       question_id=question, question_type="noul", labels=("yes", "no"),
                       expected="yes" if y else "no", answered=True, label="yes",
                       p_yes=p, probs={"yes": p, "no": 1 - p})


def _two_questions(n: int = 200, seed: int = 1) -> list[QuestionRow]:
    """``good`` ranks well, ``poor`` barely: each decision asks both, in two cells."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        y = int(rng.random() < 0.3)
        cell = "a" if i % 2 else "b"
        good = float(np.clip(0.5 + (0.25 if y else -0.25) + rng.normal(0, 0.2), 0, 1))
        poor = float(np.clip(0.5 + (0.05 if y else -0.05) + rng.normal(0, 0.3), 0, 1))
        rows += [_row(f"d{i}", good, y, cell=cell, question="good"),
                 _row(f"d{i}", poor, y, cell=cell, question="poor")]
    return rows


def test_figures_are_per_question_and_pooled_only_when_asked() -> None:
    rows = _two_questions()
    plain = kind_sections(rows, noul_figures, Params())
    assert plain["pooled"] is None and list(plain["questions"]) == ["good", "poor"]
    good = plain["questions"]["good"]["overall"]["figures"]["auc"]
    poor = plain["questions"]["poor"]["overall"]["figures"]["auc"]
    assert good > 0.9 > 0.7 > poor
    y = [1 if r.expected == "yes" else 0 for r in rows if r.question_id == "good"]
    s = [r.p_yes for r in rows if r.question_id == "good"]
    assert good == pytest.approx(roc_auc_score(y, s))
    asked = kind_sections(rows, noul_figures, Params(), pooled=True)
    pooled = asked["pooled"]["overall"]
    assert pooled["pooled"] is True and poor < pooled["figures"]["auc"] < good
    assert not asked["questions"]["good"]["overall"]["pooled"]
    assert set(asked["questions"]["good"]["cells"]) == {"a", "b"}
    # one question: its figures are the whole, never called pooled
    one = kind_sections([r for r in rows if r.question_id == "good"], noul_figures, Params(),
                        pooled=True)
    assert one["pooled"] is None


def _every_block(section: dict) -> list[dict]:
    return [section["overall"], *section["cells"].values()]


@pytest.mark.parametrize("replicates", [1, 3])
def test_every_figure_of_every_block_has_an_interval(replicates: int) -> None:
    rows = [r if replicates == 1 else replace(r, replicate=k)
            for r in _two_questions(80) for k in range(replicates)]
    sections = kind_sections(rows, noul_figures, Params(), pooled=True)
    blocks = [b for sec in [*sections["questions"].values(), sections["pooled"]]
              for b in _every_block(sec)]
    for block in blocks:
        assert set(block["intervals"]) == set(specs.SPECS[Family.BINARY])
        for key, interval in block["intervals"].items():
            s = specs.spec(Family.BINARY, key)
            # a perfectly separated cell: DeLong has no variance, the AUC's interval is exact
            fallback = ("exact binomial",) if key == "auc" else ()
            assert interval["method"] in (s.method.value, *fallback), key
            value = block["figures"][key]
            if s.has_interval and value is not None and key != "fp_per_100_states":
                assert interval["low"] <= value + 1e-9 and value - 1e-9 <= interval["high"], key
            if not s.has_interval:
                assert interval["low"] is None
    overall = sections["questions"]["good"]["overall"]
    auc = overall["intervals"]["auc"]
    assert auc["method"] == "DeLong" and 0 < auc["high"] - auc["low"] < 0.2
    assert overall["intervals"]["recall"]["method"] == "Wilson"
    assert overall["intervals"]["ece"]["method"] == "bootstrap"


def test_same_seed_same_intervals_another_seed_others() -> None:
    rows = _two_questions(120)
    a = figure_block(rows, noul_figures, Params())["intervals"]
    b = figure_block(rows, noul_figures, Params())["intervals"]
    c = figure_block(rows, noul_figures, Params(seed=7))["intervals"]
    assert a == b
    assert a["ece"] != c["ece"] and a["auc"] == c["auc"]


def test_replicates_are_averaged_and_their_noise_named_apart() -> None:
    y = [1, 0, 1, 0, 1, 0]
    reps = [[0.9, 0.2, 0.8, 0.1, 0.6, 0.5], [0.4, 0.5, 0.8, 0.1, 0.7, 0.3],
            [0.9, 0.95, 0.3, 0.1, 0.5, 0.4]]
    rows = [_row(f"d{i}", p, y[i], rep) for rep, ps in enumerate(reps) for i, p in enumerate(ps)]
    block = figure_block(rows, noul_figures, Params())
    mean = np.mean(reps, axis=0)
    aucs = [roc_auc_score(y, ps) for ps in reps]
    assert block["replicates"] == 3
    assert block["figures"]["auc"] == pytest.approx(roc_auc_score(y, mean))
    assert block["figures"]["n"] == 6  # one answer per decision, not one per replicate
    assert block["draw_sd"]["auc"] == pytest.approx(np.std(aucs, ddof=1))
    assert "n" not in block["draw_sd"]


def test_top_share_keeps_its_cap() -> None:
    # 40 answers, 5% -> 2 places; 6 positives, the two best on top
    rows = [_row(f"p{i}", 0.99 - i / 100, 1) for i in range(6)]
    rows += [_row(f"n{i}", 0.5 - i / 100, 0) for i in range(34)]
    f = figure_block(rows, noul_figures, Params())["figures"]
    assert (f["top_share_hits"], f["top_share_cap"], f["positives"]) == (2, 2, 6)
    from app.report.figure_text import value_text
    text = value_text(Family.BINARY, "top_share", {"figures": f, "intervals": {}},
                      {"top_share": 0.05})
    assert text.startswith("2/6 (33.3%") and text.endswith("the most possible at 5% of 40")


def _choice(key: str, label: str, p: float, rep: int) -> QuestionRow:
    probs = {"A": p, "B": 1 - p} if label == "A" else {"A": 1 - p, "B": p}
    return QuestionRow(decision_key=key, replicate=rep, cell="c", state_key=key, status="done",
                       question_id="pick", question_type="choice", labels=("A", "B"),
                       expected="A", answered=True, label=label, probs=probs)


def test_choice_replicates_take_the_argmax_of_the_mean_probabilities() -> None:
    # d0: A at 0.9, then B at 0.6 -> mean A 0.65: correct; d1: B at 0.9, A at 0.6 -> wrong
    rows = [_choice("d0", "A", 0.9, 0), _choice("d0", "B", 0.6, 1),
            _choice("d1", "B", 0.9, 0), _choice("d1", "A", 0.6, 1)]
    block = figure_block(rows, choice_figures, Params())
    assert block["figures"]["accuracy"] == 0.5 and block["figures"]["n"] == 2
    assert block["figures"]["log_loss"] == pytest.approx(-np.mean(np.log([0.65, 0.35])))
    assert block["intervals"]["accuracy"]["method"] == "bootstrap"


def test_score_figures_have_intervals() -> None:
    rows = [QuestionRow(decision_key=f"d{i}", replicate=0, cell="c", state_key="s",
                        status="done", question_id="lvl", question_type="score",
                        labels=("1", "2", "3"), expected="2", answered=True,
                        label=str(1 + i % 3), probs={"1": 0.2, "2": 0.5, "3": 0.3},
                        expected_level=1.0 + (i % 3) * 0.5) for i in range(30)]
    block = figure_block(rows, score_figures, Params())
    assert block["figures"]["accuracy"] == pytest.approx(1 / 3)
    iv = block["intervals"]["mae_level"]
    assert iv["low"] <= block["figures"]["mae_level"] <= iv["high"]


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


def test_one_ranking_gives_the_figures_of_the_separate_functions() -> None:
    from app.report import scores as m

    rng = np.random.default_rng(5)
    y = (rng.random(500) < 0.2).astype(int)
    s = np.round(rng.random(500) * 0.5 + 0.4 * y, 2)  # rounded: many ties
    r = m.ranking(y, s, 0.05)
    assert r.auc == pytest.approx(roc_auc_score(y, s), abs=1e-12)
    assert (r.top_hits, r.top_share) == m.top_share(y, s, 0.05)
    assert (r.rank_median, r.rank_worst) == m.rank_summary(y, s)
    np.testing.assert_array_equal(r.positive_ranks, m.positive_rank_percentiles(y, s))


def test_a_calibrated_row_is_the_row_with_another_p_yes() -> None:
    from dataclasses import replace

    from app.report.document import with_p_yes

    row = _row("d", 0.2, 1)
    assert with_p_yes(row, 0.7) == replace(row, p_yes=0.7) and row.p_yes == 0.2
