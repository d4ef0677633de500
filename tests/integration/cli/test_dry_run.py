"""``submit --dry-run`` and ``run --dry-run`` through the ``dreads`` command (in-process, its
entry point's last line of defence included: ``tests.fixtures.cli_inprocess``): the counts of
the file, a cost only with prices, the exit codes of a submit, and nothing stored or queued."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from app.errors import EXIT_BAD_LINES, EXIT_OK, EXIT_USAGE
from tests.fixtures.cli_inprocess import dreads_in_process as dreads
from tests.fixtures.cli_process import Result, assert_one_line_error
from tests.fixtures.services import RedisServer

ROOT = Path(__file__).resolve().parents[3]
CONTRACTS = ROOT / "examples" / "contracts.jsonl"


def _json(result: Result) -> dict:
    assert result.code == EXIT_OK, result.stderr
    return json.loads(result.stdout)


@pytest.fixture
def jobs(tmp_path: Path) -> Path:
    shutil.copy(CONTRACTS, tmp_path / "contracts.jsonl")
    return tmp_path / "contracts.jsonl"


def test_submit_dry_run_prints_the_counts_and_stores_nothing(
        jobs: Path, redis_server: RedisServer) -> None:
    result = dreads("submit", jobs.name, "--run", "c", "--dry-run", "--database-url", "d.db",
                    "--broker", redis_server.url, cwd=jobs.parent)
    assert result.code == EXIT_OK, result.stderr
    assert "1056 line(s), 1056 valid, 0 rejected; nothing stored, nothing queued" in result.stdout
    assert "reads" in result.stdout and "1,056" in result.stdout and "4,224" in result.stdout
    assert "no token price given" in result.stdout and "$" not in result.stdout
    assert sorted(p.name for p in jobs.parent.iterdir()) == ["contracts.jsonl", "redis"]
    assert redis_server.client().dbsize() == 0


def test_dry_run_counts_reads_at_the_draw_policy(jobs: Path) -> None:
    agree = _json(dreads("run", jobs.name, "--upstream", "sim", "--dry-run", "--json",
                         cwd=jobs.parent))
    assert (agree["decisions"], agree["questions"], agree["reads_per_draw"]) == (1056, 1056,
                                                                                 1056)
    assert agree["reads"] == {"min": 1056, "max": 4224}
    assert agree["input_tokens"]["max"] == 4 * agree["input_tokens"]["min"] > 0
    assert agree["token_cost"] is None
    fixed = _json(dreads("run", jobs.name, "--upstream", "sim", "--dry-run", "--json",
                         "--draws", "2", "--replicates", "3", cwd=jobs.parent))
    assert fixed["reads"] == {"min": 6 * 1056, "max": 6 * 1056}
    assert fixed["input_tokens"]["min"] == 6 * agree["input_tokens"]["min"]
    assert not (jobs.parent / "dreads.db").exists()


def test_decisions_endpoint_cost_is_its_input_tokens_times_the_price(jobs: Path) -> None:
    est = _json(dreads("run", jobs.name, "--answer-by", "decisions", "--answer-url", "sim",
                       "--dry-run", "--json", "--price-input", "0.10", cwd=jobs.parent))
    assert est["requests"] == 1056 and est["reads"] == {"min": 1056, "max": 1056}
    tokens = est["input_tokens"]["min"]
    assert est["token_cost"]["min"] == pytest.approx(tokens * 0.10 / 1e6)
    assert est["token_cost"]["max"] == est["token_cost"]["min"]


def test_decisions_estimate_equals_the_usage_the_reader_reports(jobs: Path) -> None:
    """vLLM's reader (the simulator's, with the same tokenizer) bills what was estimated."""
    args = ("run", jobs.name, "--answer-by", "decisions", "--answer-url", "sim")
    est = _json(dreads(*args, "--dry-run", "--json", cwd=jobs.parent))
    assert dreads(*args, cwd=jobs.parent).code == EXIT_OK
    import sqlite3

    with sqlite3.connect(jobs.parent / "dreads.db") as db:
        usage = [json.loads(u) for (u,) in db.execute("select usage from attempts")]
    assert sum(u["input_tokens"] for u in usage) == est["input_tokens"]["min"]
    assert sum(u["output_tokens"] for u in usage) == est["output_tokens"]["min"]


def test_price_settings_come_from_the_environment(jobs: Path) -> None:
    env = {"DREADS_PRICE_INPUT_PER_MTOK": "1", "DREADS_PRICE_OUTPUT_PER_MTOK": "2"}
    est = _json(dreads("run", jobs.name, "--upstream", "sim", "--dry-run", "--json",
                       "--draws", "1", cwd=jobs.parent, env=env))
    want = est["input_tokens"]["min"] / 1e6 + 2 * est["output_tokens"]["min"] / 1e6
    assert est["token_cost"]["min"] == pytest.approx(want)
    text = dreads("run", jobs.name, "--upstream", "sim", "--dry-run", "--gpu-price-hour",
                  "3.49", cwd=jobs.parent, env=env)
    assert "cost at token prices" in text.stdout
    assert "--gpu-price-hour needs --reads-per-second" in text.stdout


def test_bad_lines_are_reported_with_the_exit_codes_of_a_submit(jobs: Path) -> None:
    lines = jobs.read_text().splitlines()[:3]
    jobs.write_text("\n".join([*lines, "not json", lines[0]]) + "\n")
    plain = dreads("submit", jobs.name, "--run", "c", "--dry-run", cwd=jobs.parent)
    assert plain.code == EXIT_OK, plain.stderr
    assert "2 bad line(s)" in plain.stderr and "duplicate id" in plain.stderr
    assert "5 line(s), 3 valid" in plain.stdout
    failing = dreads("submit", jobs.name, "--run", "c", "--dry-run", "--fail-on-bad-lines",
                     cwd=jobs.parent)
    assert failing.code == EXIT_BAD_LINES
    strict = dreads("submit", jobs.name, "--run", "c", "--dry-run", "--strict",
                    cwd=jobs.parent)
    assert strict.code == EXIT_USAGE and "--strict" in strict.stderr
    assert sorted(p.name for p in jobs.parent.iterdir()) == ["contracts.jsonl"]


def test_a_missing_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    result = dreads("submit", "nope.jsonl", "--run", "c", "--dry-run", cwd=tmp_path)
    assert result.code == EXIT_USAGE and "nope.jsonl" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_an_unreachable_server_says_what_to_pass(jobs: Path) -> None:
    result = dreads("submit", jobs.name, "--run", "c", "--dry-run", "--upstream",
                    "http://127.0.0.1:9", cwd=jobs.parent, model=False)
    assert result.code != EXIT_OK
    assert "pass --model and --tokenizer" in result.stderr


def test_an_estimate_only_flag_without_dry_run_is_refused_before_anything_runs(
        tmp_path: Path) -> None:
    """--reads-per-second prices only the estimate; a submit's --gpu-price-hour would be
    unused (a worker's pod is priced where it runs); --max-cost with --dry-run runs nothing."""
    shutil.copy(CONTRACTS, tmp_path / "jobs.jsonl")
    result = dreads("run", "jobs.jsonl", "--upstream", "sim", "--reads-per-second", "5",
                    cwd=tmp_path)
    assert_one_line_error(result, says="--reads-per-second only price --dry-run's estimate",
                          code=2)
    result = dreads("submit", "jobs.jsonl", "--run", "c", "--gpu-price-hour", "3.49",
                    cwd=tmp_path)
    assert_one_line_error(result, says="priced by DREADS_GPU_PRICE_HOUR where the worker runs",
                          code=2)
    result = dreads("run", "jobs.jsonl", "--upstream", "sim", "--dry-run", "--max-cost", "5",
                    cwd=tmp_path)
    assert_one_line_error(result, says="--max-cost is a run's budget", code=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["jobs.jsonl"]
