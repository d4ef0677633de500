"""The server fingerprint of a run: recorded at the first contact with a server when ``submit``
could not reach it (or the run came over HTTP), never by ``resume --dry-run``; and ``resume``
checks the server the user points it at (``--upstream``, else ``DREADS_UPSTREAM``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from app.engine import ReadSettings, settings_hash, settings_to_dict
from app.runs.chunk import Answerers, ChunkPolicy, Delivery, run_chunk
from app.store.db import make_engine, make_sessionmaker, session_scope
from app.store.models import Run
from app.store.runs import DecisionRow, ensure_run, insert_decisions
from app.tokenizer.hf import load_tokenizer
from tests.fixtures.memory_upstream import MEMORY_URL, InMemoryUpstream, memory_sim
from tests.fixtures.runs_cli import CliResult, job_line, sqlite_rows, write_jobs
from tests.fixtures.services import RedisServer, free_port

Dreads = Callable[..., CliResult]


def _fingerprint(db: Path, run: str) -> Any:
    import orjson

    (raw,) = sqlite_rows(db, f"SELECT fingerprint FROM runs WHERE name = '{run}'")[0]
    return orjson.loads(raw) if isinstance(raw, str) else raw


async def test_the_first_chunk_records_the_fingerprint_of_a_run_without_one(
        make_database: Callable[..., str]) -> None:
    engine = make_engine(make_database("sqlite"))
    factory = make_sessionmaker(engine)
    settings = ReadSettings()
    payload = {"state": "s", "questions": {"q": {"type": "noul", "instructions": "ok?"}}}
    with session_scope(factory) as session:
        run, _ = ensure_run(session, name="http", settings=settings_to_dict(settings),
                            settings_hash=settings_hash(settings), upstream=MEMORY_URL,
                            engine="vllm", source=None, replicates=1, fingerprint=None)
        ids = [rid for rid, _ in insert_decisions(session, run.id, [DecisionRow(
            key="d", replicate=0, cell=None, line_no=1, payload=payload, n_questions=1)])]
    upstream = InMemoryUpstream(memory_sim(), retries=0)
    try:
        result = await run_chunk(factory, run.id, ids,
                                 answerers=Answerers(upstream, load_tokenizer("standin")),
                                 policy=ChunkPolicy(lease_s=30, max_in_flight=4),
                                 delivery=Delivery("test"))
    finally:
        await upstream.aclose()
    with session_scope(factory) as session:
        fingerprint = session.scalar(select(Run.fingerprint).where(Run.id == run.id))
    engine.dispose()
    assert result.done == 1
    assert fingerprint is not None
    assert (fingerprint["engine"], fingerprint["model_id"], fingerprint["canvas_length"]) == \
        ("sim", "dgemma", 320)


def test_resume_dry_run_changes_nothing_and_resume_checks_dreads_upstream(
        dreads: Dreads, make_sim: Callable[..., Any], cli_redis: RedisServer,
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "fp.db"
    path = write_jobs(tmp_path / "j.jsonl", [job_line(f"f{i}") for i in range(3)])
    assert dreads("db", "upgrade", "--database-url", str(db)).code == 0
    gone = f"http://127.0.0.1:{free_port()}"  # the server the run was submitted against
    submitted = dreads("submit", str(path), "--run", "moved", "--upstream", gone,
                       "--database-url", str(db), "--broker", cli_redis.url)
    assert submitted.code == 0, submitted.stderr
    assert "fingerprint is recorded at the first worker contact" in " ".join(
        submitted.stderr.split())
    assert _fingerprint(db, "moved") is None

    sim = make_sim()  # the server moved: a restarted pod has a new address
    monkeypatch.setenv("DREADS_UPSTREAM", sim.url)
    dry = dreads("resume", "moved", "--dry-run", "--database-url", str(db))
    assert dry.code == 0, dry.stderr
    assert "would be recorded: dgemma" in dry.stdout and "nothing changed" in dry.stdout
    assert _fingerprint(db, "moved") is None  # a dry run writes nothing

    resumed = dreads("resume", "moved", "--database-url", str(db))
    assert resumed.code == 0, resumed.stderr
    assert (_fingerprint(db, "moved") or {}).get("engine") == "sim"
    assert sqlite_rows(db, "SELECT status, count(*) FROM decisions GROUP BY status") == \
        [("done", 3)]


def _execute(db: Path, sql: str, **params: Any) -> None:
    from sqlalchemy import create_engine, text

    engine = create_engine(f"sqlite:///{db}")
    try:
        with engine.begin() as conn:
            conn.execute(text(sql), params)
    finally:
        engine.dispose()


def test_a_run_records_batch_invariance_and_resume_notes_a_change(
        dreads: Dreads, tmp_path: Path) -> None:
    """The simulator says it is batch-invariant; a run recorded against a server that was not
    (declared) goes on against it with a note, not a refusal."""
    import orjson

    db = tmp_path / "inv.db"
    path = write_jobs(tmp_path / "j.jsonl", [job_line(f"i{i}") for i in range(3)])
    ran = dreads("run", str(path), "--run", "inv", "--upstream", "sim",
                 "--database-url", str(db))
    assert ran.code == 0, ran.stderr
    recorded = _fingerprint(db, "inv")
    assert (recorded["batch_invariant"], recorded["batch_invariant_from"]) == (True, "observed")

    earlier = {**recorded, "batch_invariant": False, "batch_invariant_from": "declared"}
    _execute(db, "UPDATE runs SET fingerprint = :fp", fp=orjson.dumps(earlier).decode())
    _execute(db, "UPDATE decisions SET status = 'pending', finished_at = NULL "
                 "WHERE id = (SELECT min(id) FROM decisions)")
    resumed = dreads("resume", "inv", "--upstream", "sim", "--database-url", str(db))
    assert resumed.code == 0, resumed.stderr
    note = " ".join(resumed.stdout.split())
    assert "batch invariance differs from the run's (off (declared) when recorded, on " \
           "(observed) now)" in note
    assert sqlite_rows(db, "SELECT status, count(*) FROM decisions GROUP BY status") == \
        [("done", 3)]
    assert _fingerprint(db, "inv") == earlier  # the run keeps the server it started on
