"""Gemma's real vocabulary end to end: ``dreads run examples/score.jsonl --upstream sim
--tokenizer ../shared/tokenizers/diffusiongemma-approx`` answers as well as with the bundled
stand-in, with no low-mass read (before, the simulator read a digit label at the lone space
before it, and every score read was wrong)."""

from __future__ import annotations

import json
from pathlib import Path

from sqlalchemy import create_engine, text
from typer.testing import CliRunner

from app.cli import app
from app.tokenizer.hf import HFTextTokenizer

ROOT = Path(__file__).resolve().parents[3]
runner = CliRunner()


def _run_and_report(db: Path, run: str, tokenizer: str) -> dict[str, float]:
    result = runner.invoke(app, ["run", str(ROOT / "examples" / "score.jsonl"), "--upstream",
                                 "sim", "--db", str(db), "--run", run, "--tokenizer",
                                 tokenizer, "--json"])
    assert result.exit_code == 0, result.output
    report = runner.invoke(app, ["report", run, "--json", "--database-url", f"sqlite:///{db}"])
    assert report.exit_code == 0, report.output
    return json.loads(report.stdout)["raw"]["score"]["questions"]["risk"]["overall"]["figures"]


def test_score_reads_with_the_real_vocabulary_match_the_standin(
        approx_tokenizer: HFTextTokenizer, tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    standin = _run_and_report(db, "standin", "standin")
    real = _run_and_report(db, "real", approx_tokenizer.name)
    assert standin["n"] == real["n"] == 172
    assert real["accuracy"] > 0.8
    assert abs(real["accuracy"] - standin["accuracy"]) < 0.05
    engine = create_engine(f"sqlite:///{db}")
    with engine.connect() as conn:
        low, not_label = conn.execute(text(
            "SELECT sum(d.label_mass < 0.5), sum(NOT d.argmax_is_label) FROM draws d "
            "JOIN decisions x ON x.id = d.decision_id JOIN runs r ON r.id = x.run_id "
            "WHERE r.name = 'real'")).one()
    engine.dispose()
    assert (low, not_label) == (0, 0)
