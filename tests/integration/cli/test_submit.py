"""``dreads submit`` against real PostgreSQL and a private Redis: bad lines, --strict,
OpenAI-batch lines, re-submit, replicates, settings mismatch, a broker that is down."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from sqlalchemy import create_engine, text

from app.broker.names import queue_for
from tests.fixtures.runs_cli import CliResult, job_line, write_jobs
from tests.fixtures.services import RedisServer, free_port

Dreads = Callable[..., CliResult]

QUEUE = queue_for("dgemma", 320)  #: the runs' queue: their model and canvas


def _submit(dreads: Dreads, db: str, redis: RedisServer, path: Path, run: str,
            *extra: str) -> CliResult:
    return dreads("submit", str(path), "--run", run, "--database-url", db,
                  "--broker", redis.url, "--upstream", f"http://127.0.0.1:{free_port()}",
                  "--chunk-size", "2", "--json", *extra)


def _rows(db: str, sql: str, **params: object) -> list[tuple]:
    engine = create_engine(db)
    try:
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(text(sql), params)]
    finally:
        engine.dispose()


def _statuses(db: str, run: str) -> dict[str, int]:
    sql = ("SELECT d.status, count(*) FROM decisions d JOIN runs r ON r.id = d.run_id "
           "WHERE r.name = :run GROUP BY d.status")
    return dict(_rows(db, sql, run=run))


def test_bad_lines_reported_and_good_lines_kept(dreads: Dreads, cli_pg: str,
                                                cli_redis: RedisServer, tmp_path: Path) -> None:
    cli_redis.wipe()
    lines = [job_line("a1"), "{not json", job_line("a2"),
             orjson.dumps({"id": "a3", "questions": {}}).decode(), job_line("a1"),
             job_line("a4")]
    result = _submit(dreads, cli_pg, cli_redis, write_jobs(tmp_path / "j.jsonl", lines), "bad")
    assert result.code == 0, result.stderr
    doc = result.json()
    bad = {p["line"]: p["reason"] for p in doc["bad_lines"]}
    assert sorted(bad) == [2, 4, 5]
    assert "JSON" in bad[2]
    assert "duplicate id 'a1' (first on line 1)" in bad[5]
    assert doc["inserted"] == 3 and doc["valid"] == 3 and doc["lines"] == 6
    assert _statuses(cli_pg, "bad") == {"queued": 3}
    assert cli_redis.client().llen(QUEUE) == 2  # 3 decisions in chunks of 2
    assert doc["fingerprint"] is None and "fingerprint_error" in doc


def test_strict_refuses_whole_file(dreads: Dreads, cli_pg: str, cli_redis: RedisServer,
                                   tmp_path: Path) -> None:
    cli_redis.wipe()
    path = write_jobs(tmp_path / "j.jsonl", [job_line("s1"), "[1, 2]", job_line("s2")])
    result = dreads("submit", str(path), "--run", "strict", "--database-url", cli_pg,
                    "--broker", cli_redis.url, "--strict")
    assert result.code == 2
    assert "line" in result.stderr and "nothing was written" in result.stderr
    assert _rows(cli_pg, "SELECT count(*) FROM runs WHERE name = 'strict'") == [(0,)]
    assert cli_redis.client().llen(QUEUE) == 0


def test_batch_style_lines_resubmit_and_replicates(dreads: Dreads, cli_pg: str,
                                                   cli_redis: RedisServer,
                                                   tmp_path: Path) -> None:
    cli_redis.wipe()
    batch = {"custom_id": "b1", "method": "POST", "url": "/v1/systemone",
             "body": {"state": "Clause 1: x.", "questions": {
                 "ok": {"type": "noul", "instructions": "Is it lawful?"}}}}
    path = write_jobs(tmp_path / "j.jsonl", [orjson.dumps(batch).decode(), job_line("b2")])
    first = _submit(dreads, cli_pg, cli_redis, path, "rep", "--replicates", "3")
    assert first.code == 0, first.stderr
    assert first.json()["inserted"] == 6
    keys = _rows(cli_pg, "SELECT d.key, d.replicate FROM decisions d JOIN runs r ON "
                 "r.id = d.run_id WHERE r.name = 'rep' ORDER BY 1, 2")
    assert keys == [(k, i) for k in ("b1", "b2") for i in range(3)]
    messages = cli_redis.client().llen(QUEUE)
    again = _submit(dreads, cli_pg, cli_redis, path, "rep")
    assert again.code == 0, again.stderr
    assert again.json()["inserted"] == 0 and again.json()["already_present"] == 6
    assert cli_redis.client().llen(QUEUE) == messages
    listed = dreads("runs", "--database-url", cli_pg)
    assert listed.code == 0, listed.stderr
    header = next(line for line in listed.stdout.splitlines() if "replicates" in line)
    row = next(line for line in listed.stdout.splitlines() if line.startswith("│ rep "))
    column = header.index("replicates")
    assert row[column:column + len("replicates")].strip() == "3", listed.stdout


def test_status_right_after_a_priced_submit_shows_its_prices(
        dreads: Dreads, cli_pg: str, cli_redis: RedisServer, tmp_path: Path) -> None:
    cli_redis.wipe()
    path = write_jobs(tmp_path / "j.jsonl", [job_line("p1"), job_line("p2")])
    submitted = _submit(dreads, cli_pg, cli_redis, path, "priced", "--price-input", "0.10",
                        "--max-cost", "1")
    assert submitted.code == 0, submitted.stderr
    shown = dreads("status", "priced", "--database-url", cli_pg)
    assert shown.code == 0, shown.stderr
    line = next(x for x in shown.stdout.splitlines() if x.startswith("spend:"))
    assert line.startswith("spend: $0.0000 so far, budget $1.0000 (0 input + 0 output"), line
    spend = dreads("status", "priced", "--database-url", cli_pg, "--json").json()["spend"]
    assert (spend["cost_usd"], spend["price_input_per_mtok"], spend["max_cost_usd"]) == (
        0.0, 0.10, 1.0)


def test_existing_run_under_other_settings_refused(dreads: Dreads, cli_pg: str,
                                                   cli_redis: RedisServer,
                                                   tmp_path: Path) -> None:
    path = write_jobs(tmp_path / "j.jsonl", [job_line("m1")])
    assert _submit(dreads, cli_pg, cli_redis, path, "mis").code == 0
    result = _submit(dreads, cli_pg, cli_redis, path, "mis", "--seed", "7")
    assert result.code == 2
    assert "(--seed 0 -> 7)" in result.stderr and "new run name" in result.stderr


def test_broker_down_leaves_rows_pending(dreads: Dreads, cli_pg: str, tmp_path: Path) -> None:
    path = write_jobs(tmp_path / "j.jsonl", [job_line("p1"), job_line("p2")])
    result = dreads("submit", str(path), "--run", "nobroker", "--database-url", cli_pg,
                    "--broker", f"redis://127.0.0.1:{free_port()}/0",
                    "--upstream", f"http://127.0.0.1:{free_port()}")
    assert result.code == 0
    assert "sweeper" in result.stderr or "resume" in result.stderr
    assert _statuses(cli_pg, "nobroker") == {"pending": 2}


def test_missing_schema_says_what_to_run(dreads: Dreads, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'empty.db'}"
    path = write_jobs(tmp_path / "j.jsonl", [job_line("x1")])
    for args in (("submit", str(path), "--run", "x"), ("status", "x"), ("runs",)):
        result = dreads(*args, "--database-url", db)
        assert result.code == 2
        assert "dreads db upgrade" in result.stderr
    up = dreads("db", "upgrade", "--database-url", db)
    assert up.code == 0, up.stderr
    assert dreads("db", "current", "--database-url", db).code == 0
    assert dreads("runs", "--database-url", db).code == 0


@pytest.mark.parametrize("missing", ["nope.jsonl"])
def test_missing_file(dreads: Dreads, cli_pg: str, tmp_path: Path, missing: str) -> None:
    result = dreads("submit", str(tmp_path / missing), "--run", "nofile",
                    "--database-url", cli_pg)
    assert result.code == 2 and "cannot read job file" in result.stderr


def test_a_server_with_a_narrower_canvas_stops_submit_before_anything_is_queued(
        dreads: Dreads, cli_pg: str, cli_redis: RedisServer, tmp_path: Path,
        make_sim: Callable[..., object]) -> None:
    """/v1/models does not report the canvas: a probe read at the run's full width proves it."""
    cli_redis.wipe()
    narrow = make_sim(canvas_length=160)
    path = write_jobs(tmp_path / "j.jsonl", [job_line("n1"), job_line("n2")])
    result = dreads("submit", str(path), "--run", "narrow", "--database-url", cli_pg,
                    "--broker", cli_redis.url, "--upstream", narrow.url,  # type: ignore[attr-defined]
                    "--canvas", "320")
    assert result.code != 0
    assert "refused a read at the run's canvas width 320" in result.stderr
    assert "--canvas" in result.stderr and "Traceback" not in result.stderr
    assert _statuses(cli_pg, "narrow") == {}
    assert cli_redis.client().llen(QUEUE) == 0


def test_an_api_key_is_sent_and_a_missing_one_stops_submit(
        dreads: Dreads, cli_pg: str, cli_redis: RedisServer, tmp_path: Path,
        make_sim: Callable[..., object], monkeypatch: pytest.MonkeyPatch) -> None:
    cli_redis.wipe()
    keyed = make_sim(api_key="pod-key")
    path = write_jobs(tmp_path / "j.jsonl", [job_line("k1")])

    def submit(run: str) -> CliResult:
        return dreads("submit", str(path), "--run", run, "--database-url", cli_pg, "--broker",
                      cli_redis.url, "--upstream", keyed.url, "--json")  # type: ignore[attr-defined]

    refused = submit("keyless")
    assert refused.code != 0 and "DREADS_UPSTREAM_API_KEY" in refused.stderr
    assert _statuses(cli_pg, "keyless") == {}
    monkeypatch.setenv("DREADS_UPSTREAM_API_KEY", "pod-key")
    from app.config import get_settings

    get_settings.cache_clear()
    accepted = submit("keyed")
    assert accepted.code == 0, accepted.stderr
    assert accepted.json()["fingerprint"]["model_id"] == "dgemma"
    assert _statuses(cli_pg, "keyed") == {"queued": 1}
    runs = _rows(cli_pg, "SELECT settings::text, coalesce(fingerprint::text, '') FROM runs "
                         "WHERE name = 'keyed'")
    assert "pod-key" not in repr(runs)  # the key is never stored with the run
