"""End to end: `dreads run` against the simulator (answer key, miscalibration), then
`dreads calibrate` on one run and `dreads report --calibration` on another run."""

from __future__ import annotations

import json
import random
from pathlib import Path

from typer.testing import CliRunner

from app.cli import app
from tests.fixtures.sim import MakeSim

runner = CliRunner()
QUESTION = "Does this clause set a deadline?"


def _job(path: Path, n: int, seed: int) -> None:
    """``n`` yes/no decisions in three cells, ~40% yes, with the simulator's answer key."""
    rng = random.Random(seed)
    jobs, key = [], []
    for i in range(n):
        label = "yes" if rng.random() < 0.4 else "no"
        state = f"Document {seed}-{i}: clause {rng.randint(1, 99)} sets {rng.randint(1, 90)} days."
        jobs.append({"id": f"d{i}", "cell": f"wording-{i % 3}", "state": state,
                     "questions": {"deadline": {"type": "noul", "instructions": QUESTION}},
                     "expected": {"deadline": label}})
        key.append({"state": state, "question": QUESTION, "label": label})
    path.write_text("".join(json.dumps(j) + "\n" for j in jobs))
    path.with_name(path.stem + ".key.jsonl").write_text(
        "".join(json.dumps(k) + "\n" for k in key))


def _run(make_sim: MakeSim, job: Path, db: Path) -> None:
    sim = make_sim(key_path=str(job.with_name(job.stem + ".key.jsonl")), miscalibration=3.0,
                   record_bodies=0)
    # The calibration machinery is the same for every layout; with 180 decisions an isotonic
    # fit's gain depends on the draws, and this pair of seeded runs shows it under this layout.
    result = runner.invoke(app, ["run", str(job), "--upstream", sim.url, "--db", str(db),
                                 "--run", job.stem, "--layout", "document_first"])
    sim.stop()
    assert result.exit_code == 0, result.output


def test_calibration_from_a_simulated_run_fixes_another(make_sim: MakeSim,
                                                        tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    url = f"sqlite:///{db}"
    for name, seed in (("fit", 1), ("eval", 2)):
        _job(tmp_path / f"{name}.jsonl", 180, seed)
        _run(make_sim, tmp_path / f"{name}.jsonl", db)
    calib = tmp_path / "calib.json"
    result = runner.invoke(app, ["calibrate", "fit", "-o", str(calib), "--database-url", url])
    assert result.exit_code == 0, result.output
    page = tmp_path / "eval.html"
    result = runner.invoke(app, ["report", "eval", "--calibration", str(calib), "--json",
                                 "--html", str(page), "--database-url", url])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    (raw_section,) = doc["raw"]["noul"]["questions"].values()
    (cal_section,) = doc["calibrated"]["noul"]["questions"].values()
    raw, cal = raw_section["overall"]["figures"], cal_section["overall"]["figures"]
    assert raw["n"] == 180 and raw["unanswered"] == 0
    assert raw["auc"] > 0.85  # the simulator ranks well ...
    assert raw["ece"] > 0.05  # ... but is miscalibrated (overconfident, biased to "no")
    assert cal["auc"] == raw["auc"]
    assert cal["rank_median_pct"] == raw["rank_median_pct"]
    assert cal["ece"] < raw["ece"] and cal["brier"] < raw["brier"]
    assert set(raw_section["cells"]) == {"wording-0", "wording-1", "wording-2"}
    assert doc["diagnostics"]["flagged"] == []
    assert page.read_text().count("data:image/png;base64,") == 5
