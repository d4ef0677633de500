"""The reviewer's lists (missed positives, top false positives) and the headline's words."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from app.report.figures import Params, noul_figures
from app.report.headline import headline, headline_items, headline_line
from app.report.load import QuestionRow
from app.report.review import FALSE_POSITIVES_SHOWN, review, state_words
from app.report.sections import figure_block

PARAMS = {"threshold_recall": 0.30, "threshold_fp": 0.70, "top_share": 0.05}
DIAG = {"questions": 8, "answered": 7, "unanswered": 1, "in_flight": 0, "attempts": 9,
        "failed_attempts": 2, "decision_statuses": {"done": 7, "failed": 1}, "mass_draws": 20,
        "low_mass_draws": 3}


def _row(key: str, p: float | None, y: int, state: object = "a state") -> QuestionRow:
    return QuestionRow(decision_key=key, replicate=0, cell="c", status="done",
                       state_key=json.dumps(state, sort_keys=True), question_id="q",
                       question_type="noul", labels=("yes", "no"),
                       expected="yes" if y else "no", answered=p is not None, p_yes=p,
                       label_mass=0.9)


def test_missed_positives_are_all_listed_lowest_first() -> None:
    rows = [_row("hit", 0.9, 1), _row("m2", 0.3, 1), _row("m1", 0.05, 1), _row("m3", 0.2, 1),
            _row("lost", None, 1), _row("neg", 0.1, 0)]
    missed = review(rows, Params())["missed_positives"]
    # 0.30 is not above the recall threshold: missed; the unanswered one is counted elsewhere
    assert missed["total"] == 3
    assert [i["decision"] for i in missed["items"]] == ["m1", "m3", "m2"]
    assert missed["items"][0] == {"decision": "m1", "replicate": 0, "question": "q",
                                  "cell": "c", "p_yes": 0.05, "label_mass": 0.9,
                                  "state": "a state"}


def test_false_positives_highest_first_capped_with_the_total() -> None:
    rows = [_row(f"n{i:02d}", 0.71 + i / 200, 0) for i in range(30)] + [_row("ok", 0.7, 0)]
    listed = review(rows, Params())["false_positives"]
    assert listed["total"] == 30 and len(listed["items"]) == FALSE_POSITIVES_SHOWN
    p = [i["p_yes"] for i in listed["items"]]
    assert p == sorted(p, reverse=True) and listed["items"][0]["decision"] == "n29"


@pytest.mark.parametrize(("state", "words"), [
    ("one two  three", "one two three"),
    (" ".join(f"w{i}" for i in range(20)), " ".join(f"w{i}" for i in range(12)) + " …"),
    ({"a": "<b>"}, '{"a": "<b>"}'),
])
def test_state_words_are_the_first_twelve(state: object, words: str) -> None:
    assert state_words(json.dumps(state)) == words


def test_headline_gives_counts_beside_rates() -> None:
    rows = [_row("p1", 0.9, 1), _row("p2", 0.2, 1), _row("n1", 0.8, 0), _row("n2", 0.1, 0)]
    block = figure_block(rows, noul_figures, Params())
    run = {"name": "r", "settings": {"model": "m", "layout": "vllm", "read_mode": "isolated",
                                     "policy": "agree", "max_draws": 4},
           "engine": "vllm", "upstream": "http://gpu:8000", "simulator": False, "replicates": 1}
    h = headline(run, PARAMS, {"noul": {"q": block}}, DIAG, calibrated_ece={"q": 0.01})
    items = {i.key: i.value for i in headline_items(h)}
    assert items["recall"] == "1/2 (50%, 95% CI 9.45-90.5%)"
    assert items["false_positives"].startswith("1 (")
    assert items["ece"].endswith("0.01 calibrated")
    assert (items["unanswered"], items["failed"], items["low_mass"]) == (
        "1/8", "2/9", "3/20 draws")
    assert headline_line(h).startswith("AUC 0.75 [")
    assert "; recall >0.30 1/2 (50%, 95% CI 9.45-90.5%); in top 5% " in headline_line(h)


def test_headline_shows_each_question_and_says_partial() -> None:
    rows = [_row("p1", 0.9, 1), _row("p2", 0.2, 1), _row("n1", 0.8, 0), _row("n2", 0.1, 0)]
    other = [replace(r, question_id="r") for r in rows]
    blocks = {"q": figure_block(rows, noul_figures, Params()),
              "r": figure_block(other, noul_figures, Params())}
    run = {"name": "r", "settings": {}, "engine": "vllm", "upstream": "u", "simulator": False,
           "replicates": 1}
    h = headline(run, PARAMS, {"noul": blocks}, DIAG, partial={"settled": 64, "decisions": 313})
    titles = [i.title for i in headline_items(h)]
    assert titles[0] == "partial" and "q: AUC" in titles and "r: AUC" in titles
    assert "AUC" not in titles  # nothing pooled over the two questions
    assert headline_line(h).startswith("partial 64 of 313 decisions settled")
