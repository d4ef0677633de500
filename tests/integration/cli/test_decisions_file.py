"""A file of OpenAI Decisions requests through ``dreads run``, ``export --format openai-batch``
and ``report``; and a 1,000-line one killed half-way and run again: each decision once."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from openai.types.decision import AnswerAnswerResourceChoice, Decision

from tests.fixtures.runs_cli import CliResult, sqlite_rows

Dreads = Callable[..., CliResult]
ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "decisions.jsonl"
DREADS = str(Path(sys.executable).parent / "dreads")


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _export(dreads: Dreads, run: str, db: Path, out: Path) -> list[dict[str, Any]]:
    result = dreads("export", run, "--format", "openai-batch", "-o", str(out),
                    "--database-url", f"sqlite:///{db}")
    assert result.code == 0, result.stderr
    return _lines(out)


def test_a_decisions_file_runs_exports_batch_output_and_reports(dreads: Dreads,
                                                                 tmp_path: Path) -> None:
    jobs = tmp_path / "decisions.jsonl"
    shutil.copy(EXAMPLE, jobs)
    shutil.copy(EXAMPLE.with_suffix(".key.jsonl"), tmp_path / "decisions.key.jsonl")
    too_long = {"custom_id": "too-long", "method": "POST", "url": "/v1/decisions",
                "body": {"model": "dgemma", "input": "word " * 9000, "questions": [
                    {"type": "predicate", "instructions": "Is this long?"}]}}
    with jobs.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(too_long) + "\n")
    db = tmp_path / "d.db"
    run = dreads("run", str(jobs), "--upstream", "sim", "--db", str(db))
    assert run.code == 0, run.stderr
    assert "done 86" in run.stdout and "rejected 1" in run.stdout

    exported = _export(dreads, "decisions", db, tmp_path / "out.jsonl")
    asked = [line.get("custom_id") or line["metadata"]["id"] for line in _lines(jobs)]
    assert [line["custom_id"] for line in exported] == asked  # each decision once, in order
    assert len({line["id"] for line in exported}) == len(exported)
    by_id = {line["custom_id"]: line for line in exported}
    rejected = by_id.pop("too-long")
    assert rejected["response"] is None
    assert rejected["error"]["code"] == "rejected"
    assert "max_model_len" in rejected["error"]["message"]
    for line in by_id.values():
        assert line["error"] is None and line["response"]["status_code"] == 200
        decision = Decision.model_validate(line["response"]["body"])
        assert decision.model == "dgemma" and decision.usage.input_tokens > 0
        assert line["response"]["body"]["dreads"]["questions"]  # diagnostics beside them
    boolean = Decision.model_validate(by_id["C2|terse|3.2x9.3|bool"]["response"]["body"])
    (answer,) = boolean.answers
    assert isinstance(answer, AnswerAnswerResourceChoice) and answer.name == "conflict"
    assert [p.value for p in answer.probabilities] == [True, False]
    assert type(answer.choice) is bool
    bare = Decision.model_validate(by_id["C1|json|6.3x10.4"]["response"]["body"])
    assert [(a.type, a.name) for a in bare.answers] == [("predicate", "conflict"),
                                                       ("score", "risk")]

    report = dreads("report", "decisions", "--json", "--database-url", f"sqlite:///{db}")
    assert report.code == 0, report.stderr
    text = report.stdout
    doc = json.loads(text)
    flat = json.dumps(doc)
    assert '"auc"' in flat.lower()
    assert "booleans" in flat and "C1/plain" in flat


def _batch_line(line: dict[str, Any]) -> dict[str, Any]:
    """A dreads contracts line as an OpenAI Batch line of a Decisions request."""
    return {"custom_id": line["id"], "method": "POST", "url": "/v1/decisions",
            "body": {"model": "dgemma", "input": line["state"], "questions": [
                {"type": "predicate", "name": "conflict",
                 "instructions": line["questions"]["conflict"]["instructions"]}]},
            "metadata": {"cell": line["cell"],
                         "expected": {"conflict": line["expected"]["conflict"] == "yes"}}}


def _done(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        return int(sqlite_rows(db, "SELECT count(*) FROM decisions WHERE status = 'done'")[0][0])
    except Exception:  # the schema is not there yet
        return 0


@pytest.mark.slow
def test_a_1000_line_decisions_file_survives_a_kill_and_exports_each_decision_once(
        make_sim: Callable[..., Any], dreads: Dreads, tmp_path: Path) -> None:
    source = _lines(ROOT / "examples" / "contracts.jsonl")
    jobs = tmp_path / "big.jsonl"
    jobs.write_text("".join(json.dumps(_batch_line(s)) + "\n" for s in source),
                    encoding="utf-8")
    n = len(source)
    assert n >= 1000
    db = tmp_path / "big.db"
    sim = make_sim(step_ms=5, max_batch=16)
    args = [DREADS, "run", str(jobs), "--upstream", sim.url, "--db", str(db),
            "--workers", "4", "--chunk-size", "16", "--policy", "fixed", "--draws", "1"]
    env = {**os.environ, "DREADS_MODEL": "dgemma", "DREADS_TOKENIZER": "standin"}
    proc = subprocess.Popen(args, cwd=tmp_path, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 180
        while _done(db) < n // 3:
            assert proc.poll() is None, "dreads run ended before it could be killed"
            assert time.monotonic() < deadline, "too slow to reach a third of the file"
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    assert n // 3 <= _done(db) < n
    rerun = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=400)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert sqlite_rows(db, "SELECT status, count(*) FROM decisions GROUP BY status") == [
        ("done", n)]
    assert sqlite_rows(db, "SELECT count(*) FROM attempts WHERE outcome = 'ok' AND won") == [
        (n,)]
    exported = _export(dreads, "big", db, tmp_path / "big.out.jsonl")
    assert [line["custom_id"] for line in exported] == [s["id"] for s in source]
    for line in exported:
        assert line["error"] is None
        Decision.model_validate(line["response"]["body"])


def test_the_readme_commands_run_as_written(tmp_path: Path) -> None:
    """The "Run a file of Decisions requests" commands of docs/jobfile.md, in a directory with
    the example file and its key under ``examples/``."""
    text = (ROOT / "docs" / "jobfile.md").read_text(encoding="utf-8")
    section = text.split("## Run a file of Decisions requests\n", 1)[1]
    commands = section.split("```bash\n", 1)[1].split("```", 1)[0]
    (tmp_path / "examples").mkdir()
    for name in ("decisions.jsonl", "decisions.key.jsonl"):
        shutil.copy(ROOT / "examples" / name, tmp_path / "examples" / name)
    env = {**os.environ, "PATH": f"{Path(DREADS).parent}:{os.environ['PATH']}",
           "COLUMNS": "200", "NO_COLOR": "1"}
    out = subprocess.run(["bash", "-euo", "pipefail", "-c", commands], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "done 86" in out.stdout and "AUC" in out.stdout
    exported = _lines(tmp_path / "decisions.out.jsonl")
    assert len(exported) == 86
    assert all(Decision.model_validate(line["response"]["body"]) for line in exported)
