"""``dreads status``, ``runs`` and a settled ``resume`` read through a bare driver connection
(``app.store.plain``, no SQLAlchemy) and say exactly what the full store says, on PostgreSQL
and SQLite; a store the plain path cannot read (another revision, no file, another kind of
database) is left to the full path."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest
from sqlalchemy import insert, text, update

from app.engine import ReadSettings
from app.runs.embedded import EmbeddedConfig, execute_run
from app.runs.submit import SubmitRequest, submit_job
from app.sim import SimOptions, start_sim_thread
from app.store import status_sql
from app.store.admin import cancel_not_started
from app.store.db import make_engine, make_sessionmaker, session_scope
from app.store.models import Attempt, Decision
from app.store.plain import open_plain
from app.store.runs import require_run
from app.store.views import is_settled, list_runs, run_status
from app.tokenizer.hf import load_tokenizer
from tests.fixtures.job_rows import job_lines

NOW = datetime.now(UTC)


@pytest.fixture(scope="module")
def sim_url() -> Iterator[str]:
    handle = start_sim_thread(SimOptions(low_mass_rate=0.2))
    yield handle.url
    handle.stop()


@pytest.fixture(params=["postgresql", "sqlite"])
def store(request: pytest.FixtureRequest, make_database: Callable[..., str],
          sim_url: str) -> Iterator[str]:
    """A store with an answered run (failed reads retried, low-mass answers, cells), rows
    rejected and failed with reasons, and a cancelled run."""
    url = make_database(request.param)
    engine = make_engine(url)
    factory = make_sessionmaker(engine)
    tokenizer = load_tokenizer("standin")
    for name, n in (("answered", 40), ("stopped", 12)):
        report = submit_job(SubmitRequest(path=Path("job.jsonl"), run_name=name,
                                          settings=ReadSettings(), upstream=sim_url),
                            factory, tokenizer, lines=job_lines(n, prefix=name))
        assert report.run is not None
        if name == "answered":
            asyncio.run(execute_run(factory, report.run, upstream_url=sim_url,
                                    tokenizer=tokenizer, config=EmbeddedConfig(chunk_size=8)))
    with session_scope(factory) as session:
        run = require_run(session, "answered")
        ids = sorted(session.scalars(text(f"SELECT id FROM decisions WHERE run_id = {run.id}")))
        for did, (status, kind, reason) in zip(ids, [
                ("rejected", "bad_request", "prompt of 9,000 tokens, max context 8192"),
                ("rejected", "bad_request", "prompt of 12,345 tokens, max context 8192"),
                ("failed", "timeout", "no answer in 60 s"), ("pending", None, None)],
                strict=False):
            session.execute(update(Decision).where(Decision.id == did).values(
                status=status, last_error_kind=kind, last_error=reason))
        for did, outcome in ((ids[2], "timeout"), (ids[2], "timeout"), (ids[5], "worker_lost")):
            session.execute(insert(Attempt).values(run_id=run.id, decision_id=did,
                                                   outcome=outcome, n_reads=1))
        cancel_not_started(session, require_run(session, "stopped").id)
    engine.dispose()
    yield url


def _session_views(url: str) -> tuple[dict[str, object], list[object], bool]:
    engine = make_engine(url)
    try:
        with session_scope(make_sessionmaker(engine)) as session:
            run = require_run(session, "answered")
            return (run_status(session, run, now=NOW).as_dict(),
                    [o.as_dict() for o in list_runs(session)],
                    is_settled(session, run.id, count_failed=False))
    finally:
        engine.dispose()


def test_the_plain_path_says_what_the_full_store_says(store: str) -> None:
    full_status, full_runs, full_settled = _session_views(store)
    with open_plain(store) as reader:
        assert reader is not None
        run = status_sql.find_run(reader, "answered")
        assert run is not None
        plain_status = status_sql.run_status(reader, run, now=NOW).as_dict()
        plain_runs = [o.as_dict() for o in status_sql.list_runs(reader)]
        plain_settled = status_sql.is_settled(reader, run.id, count_failed=False)
        assert status_sql.find_run(reader, "nope") is None
    assert plain_status == full_status
    assert plain_runs == full_runs
    assert plain_settled is full_settled is False
    # the run shows what was put in: failures by kind, grouped reasons, a cancelled run
    cells = {c["cell"]: c for c in full_status["cells"]}  # type: ignore[index]
    failures: dict[str, int] = {}
    for c in cells.values():
        for kind, n in c["failures"].items():
            failures[kind] = failures.get(kind, 0) + n
    assert failures == {}, "a timeout and a lost worker are the infrastructure's, no cell's"
    infrastructure = full_status["infrastructure"]  # type: ignore[index]
    assert {k["kind"]: k["attempts"] for k in infrastructure["kinds"]} == {
        "timeout": 2, "worker_lost": 1}
    assert sum(c["low_mass"] for c in cells.values()) > 0
    assert [(r["kind"], r["count"]) for r in full_status["reasons"]][:1] == [  # type: ignore[index]
        ("bad_request", 2)]
    stopped = next(o for o in full_runs if o["name"] == "stopped")  # type: ignore[index]
    assert stopped["counts"] == {"cancelled": 12}  # type: ignore[index]


def test_a_store_the_plain_path_cannot_read_is_left_to_the_full_path(
        make_database: Callable[..., str], tmp_path: Path) -> None:
    from alembic import command

    from app.store.migrate import alembic_config

    old = make_database("sqlite")
    command.downgrade(alembic_config(old), "0004")
    for url in (old, f"sqlite:///{tmp_path / 'missing.db'}", "mysql://h/db",
                "postgresql+psycopg://nobody@127.0.0.1:9/none"):
        with open_plain(url) as reader:
            assert reader is None, url
    assert not (tmp_path / "missing.db").exists(), "nothing is created"


def test_the_commands_answer_through_it_without_loading_sqlalchemy(store: str,
                                                                  tmp_path: Path) -> None:
    """``status``, ``runs`` and a ``resume`` of a settled run, in a fresh interpreter:
    the answers of the full store, and no SQLAlchemy loaded."""
    probe = ("import json, sys\nfrom app.cli import main\nsys.argv = ['dreads', *json.loads("
             "sys.argv[1])]\ntry:\n    main()\nexcept SystemExit:\n    pass\n"
             "print(json.dumps('sqlalchemy' in sys.modules), file=sys.stderr)")
    engine = make_engine(store)
    with engine.begin() as conn:  # the answered run settled, for resume
        conn.execute(text("UPDATE decisions SET status = 'done' WHERE status IN "
                          "('pending', 'failed')"))
    engine.dispose()
    full_status, full_runs, _ = _session_views(store)
    env = {"DREADS_DATABASE_URL": store, "PATH": "/usr/bin:/bin"}
    shown = {}
    for args in (["runs", "--json"], ["status", "answered", "--json"],
                 ["resume", "answered", "--json"]):
        done = subprocess.run([sys.executable, "-c", probe, orjson.dumps(args).decode()],
                              capture_output=True, text=True, timeout=60, env=env,
                              cwd=tmp_path)
        assert done.stderr.strip().splitlines()[-1] == "false", (args, done.stderr[-2000:])
        shown[args[0]] = orjson.loads(done.stdout)
    assert shown["runs"] == orjson.loads(orjson.dumps(full_runs))
    same = ("total", "counts", "remaining", "cells", "reasons")  # the rate moves with the clock
    assert {k: shown["status"][k] for k in same} == {k: full_status[k] for k in same}
    assert shown["resume"]["server"] == "every decision is settled: nothing to resume"
    assert shown["resume"]["sweep"]["published"] == 0
