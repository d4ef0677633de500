"""Two ``dreads worker`` processes on one host are two Celery nodes: each names itself
``dreads-<pid>@<host>``, both answer ``celery inspect ping`` under their own name, no
DuplicateNodenameWarning; and the chunk messages they share name the run and the chunk
(``argsrepr``, what Flower shows as the task's arguments)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from sqlalchemy import create_engine, text

from app.broker.names import queue_for
from app.sim import SimHandle, SimOptions, start_sim_thread
from tests.fixtures.cli_process import dreads
from tests.fixtures.services import RedisServer, WorkerProcess, wait_until

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "examples" / "small.jsonl"
VENV_BIN = Path(sys.executable).parent


@pytest.fixture
def sim() -> Iterator[SimHandle]:
    handle = start_sim_thread(SimOptions(key_path=str(ROOT / "examples" / "small.key.jsonl")))
    yield handle
    handle.stop()


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[list[WorkerProcess]]:
    started: list[WorkerProcess] = []
    yield started
    for worker in started:
        worker.stop()


def _ping(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``celery -A workers.celery_app inspect ping`` as an operator runs it."""
    return subprocess.run([str(VENV_BIN / "celery"), "-A", "workers.celery_app", "inspect",
                           "ping", "--timeout", "2"], env={**os.environ, **env}, cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def _done(url: str) -> int:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return int(conn.execute(text(
                "SELECT count(*) FROM decisions WHERE status = 'done'")).scalar_one())
    finally:
        engine.dispose()


@pytest.mark.slow
def test_two_workers_on_one_host_are_two_nodes(
    redis_server: RedisServer, pg_url: str, sim: SimHandle, workers: list[WorkerProcess],
    tmp_path: Path,
) -> None:
    env = {"DREADS_BROKER_URL": redis_server.url, "DREADS_DATABASE_URL": pg_url,
           "DREADS_UPSTREAM": sim.url, "DREADS_CHUNK_SIZE": "2",
           "DREADS_MODEL": "dgemma", "DREADS_TOKENIZER": "standin"}
    submitted = dreads("submit", str(SMALL), "--run", "names", cwd=tmp_path, env=env)
    assert submitted.code == 0, submitted.stderr
    queued = redis_server.client().lrange(queue_for("dgemma", 320), 0, -1)
    shown = sorted(orjson.loads(m)["headers"]["argsrepr"] for m in queued)
    assert shown == ["run=names chunk=1 (2 decisions)", "run=names chunk=2 (2 decisions)",
                     "run=names chunk=3 (1 decision)"]

    for i in range(2):  # no --hostname: the default names them
        workers.append(WorkerProcess(
            [str(VENV_BIN / "dreads"), "worker", "-c", "1", "--loglevel", "INFO"],
            {**os.environ, **env, "PYTHONUNBUFFERED": "1"}, tmp_path / f"w{i}.log"))
    host = socket.gethostname()
    expected = {f"dreads-{w.pid}@{host}" for w in workers}

    def both_answer() -> subprocess.CompletedProcess[str] | None:
        assert all(w.alive() for w in workers), [w.log_text() for w in workers]
        ping = _ping(env)
        return ping if all(f"{name}: OK" in ping.stdout for name in expected) else None

    ping = wait_until(both_answer, timeout_s=120, what="both workers to answer ping",
                      interval_s=1.0)
    assert "2 nodes online" in ping.stdout, ping.stdout
    assert "DuplicateNodenameWarning" not in ping.stdout + ping.stderr
    wait_until(lambda: _done(pg_url) == 5, timeout_s=120, what="the run's 5 decisions")
    for worker in workers:
        log = worker.log_text()
        assert "DuplicateNodenameWarning" not in log, log
        assert f"dreads-{worker.pid}@{host} ready." in log, log
