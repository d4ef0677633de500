"""`dreads report` and `dreads calibrate` through Typer's CliRunner on crafted SQLite runs."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from app.cli import app
from app.store.db import session_scope
from app.store.models import Decision
from tests.fixtures.report_db import RunBuilder

DB = tuple[str, sessionmaker[Session]]
runner = CliRunner()




def _squashed_run(session: Session, name: str, seed: int, n: int = 400,
                  outlier: int = 0) -> None:
    """Scores that rank well but are squashed (true P(yes) = sqrt(score)); two questions."""
    rng = np.random.default_rng(seed)
    b = RunBuilder(session, name)
    for i in range(n):
        truth = float(rng.uniform())
        y = int(rng.uniform() < truth)
        cell = "wording-a" if i % 2 else "wording-b"
        lost = cell == "wording-b" and i < 2 * outlier
        b.noul(f"d{i}", None if lost else truth**2, "yes" if y else "no", cell=cell,
               qid="conflict" if i % 3 else "gap", masses=(0.3,) if i % 17 == 0 else (0.9,))


def _cli(url: str, *args: str) -> tuple[int, str]:
    result = runner.invoke(app, [*args, "--database-url", url])
    return result.exit_code, result.output


def test_calibrate_then_report_another_run(report_db: DB, tmp_path: Path) -> None:
    url, factory = report_db
    with session_scope(factory) as session:
        _squashed_run(session, "fit", seed=1)
        _squashed_run(session, "other", seed=2)
    calib = tmp_path / "calib.json"
    code, out = _cli(url, "calibrate", "fit", "-o", str(calib), "--json")
    assert code == 0, out
    summary = json.loads(out)
    assert summary["ece_after_in_sample"] < summary["ece_before"]
    assert summary["scope"] == "global" and summary["question_maps"] == []
    assert json.loads(calib.read_text())["method"] == "isotonic"
    code, out = _cli(url, "report", "other", "--calibration", str(calib), "--json")
    assert code == 0, out
    doc = json.loads(out)
    assert doc["calibration_source"]["run"] == "fit"
    questions = doc["raw"]["noul"]["questions"]
    assert set(questions) == {"conflict", "gap"} and doc["raw"]["noul"]["pooled"] is None
    for qid, block in [(q, b) for q in questions for b in ("overall", "cells")]:
        raw = questions[qid][block]
        cal = doc["calibrated"]["noul"]["questions"][qid][block]
        pairs = [(raw, cal)] if block == "overall" else [
            (raw[c], cal[c]) for c in ("wording-a", "wording-b")]
        for r, c in pairs:
            for name in ("auc", "rank_median_pct", "rank_worst_pct", "top_share"):
                assert c["figures"][name] == r["figures"][name], name
            assert c["figures"]["ece"] < r["figures"]["ece"] * 0.75
            assert c["figures"]["brier"] < r["figures"]["brier"]


def test_per_question_calibration_keeps_each_question_ranking(report_db: DB,
                                                               tmp_path: Path) -> None:
    url, factory = report_db
    with session_scope(factory) as session:
        _squashed_run(session, "fit", seed=1)
        _squashed_run(session, "other", seed=2)
    calib = tmp_path / "calib.json"
    code, out = _cli(url, "calibrate", "fit", "-o", str(calib), "--per-question", "--json")
    assert code == 0, out
    assert json.loads(out)["question_maps"] == ["conflict", "gap"]
    code, out = _cli(url, "report", "other", "--calibration", str(calib), "--json")
    doc = json.loads(out)
    for q in ("conflict", "gap"):
        raw = doc["raw"]["calibration"]["questions"][q]
        cal = doc["calibrated"]["calibration"]["questions"][q]
        assert cal["auc"] == raw["auc"]
        assert cal["ece"] < raw["ece"]


def test_platt_global_calibration(report_db: DB, tmp_path: Path) -> None:
    url, factory = report_db
    with session_scope(factory) as session:
        _squashed_run(session, "fit", seed=3)
    calib = tmp_path / "platt.json"
    code, out = _cli(url, "calibrate", "fit", "-o", str(calib), "--method", "platt", "--global")
    assert code == 0, out
    assert "platt global map" in out
    stored = json.loads(calib.read_text())
    assert stored["scope"] == "global" and stored["questions"] == {}
    assert stored["global"]["a"] > 0


def test_rich_output_shows_figures_cells_and_flags(report_db: DB) -> None:
    url, factory = report_db
    with session_scope(factory) as session:
        _squashed_run(session, "flagged", seed=4, n=600, outlier=25)
    code, out = _cli(url, "report", "flagged")
    assert code == 0, out
    for text in ("yes/no per question", "yes/no conflict per cell", "yes/no gap per cell",
                 "wording-a", "wording-b", "AUC", "recall >0.30", "conflict: AUC", "gap: AUC",
                 "unanswered and failures per cell", "calibration per question",
                 "false pos. >0.70"):
        assert text in out, text
    assert re.search(r"⚑ cell 'wording-b': read_failures 25/300 decisions", out)
    assert "infrastructure (not counted against any cell): none" in out
    assert "wording-a'" not in out  # the cell doing better than the rest is not flagged
    assert "pooled" not in out  # two questions, never pooled unasked
    code, out = _cli(url, "report", "flagged", "--pooled")
    assert code == 0 and "all (pooled)" in out and "(pooled over questions)" in out


def test_against_puts_runs_side_by_side(report_db: DB) -> None:
    url, factory = report_db
    with session_scope(factory) as session:
        b = RunBuilder(session, "a")
        c = RunBuilder(session, "b")
        for i in range(40):
            y = i % 2
            b.noul(f"d{i}", 0.8 if y else 0.2, "yes" if y else "no", cell=f"c{i % 8 // 2}")
            if i < 36:  # run b lacks four decisions
                c.noul(f"d{i}", 0.6 if y or i % 5 == 0 else 0.4, "yes" if y else "no",
                       cell=f"c{i % 8 // 2}")
        c.noul("extra", 0.5, "yes")
    code, out = _cli(url, "report", "a", "--against", "b", "--json")
    assert code == 0, out
    cmp = json.loads(out)["against"]
    assert (cmp["a"], cmp["b"], cmp["matched"], cmp["only_a"], cmp["only_b"]) == (
        "a", "b", 36, 4, 1)
    q = cmp["questions"]["q"]
    auc = q["overall"]["auc"]
    assert q["n"] == 36 and auc["n"] == 36 and auc["a"] == 1.0
    assert auc["diff"] == pytest.approx(1.0 - auc["b"])
    assert auc["method"] == "DeLong paired" and auc["interval"]["low"] is not None
    assert set(q["cells"]) == {"c0", "c1", "c2", "c3"}
    assert q["overall"]["fp_per_1000_neg"]["diff"] == 0  # b's false positives sit below 0.7
    assert cmp["settings"]["note"].startswith("the read settings are the same")
    assert [v["figure"] for v in cmp["verdicts"]][:2] == ["auc", "recall"]
    code, out = _cli(url, "report", "a", "--against", "b")
    assert code == 0
    # the comparison comes first, with its verdicts, then run a's report
    assert out.index("comparison: a (a) against b (b)") < out.index("run a:")
    assert re.search(r"q: a ranks better: ΔAUC \+0\.\d+ \[", out)
    assert re.search(r"c0 +│ AUC +│ +1\.000 │", out)  # per cell: a | b | Δ ...


def test_against_page_lists_the_most_disagreeing_questions(report_db: DB,
                                                            tmp_path: Path) -> None:
    url, factory = report_db
    with session_scope(factory) as session:
        a, b = RunBuilder(session, "a"), RunBuilder(session, "b")
        for i in range(12):
            a.noul(f"d{i}", 0.5, "yes", state=f"State <{i}> of the decision")
            b.noul(f"d{i}", 0.5 + i / 25, "yes")
    page = tmp_path / "against.html"
    code, out = _cli(url, "report", "a", "--against", "b", "--html", str(page))
    assert code == 0, out
    html = page.read_text()
    section = html[html.index('id="disagreements"'):]
    section = section[:section.index("</section>")]
    shown = re.findall(r"<tr><td>(d\d+)</td>", section)
    assert shown == [f"d{i}" for i in range(11, 1, -1)]  # largest |ΔP| first, ten of them
    assert "State &lt;11&gt; of the decision" in section  # the state's words, escaped
    # the comparison sits at the top of the page: verdicts, per-cell tables, both settings
    assert html.index('id="comparison"') < html.index('id="headline"')
    assert 'id="compare-q"' in html and 'id="settings"' in html
    assert "q: no comparison of AUC: not computable on the 12 question(s)" in html  # all yes


def test_html_report_is_self_contained(report_db: DB, tmp_path: Path) -> None:
    url, factory = report_db
    with session_scope(factory) as session:
        _squashed_run(session, "fit", seed=5)
        _squashed_run(session, "page", seed=6, n=600, outlier=25)
    calib = tmp_path / "calib.json"
    assert _cli(url, "calibrate", "fit", "-o", str(calib))[0] == 0
    page = tmp_path / "report.html"
    code, out = _cli(url, "report", "page", "--html", str(page), "--calibration", str(calib))
    assert code == 0, out
    # one line: where the page is and the headline figures, not the terminal report
    doc = json.loads(_cli(url, "report", "page", "--calibration", str(calib), "--json")[1])
    h = doc["headline"]["noul"]["questions"]["conflict"]["figures"]
    assert out.count("\n") == 1 and out.startswith(f"wrote {page}: conflict: AUC ")
    assert f"conflict: recall >0.30 {h['recall_hits']}/{h['positives']} (" in out
    assert f"false positives >0.70 {h['fp_count']} (" in out and " calibrated" in out
    assert "; gap: AUC " in out  # each question's own figures
    html = page.read_text()
    assert 'id="headline"' in html and 'data-figure="recall"' in html
    missed = doc["review"]["missed_positives"]
    assert missed["total"] == len(missed["items"]) > 0
    assert all(f"<td>{i['decision']}</td>" in html for i in missed["items"])
    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)
    # scores raw + calibrated, reliability, ranks, reliability per question, label mass
    assert len(images) == 6
    assert all(base64.b64decode(img).startswith(b"\x89PNG") for img in images)
    assert '<tr class="flag"><td>wording-b' in html
    assert "http://" not in html and "https://" not in html  # nothing fetched
    assert "calibration per question" in html and "ECE calibrated" in html


@pytest.mark.parametrize(("args", "message"), [
    (["report", "missing"], "no run named 'missing'"),
    (["report", "r", "--threshold-recall", "0.8"], "--threshold-recall 0.8 is above"),
    (["report", "r", "--calibration", "/nonexistent/c.json"], "dreads calibrate RUN"),
    (["report", "r", "--against", "r"], "same run"),
    (["calibrate", "r", "-o", "/tmp/never.json"], "expected"),
])
def test_user_errors_exit_2_with_advice(report_db: DB, args: list[str], message: str) -> None:
    url, factory = report_db
    with session_scope(factory) as session:
        RunBuilder(session, "r").noul("d", 0.5, None)  # no expected label
    code, out = _cli(url, *args)
    assert code == 2
    assert message in " ".join(out.split())


def test_run_without_expected_labels_still_reports_diagnostics(report_db: DB) -> None:
    url, factory = report_db
    with session_scope(factory) as session:
        b = RunBuilder(session, "unlabelled")
        b.noul("d1", 0.7, None, cell="x", masses=(0.2,), argmax_ok=(False,))
        b.noul("d2", None, None, cell="x", failures=["bad_request"])
    code, out = _cli(url, "report", "unlabelled")
    assert code == 0, out
    text = " ".join(out.split())
    assert "no question has an expected label" in text
    assert "yes/no per cell" not in text
    assert "1 (50.00%)" in text and "bad_request 1" in text
    doc = json.loads(_cli(url, "report", "unlabelled", "--json")[1])
    x = doc["diagnostics"]["cells"]["x"]
    assert (x["low_mass_share"], x["argmax_not_label_share"]) == (1.0, 1.0)
    assert doc["raw"]["noul"] == {"questions": {}, "pooled": None}


def test_unreachable_database_says_what_to_check(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'missing-dir' / 'x.db'}"
    code, out = _cli(url, "report", "r")
    assert code == 2  # a database that is not there is the user's to fix
    assert "check --database-url / DREADS_DATABASE_URL" in " ".join(out.split())


def test_a_run_still_running_says_partial_everywhere(report_db: DB, tmp_path: Path) -> None:
    url, factory = report_db
    with session_scope(factory) as session:
        b = RunBuilder(session, "running")
        for i in range(6):
            b.noul(f"d{i}", 0.9 if i % 2 else 0.1, "yes" if i % 2 else "no")
        b.noul("waiting", None, "no")
        session.query(Decision).filter(Decision.key == "waiting").update({"status": "queued"})
    code, out = _cli(url, "report", "running")
    assert code == 0, out
    assert out.startswith("partial: 6 of 7 decisions settled")
    doc = json.loads(_cli(url, "report", "running", "--json")[1])
    assert doc["partial"] == {"settled": 6, "decisions": 7}
    page = tmp_path / "running.html"
    assert _cli(url, "report", "running", "--html", str(page))[0] == 0
    assert "partial: 6 of 7 decisions settled" in page.read_text()
    code, out = _cli(url, "export", "running", "-o", str(tmp_path / "a.jsonl"))
    assert code == 0 and "partial: 6 of 7 decisions settled" in out, out
    assert "decisions settled; the export has the answers so far" in out, out
