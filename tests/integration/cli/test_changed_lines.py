"""A line submitted again under an id its run holds: the same content is a quiet no-op; other
content is reported (ids, what to do, exit 2) and never silently dropped, and replaces the stored
decision only with --replace-changed and only while nothing has read it. Real PostgreSQL and a
private Redis (``dreads submit``), and SQLite (``dreads run`` on the simulator)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import orjson
from sqlalchemy import create_engine, text

from tests.fixtures.runs_cli import CliResult, job_line, sqlite_rows, write_jobs
from tests.fixtures.services import RedisServer, free_port

Dreads = Callable[..., CliResult]


def _submit(dreads: Dreads, db: str, redis: RedisServer, path: Path, run: str,
            *extra: str) -> CliResult:
    return dreads("submit", str(path), "--run", run, "--database-url", db, "--broker",
                  redis.url, "--upstream", f"http://127.0.0.1:{free_port()}", *extra)


def _sql(db: str, sql: str, **params: object) -> list[tuple]:
    engine = create_engine(db)
    try:
        with engine.begin() as conn:
            result = conn.execute(text(sql), params)
            return [tuple(r) for r in result] if result.returns_rows else []
    finally:
        engine.dispose()


def _stored(db: str, run: str) -> dict[str, tuple[str, dict]]:
    """Key -> (status, payload) of run ``run``'s decisions."""
    rows = _sql(db, "SELECT d.key, d.status, p.payload FROM decisions d JOIN runs r ON "
                    "r.id = d.run_id JOIN decision_payloads p ON p.decision_id = d.id "
                    "WHERE r.name = :run", run=run)
    return {key: (status, payload if isinstance(payload, dict) else orjson.loads(payload))
            for key, status, payload in rows}


def _files(tmp_path: Path) -> tuple[Path, Path]:
    """The first file (a1, a2, a3) and a corrected one: a2's state and a3's expected answer
    changed, a1 the same, a4 new."""
    first = write_jobs(tmp_path / "first.jsonl", [job_line(k) for k in ("a1", "a2", "a3")])
    fixed = write_jobs(tmp_path / "fixed.jsonl", [
        job_line("a1"), job_line("a2", state="Clause a2: the parties agree, corrected."),
        job_line("a3", expected="no"), job_line("a4")])
    return first, fixed


def test_submitting_the_same_file_again_is_a_quiet_no_op(
        dreads: Dreads, cli_pg: str, cli_redis: RedisServer, tmp_path: Path) -> None:
    first, _ = _files(tmp_path)
    assert _submit(dreads, cli_pg, cli_redis, first, "same").code == 0
    again = _submit(dreads, cli_pg, cli_redis, first, "same", "--json")
    assert again.code == 0, again.stderr
    doc = again.json()
    assert (doc["inserted"], doc["already_present"], doc["changed"]) == (0, 3, [])


def test_a_changed_line_is_reported_with_its_id_and_what_to_do_and_exits_2(
        dreads: Dreads, cli_pg: str, cli_redis: RedisServer, tmp_path: Path) -> None:
    first, fixed = _files(tmp_path)
    assert _submit(dreads, cli_pg, cli_redis, first, "chg").code == 0
    before = _stored(cli_pg, "chg")
    result = _submit(dreads, cli_pg, cli_redis, fixed, "chg")
    assert result.code == 2, result
    assert "1 decision(s) stored, 1 already there, 2 changed" in result.stdout
    assert ("2 line(s) changed under an existing id (ids: a2, a3): the stored decision is "
            "kept") in result.stderr
    assert "submit to a new run, or pass --replace-changed" in result.stderr
    after = _stored(cli_pg, "chg")
    assert {k: after[k] for k in before} == before  # nothing rewritten
    assert "a4" in after  # the valid new line is stored


def test_the_json_report_lists_every_changed_line(
        dreads: Dreads, cli_pg: str, cli_redis: RedisServer, tmp_path: Path) -> None:
    first, fixed = _files(tmp_path)
    _submit(dreads, cli_pg, cli_redis, first, "chg-json")
    result = _submit(dreads, cli_pg, cli_redis, fixed, "chg-json", "--json")
    assert result.code == 2
    doc = result.json()
    assert [(p["line"], p["id"]) for p in doc["changed"]] == [(2, "a2"), (3, "a3")]
    assert doc["replaced"] == 0 and doc["already_present"] == 1


def test_replace_changed_replaces_what_nothing_read_and_keeps_what_was_answered(
        dreads: Dreads, cli_pg: str, cli_redis: RedisServer, tmp_path: Path) -> None:
    first, fixed = _files(tmp_path)
    assert _submit(dreads, cli_pg, cli_redis, first, "rep").code == 0
    _sql(cli_pg, "UPDATE decisions SET status = 'done' WHERE key = 'a3' AND run_id = "
                 "(SELECT id FROM runs WHERE name = 'rep')")
    kept = _stored(cli_pg, "rep")["a3"]
    result = _submit(dreads, cli_pg, cli_redis, fixed, "rep", "--replace-changed")
    assert result.code == 2, result
    assert "1 changed line(s) replaced the stored decision" in result.stderr
    assert "(ids: a3)" in result.stderr and "submit them to a new run" in result.stderr
    stored = _stored(cli_pg, "rep")
    assert stored["a2"][1]["state"] == "Clause a2: the parties agree, corrected."
    assert stored["a2"][0] == "queued"  # still waiting for its worker
    assert stored["a3"] == kept
    again = _submit(dreads, cli_pg, cli_redis, fixed, "rep", "--json")
    assert [p["id"] for p in again.json()["changed"]] == ["a3"]  # a2 is the new content now


def test_rows_stored_without_a_content_hash_are_compared_by_their_payload(
        dreads: Dreads, cli_pg: str, cli_redis: RedisServer, tmp_path: Path) -> None:
    first, fixed = _files(tmp_path)
    assert _submit(dreads, cli_pg, cli_redis, first, "old").code == 0
    _sql(cli_pg, "UPDATE decisions SET content_hash = NULL WHERE run_id = "
                 "(SELECT id FROM runs WHERE name = 'old')")
    assert _submit(dreads, cli_pg, cli_redis, first, "old").code == 0
    result = _submit(dreads, cli_pg, cli_redis, fixed, "old", "--json")
    assert [p["id"] for p in result.json()["changed"]] == ["a2", "a3"]


def test_strict_refuses_a_file_with_a_changed_line(
        dreads: Dreads, cli_pg: str, cli_redis: RedisServer, tmp_path: Path) -> None:
    first, fixed = _files(tmp_path)
    _submit(dreads, cli_pg, cli_redis, first, "strict-chg")
    result = _submit(dreads, cli_pg, cli_redis, fixed, "strict-chg", "--strict")
    assert result.code == 2
    assert "a4" not in _stored(cli_pg, "strict-chg")


def test_run_reports_a_changed_line_of_an_answered_decision(dreads: Dreads,
                                                              tmp_path: Path) -> None:
    first, fixed = _files(tmp_path)
    db = tmp_path / "d.db"
    base = ("--upstream", "sim", "--run", "emb", "--database-url", str(db))
    assert dreads("run", str(first), *base).code == 0
    result = dreads("run", str(fixed), *base, "--replace-changed")
    assert result.code == 2, result
    assert "2 line(s) changed under an existing id (ids: a2, a3)" in result.stderr
    assert "submit them to a new run" in result.stderr
    rows = sqlite_rows(db, "SELECT key, status FROM decisions ORDER BY key")
    assert rows == [("a1", "done"), ("a2", "done"), ("a3", "done"), ("a4", "done")]
