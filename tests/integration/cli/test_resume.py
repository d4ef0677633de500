"""``dreads resume`` against real PostgreSQL, a private Redis and simulators: settings and
server checks (--force), idempotence on a finished run, publishing what is pending."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from app.broker.names import queue_for
from app.runs.embedded import EmbeddedConfig, execute_run
from app.sim import SimHandle, SimOptions, start_sim_thread
from app.store.db import make_engine, make_sessionmaker, session_scope
from app.store.runs import require_run
from app.tokenizer.hf import load_tokenizer
from tests.fixtures.runs_cli import CliResult, job_line, run_counts, write_jobs
from tests.fixtures.services import RedisServer, free_port

Dreads = Callable[..., CliResult]

QUEUE = queue_for("dgemma", 320)  #: the runs' queue: their model and canvas


@pytest.fixture(scope="module")
def served() -> Iterator[SimHandle]:
    with start_sim_thread(SimOptions()) as handle:
        yield handle


def _finish(db: str, run: str, url: str) -> None:
    engine = make_engine(db)
    factory = make_sessionmaker(engine)
    with session_scope(factory) as session:
        info = require_run(session, run)
    asyncio.run(execute_run(factory, info, upstream_url=url, tokenizer=load_tokenizer("standin"),
                            config=EmbeddedConfig(chunk_size=4, ready_timeout_s=30)))
    engine.dispose()


@pytest.fixture(scope="module")
def done_run(dreads: Dreads, cli_pg: str, cli_redis: RedisServer, served: SimHandle,
             tmp_path_factory: pytest.TempPathFactory) -> str:
    path = write_jobs(tmp_path_factory.mktemp("r") / "r.jsonl",
                      [job_line(f"r{i}") for i in range(6)])
    result = dreads("submit", str(path), "--run", "fin", "--database-url", cli_pg,
                    "--broker", cli_redis.url, "--upstream", served.url, "--json")
    assert result.code == 0, result.stderr
    assert result.json()["fingerprint"]["model_id"] == "dgemma"  # taken at first contact
    _finish(cli_pg, "fin", served.url)
    assert run_counts(cli_pg, "fin") == {"done": 6}
    return "fin"


@pytest.fixture(scope="module")
def open_run(dreads: Dreads, cli_pg: str, served: SimHandle,
             tmp_path_factory: pytest.TempPathFactory) -> str:
    """A run with work left: submitted while the broker was down (its decisions pending)."""
    path = write_jobs(tmp_path_factory.mktemp("o") / "o.jsonl",
                      [job_line(f"o{i}") for i in range(4)])
    result = dreads("submit", str(path), "--run", "open", "--database-url", cli_pg, "--broker",
                    f"redis://127.0.0.1:{free_port()}/0", "--upstream", served.url)
    assert result.code == 0, result.stderr
    assert run_counts(cli_pg, "open") == {"pending": 4}
    return "open"


def _resume(dreads: Dreads, db: str, redis: RedisServer, run: str, *extra: str) -> CliResult:
    return dreads("resume", run, "--database-url", db, "--broker", redis.url, *extra)


def test_finished_run_publishes_nothing(dreads: Dreads, cli_pg: str, cli_redis: RedisServer,
                                       done_run: str, served: SimHandle) -> None:
    cli_redis.wipe()
    for extra in ((), ("--retry-failed",)):
        result = _resume(dreads, cli_pg, cli_redis, done_run, "--upstream", served.url,
                         "--json", *extra)
        assert result.code == 0, result.stderr
        doc = result.json()
        assert doc["sweep"]["published"] == 0 and doc["retried_failed"] == 0
        assert cli_redis.client().llen(QUEUE) == 0
    assert run_counts(cli_pg, done_run) == {"done": 6}


def test_a_settled_run_needs_no_server(dreads: Dreads, cli_pg: str, cli_redis: RedisServer,
                                       done_run: str) -> None:
    """Nothing will be sent, so no server is asked: resume of a finished run is quick (no
    tokenizer, no probe) and works while the pod is gone."""
    gone = f"http://127.0.0.1:{free_port()}"
    result = _resume(dreads, cli_pg, cli_redis, done_run, "--upstream", gone)
    assert result.code == 0, result.stderr
    assert "every decision is settled: nothing to resume" in result.stdout


def test_changed_setting_refused(dreads: Dreads, cli_pg: str, cli_redis: RedisServer,
                                 done_run: str, served: SimHandle) -> None:
    result = _resume(dreads, cli_pg, cli_redis, done_run, "--upstream", served.url,
                     "--policy", "fixed", "--draws", "3")
    assert result.code == 2
    assert "(--draws 1 -> 3; --policy agree -> fixed)" in result.stderr
    same = _resume(dreads, cli_pg, cli_redis, done_run, "--upstream", served.url, "--seed", "0")
    assert same.code == 0, same.stderr


@pytest.mark.parametrize(("options", "needle"), [
    ({"model": "other"}, "'dgemma'"),
    ({"canvas_length": 256}, "refused a read at the run's canvas width 320"),
])
def test_other_server_refused_unless_forced(dreads: Dreads, cli_pg: str, cli_redis: RedisServer,
                                            open_run: str, options: dict, needle: str) -> None:
    with start_sim_thread(SimOptions(**options)) as other:
        refused = _resume(dreads, cli_pg, cli_redis, open_run, "--upstream", other.url)
        assert refused.code in (1, 2)
        assert needle in refused.stderr
        forced = _resume(dreads, cli_pg, cli_redis, open_run, "--upstream", other.url,
                         "--force")
        assert forced.code == 0, forced.stderr
        assert "--force" in forced.stdout


def test_pending_published_and_dry_run(dreads: Dreads, cli_pg: str, cli_redis: RedisServer,
                                      served: SimHandle, tmp_path: Path) -> None:
    path = write_jobs(tmp_path / "p.jsonl", [job_line(f"p{i}") for i in range(5)])
    down = f"redis://127.0.0.1:{free_port()}/0"
    submitted = dreads("submit", str(path), "--run", "pend", "--database-url", cli_pg,
                       "--broker", down, "--upstream", served.url)
    assert submitted.code == 0
    assert run_counts(cli_pg, "pend") == {"pending": 5}
    cli_redis.wipe()
    dry = _resume(dreads, cli_pg, cli_redis, "pend", "--dry-run")
    assert dry.code == 0 and "5 pending" in dry.stdout and "dry run" in dry.stdout
    assert run_counts(cli_pg, "pend") == {"pending": 5}
    result = _resume(dreads, cli_pg, cli_redis, "pend", "--chunk-size", "2", "--json")
    assert result.code == 0, result.stderr
    assert result.json()["sweep"]["published"] == 5
    assert cli_redis.client().llen(QUEUE) == 3
    assert run_counts(cli_pg, "pend") == {"queued": 5}
    again = _resume(dreads, cli_pg, cli_redis, "pend", "--json")
    assert again.json()["sweep"]["published"] == 0  # queued recently: their messages are live
    assert cli_redis.client().llen(QUEUE) == 3
