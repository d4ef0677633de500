"""``--engine transformers`` on the commands that choose an upstream: ``dreads run`` answers a
job file in-process with a tiny DiffusionGemma (no simulator, no URL) and records the engine;
``decide`` and ``check-upstream`` read from the model directly."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip("torch")

from tests.fixtures.runs_cli import CliResult, job_line, sqlite_rows, write_jobs

pytestmark = pytest.mark.engine

Dreads = Callable[..., CliResult]
SMALL = Path(__file__).resolve().parents[3] / "examples" / "small.jsonl"


def test_run_answers_every_decision_once_with_the_model(dreads: Dreads, tiny_model_dir: Path,
                                                        tmp_path: Path) -> None:
    db, model = tmp_path / "d.db", str(tiny_model_dir)
    result = dreads("run", str(SMALL), "--engine", "transformers", "--model", model,
                    "--db", str(db))
    assert result.code == 0, result.stderr
    assert "engine: transformers" in result.stderr and "SIMULATOR" not in result.stderr
    n_lines = sum(1 for line in SMALL.read_text().splitlines() if line.strip())
    assert sqlite_rows(db, "SELECT status, count(*) FROM decisions GROUP BY status") == [
        ("done", n_lines)]
    assert sqlite_rows(db, "SELECT max(n), min(n) FROM (SELECT count(*) AS n FROM attempts "
                      "GROUP BY decision_id)") == [(1, 1)]
    assert sqlite_rows(db, "SELECT sum(n_questions) FROM decisions") == sqlite_rows(
        db, "SELECT count(*) FROM answers")
    engine, upstream, fingerprint, settings = sqlite_rows(
        db, "SELECT engine, upstream, fingerprint, settings FROM runs")[0]
    assert (engine, upstream) == ("transformers", model)
    assert json.loads(fingerprint)["engine"] == "transformers"
    assert json.loads(settings)["tokenizer"] == model  # the checkpoint's own tokenizer


def test_run_keeps_a_given_tokenizer_and_refuses_an_upstream(
        dreads: Dreads, tiny_model_dir: Path, tmp_path: Path) -> None:
    job, db = write_jobs(tmp_path / "j.jsonl", [job_line("a")]), tmp_path / "d.db"
    args = ("run", str(job), "--engine", "transformers", "--model", str(tiny_model_dir),
            "--dtype", "float32", "--db", str(db))
    refused = dreads(*args, "--upstream", "sim")
    assert refused.code == 2 and "drop --upstream" in refused.stderr
    result = dreads(*args, "--tokenizer", "standin")
    assert result.code == 0, result.stderr
    settings = json.loads(sqlite_rows(db, "SELECT settings FROM runs")[0][0])
    assert settings["tokenizer"] == "standin"
    assert sqlite_rows(db, "SELECT status FROM decisions") == [("done",)]


def test_decide_and_check_upstream_read_from_the_model(dreads: Dreads,
                                                       tiny_model_dir: Path) -> None:
    model = str(tiny_model_dir)
    result = dreads("decide", "--engine", "transformers", "--model", model, "--dtype",
                    "float32", "--state", "Clause 1: pay within 30 days.", "--question",
                    "Is a payment after 45 days late?", "--json")
    assert result.code == 0, result.stderr
    doc = result.json()
    assert doc["upstream"]["engine"] == "transformers"
    [decision] = doc["decisions"]
    assert decision["status"] == "done"
    assert [a["label"] for a in decision["answers"]] in (["yes"], ["no"])
    check = dreads("check-upstream", "--engine", "transformers", "--model", model, "--dtype",
                   "float32", "--json")
    assert check.code == 0, check.stderr
    assert check.json()["fingerprint"]["model_id"] == model
