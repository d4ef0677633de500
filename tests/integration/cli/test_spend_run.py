"""Spend and budgets through the ``dreads`` process: a run answered by ``/v1/decisions`` of a
real ``dreads serve`` (its usage real token counts from the simulator's reads) reports a cost
per 1,000 decisions equal to its tokens at the price; ``dreads run --max-cost`` pauses mid-run
(nothing failed, no attempt charged), refuses to go on under the same budget, and
``--max-cost HIGHER`` completes it, every decision answered once; a run with no price shows
tokens and GPU-seconds and no dollar figure."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.fixtures.runs_cli import job_line, sqlite_rows, write_jobs

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

DREADS = str(Path(sys.executable).parent / "dreads")
PRICE_INPUT = 0.10  #: OpenAI's Decisions price, dollars per million input tokens


def _env(**extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("DREADS_")}
    return {**base, "NO_COLOR": "1", "COLUMNS": "200", "DREADS_MODEL": "dgemma",
            "DREADS_TOKENIZER": "standin", **extra}


def _dreads(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([DREADS, *args], cwd=cwd, env=_env(**env), capture_output=True,
                          text=True, timeout=240)


def _count(db: Path, sql: str) -> int:
    return int(sqlite_rows(db, sql)[0][0])


def _usage_tokens(db: Path) -> tuple[int, int, int]:
    """(input, output, decisions) from the attempts' usage objects as the endpoint gave them."""
    tok_in = tok_out = n = 0
    for (usage,) in sqlite_rows(db, "SELECT usage FROM attempts WHERE outcome = 'ok'"):
        body = orjson.loads(usage) if isinstance(usage, str) else usage
        tok_in += int(body.get("input_tokens") or body.get("prompt_tokens") or 0)
        tok_out += int(body.get("output_tokens") or body.get("completion_tokens") or 0)
        n += 1
    return tok_in, tok_out, n


def test_hosted_run_reports_cost_per_1000_decisions_as_tokens_times_price(
        serve_factory: Callable[..., Any], tmp_path: Path) -> None:
    endpoint = serve_factory("--upstream", "sim")
    n = 40
    path = write_jobs(tmp_path / "h.jsonl", [job_line(f"h{i:03d}") for i in range(n)])
    db = tmp_path / "h.db"
    ran = _dreads(tmp_path, "run", str(path), "--db", str(db), "--run", "h",
                  "--answer-by", "decisions", "--answer-url", endpoint.url,
                  "--price-input", str(PRICE_INPUT), "--price-output", "0")
    assert ran.returncode == 0, ran.stderr[-2000:]
    tok_in, tok_out, decisions = _usage_tokens(db)
    assert decisions == n and tok_in > 0
    report = _dreads(tmp_path, "report", "h", "--database-url", f"sqlite:///{db}", "--json")
    assert report.returncode == 0, report.stderr[-2000:]
    spend = json.loads(report.stdout)["spend"]
    run = spend["run"]
    assert (run["input_tokens"], run["output_tokens"], run["decisions"]) == (tok_in, tok_out, n)
    assert run["gpu_seconds"] == 0  # a hosted endpoint: no pod time
    expected = tok_in * PRICE_INPUT / 1e6
    assert run["cost_usd"] == pytest.approx(expected, rel=1e-9)
    assert run["cost_per_1000_usd"] == pytest.approx(expected / n * 1000, rel=1e-9)
    text = _dreads(tmp_path, "report", "h", "--database-url", f"sqlite:///{db}")
    assert "spend" in text.stdout and f"${expected / n * 1000:,.4f}" in text.stdout
    status = _dreads(tmp_path, "status", "h", "--database-url", f"sqlite:///{db}", "--json")
    shown = json.loads(status.stdout)["spend"]
    assert shown["cost_usd"] == pytest.approx(expected, rel=1e-6)
    assert shown["projected_cost_usd"] == pytest.approx(expected, rel=1e-6)  # all done


def test_run_pauses_at_its_budget_and_a_higher_one_completes_it(
        make_sim: Callable[..., Any], tmp_path: Path) -> None:
    n = 400
    path = write_jobs(tmp_path / "b.jsonl", [job_line(f"b{i:03d}") for i in range(n)])
    db = tmp_path / "b.db"
    sim = make_sim()
    # a price so that the whole run costs several dollars, and a budget of a fraction of it
    args = ["run", str(path), "--upstream", sim.url, "--db", str(db), "--run", "b",
            "--price-input", "100", "--chunk-size", "8", "--workers", "2"]
    paused = _dreads(tmp_path, *args, "--max-cost", "0.5")
    assert paused.returncode == 1, paused.stderr[-2000:]
    said = " ".join(paused.stderr.split())
    assert "paused: recorded cost $" in said and "reached its budget of $0.5000" in said
    assert "running this same command again with a higher --max-cost also resumes it" in said
    assert sqlite_rows(db, "SELECT status, pause_kind FROM runs") == [("paused", "budget")]
    counts = dict(sqlite_rows(db, "SELECT status, count(*) FROM decisions GROUP BY status"))
    assert 0 < counts.get("done", 0) < n and not counts.get("failed") and not counts.get("leased")
    assert sqlite_rows(db, "SELECT DISTINCT outcome FROM attempts") == [("ok",)]
    spent = float(sqlite_rows(db, "SELECT sum(cost) FROM run_spend")[0][0])
    per_decision = spent / counts["done"]
    # passed by at most what was in flight: --workers chunks of --chunk-size decisions
    assert 0.5 <= spent <= 0.5 + 2 * 8 * per_decision * 1.5

    again = _dreads(tmp_path, "resume", "b", "--database-url", f"sqlite:///{db}",
                    "--upstream", sim.url)
    assert again.returncode == 2 and "give a higher budget" in again.stderr, again.stderr
    rerun = _dreads(tmp_path, *args, "--max-cost", "0.5")  # the same budget: refused too
    assert rerun.returncode == 2 and "give a higher budget" in rerun.stderr, rerun.stderr
    assert sqlite_rows(db, "SELECT status FROM runs") == [("paused",)]

    done = _dreads(tmp_path, "resume", "b", "--database-url", f"sqlite:///{db}",
                   "--upstream", sim.url, "--max-cost", "1000")
    assert done.returncode == 0, done.stderr[-2000:]
    assert sqlite_rows(db, "SELECT status, count(*) FROM decisions GROUP BY status") == [
        ("done", n)]
    assert _count(db, "SELECT count(*) FROM attempts WHERE outcome = 'ok' AND won") == n
    assert sqlite_rows(db, "SELECT DISTINCT outcome FROM attempts") == [("ok",)]
    assert _count(db, "SELECT sum(decisions) FROM run_spend") >= n
    assert sqlite_rows(db, "SELECT status, max_cost FROM runs") == [("active", 1000.0)]


def test_a_run_without_a_price_shows_tokens_and_no_dollars(
        make_sim: Callable[..., Any], tmp_path: Path) -> None:
    path = write_jobs(tmp_path / "f.jsonl", [job_line(f"f{i:03d}") for i in range(30)])
    db = tmp_path / "f.db"
    sim = make_sim()
    ran = _dreads(tmp_path, "run", str(path), "--upstream", sim.url, "--db", str(db),
                  "--run", "f")
    assert ran.returncode == 0, ran.stderr[-2000:]
    url = f"sqlite:///{db}"
    status = _dreads(tmp_path, "status", "f", "--database-url", url)
    assert "spend: no price set: " in status.stdout and "$" not in status.stdout
    shown = json.loads(_dreads(tmp_path, "status", "f", "--database-url", url,
                               "--json").stdout)["spend"]
    assert shown["cost_usd"] is None and shown["projected_cost_usd"] is None
    assert shown["input_tokens"] > 0 and shown["output_tokens"] > 0
    assert shown["gpu_seconds"] > 0 and shown["reads"] >= 30
    listed = json.loads(_dreads(tmp_path, "runs", "--database-url", url, "--json").stdout)
    assert listed[0]["spend"]["input_tokens"] == shown["input_tokens"]
    report = json.loads(_dreads(tmp_path, "report", "f", "--database-url", url,
                                "--json").stdout)
    assert report["spend"]["run"]["cost_usd"] is None
    assert report["spend"]["run"]["cost_per_1000_usd"] is None
    exported = _dreads(tmp_path, "export", "f", "--database-url", url, "-o",
                       "f.answers.jsonl")
    assert exported.returncode == 0, exported.stderr
    assert "spend of run 'f': no price set: " in exported.stderr
    assert len((tmp_path / "f.answers.jsonl").read_text().splitlines()) == 30
