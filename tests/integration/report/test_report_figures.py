"""The report of crafted runs (rows inserted directly) against scikit-learn and hand counts."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from sklearn.metrics import confusion_matrix, log_loss, roc_auc_score
from sqlalchemy.orm import Session, sessionmaker

from app.errors import InputError
from app.report.document import build_report, summarize_run
from app.report.figures import Params
from app.report.headline import headline_items
from app.store.db import make_engine, make_sessionmaker, session_scope
from app.store.models import Decision, Run
from tests.fixtures.report_db import RunBuilder

DB = tuple[str, sessionmaker[Session]]
# Positives at ranks 1, 3, 6, 9 of 10 (see the unit tests of the metrics).
Y = [1, 0, 1, 0, 0, 1, 0, 0, 1, 0]
S = [0.95, 0.80, 0.60, 0.40, 0.35, 0.25, 0.20, 0.10, 0.05, 0.01]



def _one(kind: dict[str, Any]) -> dict[str, Any]:
    """The one question's section (or summary entry) of a kind."""
    (section,) = kind["questions"].values()
    return section

def _hand_run(session: Session) -> None:
    b = RunBuilder(session, "hand")
    for i, (y, s) in enumerate(zip(Y, S, strict=True)):
        # Ten decisions over five distinct states.
        b.noul(f"d{i}", s, "yes" if y else "no", cell="c1" if i < 5 else "c2",
               state={"doc": i // 2})
    b.noul("lost", None, "yes", cell="c2")


def test_yes_no_figures_overall_and_per_cell(report_db: DB) -> None:
    _, factory = report_db
    with session_scope(factory) as session:
        _hand_run(session)
    with session_scope(factory) as session:
        doc = build_report(session, "hand")
    block = _one(doc["raw"]["noul"])["overall"]
    f = block["figures"]
    assert block["replicates"] == 1 and block["draw_sd"] == {}
    assert f["labelled"] == 11 and f["unanswered_share"] == pytest.approx(1 / 11)
    assert block["intervals"]["recall"]["method"] == "Wilson"
    assert block["intervals"]["auc"]["low"] < f["auc"] < block["intervals"]["auc"]["high"]
    assert (f["n"], f["positives"], f["negatives"], f["unanswered"]) == (10, 4, 6, 1)
    assert f["auc"] == pytest.approx(roc_auc_score(Y, S))
    assert (f["recall"], f["recall_hits"]) == (0.5, 2)
    assert (f["rank_median_pct"], f["rank_worst_pct"]) == (45.0, 90.0)
    assert (f["top_share"], f["top_share_hits"]) == (0.0, 0)
    assert (f["fp_count"], f["fp_per_1000_neg"]) == (1, pytest.approx(1000 / 6))
    assert f["distinct_states"] == 5 and f["fp_per_100_states"] == pytest.approx(20.0)
    assert (f["referral_band"], f["referral_band_pos"]) == (3, 1)
    c2 = _one(doc["raw"]["noul"])["cells"]["c2"]["figures"]
    assert c2["auc"] == pytest.approx(roc_auc_score(Y[5:], S[5:]))
    assert (c2["n"], c2["positives"], c2["unanswered"]) == (5, 2, 1)
    assert set(_one(doc["raw"]["noul"])["cells"]) == {"c1", "c2"}


def test_thresholds_are_parameters(report_db: DB) -> None:
    _, factory = report_db
    with session_scope(factory) as session:
        _hand_run(session)
        doc = build_report(session, "hand", Params(threshold_recall=0.2, threshold_fp=0.5,
                                                   top_share=0.3, band_low=0.2, band_high=0.5))
    f = _one(doc["raw"]["noul"])["overall"]["figures"]
    assert (f["recall_hits"], f["fp_count"], f["top_share_hits"]) == (3, 1, 2)
    assert f["referral_band"] == 4  # 0.40, 0.35, 0.25 and 0.20 (inclusive)


def test_choice_and_score_figures(report_db: DB) -> None:
    _, factory = report_db
    rows = [({"A": 0.7, "B": 0.2, "C": 0.1}, "red"), ({"A": 0.1, "B": 0.6, "C": 0.3}, "green"),
            ({"A": 0.5, "B": 0.3, "C": 0.2}, "blue"), ({"A": 0.4, "B": 0.35, "C": 0.25}, "A")]
    with session_scope(factory) as session:
        b = RunBuilder(session, "typed")
        for i, (probs, expected) in enumerate(rows):
            b.choice(f"c{i}", probs, expected, options=["red", "green", "blue"])
        # Score levels 1..3; expected given as level text or label.
        b.choice("s0", {"1": 0.1, "2": 0.8, "3": 0.1}, "mid", options=["low", "mid", "high"],
                 score=True)
        b.choice("s1", {"1": 0.6, "2": 0.3, "3": 0.1}, "3", options=["low", "mid", "high"],
                 score=True)
        doc = build_report(session, "typed")
    truth = ["A", "B", "C", "A"]
    matrix = np.array([list(p.values()) for p, _ in rows])
    choice = _one(doc["raw"]["choice"])["overall"]["figures"]
    assert choice["n"] == 4 and choice["accuracy"] == 0.75
    assert choice["log_loss"] == pytest.approx(log_loss(truth, matrix, labels=["A", "B", "C"]))
    conf = _one(doc["raw"]["choice"])["confusion"]
    assert conf["labels"] == ["A", "B", "C"]
    assert conf["matrix"] == confusion_matrix(truth, ["A", "B", "A", "A"]).tolist()
    score = _one(doc["raw"]["score"])["overall"]["figures"]
    # Expected levels: 1.0 (true 1) and 0.5 (true 2): MAE = (0 + 1.5) / 2.
    assert score["mae_level"] == pytest.approx(0.75)
    assert score["accuracy"] == 0.5
    assert doc["labelled"] == {"questions": 6, "with_expected": 6, "noul": 0, "choice": 4,
                               "score": 2}


def _cells_run(session: Session, name: str, outlier_missing: int) -> None:
    """Five cells of 200 questions; cell "e" loses ``outlier_missing`` of them."""
    rng = np.random.default_rng(7)
    b = RunBuilder(session, name)
    for cell in "abcde":
        for i in range(200):
            y = int(rng.integers(0, 2))
            lost = cell == "e" and i < outlier_missing
            b.noul(f"{cell}{i}", None if lost else float(rng.beta(2 + 3 * y, 5 - 3 * y)),
                   "yes" if y else "no", cell=cell,
                   failures=["timeout"] * 3 if lost else (["server_error"] if i == 7 else []))


def test_outlier_cell_is_flagged(report_db: DB) -> None:
    _, factory = report_db
    with session_scope(factory) as session:
        _cells_run(session, "cells", outlier_missing=12)
        doc = build_report(session, "cells")
    diag = doc["diagnostics"]
    e = diag["cells"]["e"]
    assert (e["questions"], e["unanswered"]) == (200, 12)
    assert e["failures"] == {"timeout": 36}  # its decision 7 is among the lost ones
    assert diag["cells"]["a"]["failures"] == {"server_error": 1}
    assert diag["cells"]["a"]["failure_rate"] == pytest.approx(1 / 201)
    assert set(e["flags"]) == {"unanswered", "failures"}
    assert all(not diag["cells"][c]["flags"] for c in "abcd")
    assert {(f["cell"], f["flag"]) for f in diag["flagged"]} == {("e", "unanswered"),
                                                                ("e", "failures")}
    assert diag["overall"]["unanswered"] == 12
    assert diag["cells"]["a"]["decision_statuses"] == {"done": 200}


def test_no_flag_when_cells_are_alike(report_db: DB) -> None:
    _, factory = report_db
    with session_scope(factory) as session:
        _cells_run(session, "even", outlier_missing=0)
        doc = build_report(session, "even")
    assert doc["diagnostics"]["flagged"] == []


def test_read_diagnostics_come_from_the_draws(report_db: DB) -> None:
    _, factory = report_db
    with session_scope(factory) as session:
        b = RunBuilder(session, "diag")
        b.noul("a", 0.9, "yes", cell="x", masses=(0.3, 0.9, 0.95, 0.2),
               argmax_ok=(False, True, True, True), stderr=0.05)
        b.noul("b", 0.1, "no", cell="x", masses=(0.97,), stderr=None)
        b.noul("c", 0.2, "no", cell="y", masses=(0.4, 0.6), stderr=0.15)
        doc = build_report(session, "diag")
    x = doc["diagnostics"]["cells"]["x"]
    assert (x["draw_rows"], x["low_mass_draws"], x["argmax_not_label_draws"]) == (5, 2, 1)
    assert x["low_mass_share"] == pytest.approx(0.4)
    assert x["draws"] == {"1": 1, "4": 1} and x["draws_mean"] == 2.5
    assert x["stop_reasons"] == {"agreed": 1, "near_certain": 1}
    overall = doc["diagnostics"]["overall"]
    assert overall["draw_rows"] == 7 and overall["low_mass_draws"] == 3
    assert overall["stderr"]["p50"] == pytest.approx(0.10)
    assert overall["stderr"]["max"] == pytest.approx(0.15)


def _replicated(session: Session, name: str, noise: float) -> None:
    rng = np.random.default_rng(11)
    b = RunBuilder(session, name, replicates=3)
    truth = rng.integers(0, 2, 120)
    base = np.clip(rng.normal(0.3 + 0.4 * truth, 0.2), 0.01, 0.99)
    for rep in range(3):
        scores = np.clip(base + rng.normal(0, noise, base.size), 0.0, 1.0) if noise else base
        for i, (y, s) in enumerate(zip(truth, scores, strict=True)):
            b.noul(f"d{i}", float(s), "yes" if y else "no", replicate=rep,
                   cell="even" if i % 2 else "odd")


@pytest.mark.parametrize("noise", [0.0, 0.1])
def test_replicates_give_mean_and_sd(report_db: DB, noise: float) -> None:
    _, factory = report_db
    with session_scope(factory) as session:
        _replicated(session, "reps", noise)
        doc = build_report(session, "reps")
    block = _one(doc["raw"]["noul"])["overall"]
    assert block["replicates"] == 3
    assert block["figures"]["n"] == 120  # one averaged answer per decision
    auc = block["intervals"]["auc"]
    if noise:
        assert block["draw_sd"]["auc"] > 0
        assert _one(doc["raw"]["noul"])["cells"]["odd"]["draw_sd"]["auc"] > 0
        # the draw noise is far narrower than the interval over items
        assert block["draw_sd"]["auc"] < (auc["high"] - auc["low"]) / 2
    else:
        assert block["draw_sd"]["auc"] == 0.0


def test_summary_and_unknown_run(report_db: DB) -> None:
    _, factory = report_db
    with session_scope(factory) as session:
        _hand_run(session)
        run_id = session.query(Run.id).scalar()
        summary = summarize_run(session, run_id)
        with pytest.raises(InputError, match="dreads runs"):
            build_report(session, "nope")
    assert summary["run"] == "hand"
    noul = _one(summary["noul"])
    assert noul["figures"]["auc"] == pytest.approx(roc_auc_score(Y, S))
    assert noul["intervals"]["auc"]["method"] == "DeLong"
    assert (summary["questions"], summary["unanswered"]) == (11, 1)
    assert noul["figures"]["fp_count"] == 1 and summary["choice"]["n"] == 0
    assert summary["partial"] is None


def test_postgres_gives_the_same_report(report_db: DB, pg_url: str) -> None:
    _, factory = report_db
    engine = make_engine(pg_url)
    try:
        docs = []
        for f in (factory, make_sessionmaker(engine)):
            with session_scope(f) as session:
                _cells_run(session, "cells", outlier_missing=12)
                doc = build_report(session, "cells")
            doc["run"].pop("id")
            doc["run"].pop("created")
            docs.append(doc)
    finally:
        engine.dispose()
    assert docs[0] == docs[1]


def test_decisions_still_in_flight_are_not_unanswered(report_db: DB) -> None:
    _, factory = report_db
    with session_scope(factory) as session:
        b = RunBuilder(session, "partial")
        b.noul("done", 0.9, "yes")
        b.noul("lost", None, "yes")
        b.noul("waiting", None, "no")
        session.query(Decision).filter(Decision.key == "waiting").update({"status": "pending"})
        doc = build_report(session, "partial")
    overall = doc["diagnostics"]["overall"]
    assert (overall["answered"], overall["unanswered"], overall["in_flight"]) == (1, 1, 1)
    assert overall["decision_statuses"] == {"done": 1, "failed": 1, "pending": 1}
    assert _one(doc["raw"]["noul"])["overall"]["figures"]["unanswered"] == 1
    # the run is not settled: it says so at the top, in every block and in the headline
    assert doc["partial"] == {"settled": 2, "decisions": 3}
    section = _one(doc["raw"]["noul"])
    assert all(b["partial"] for b in [section["overall"], *section["cells"].values()])
    assert headline_items(doc["headline"])[0].text == (
        "2 of 3 decisions settled; figures will change as the rest are answered")
