"""Services failing under a running worker: Redis restarted (AOF) and wiped, PostgreSQL stopped
in immediate mode, the model server down for ``OUTAGE_S`` (past a lease and the sweeper's
requeue delay) and answering 500s / malformed rows at a fixed rate. Each run has 2,000
decisions; the invariant is checked in SQL."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from app.engine import ReadSettings, build_probe_request, encode_body
from tests.fixtures.services import (
    PostgresServer,
    RedisServer,
    WorkerProcess,
    create_pg_database,
)
from tests.integration.durability.harness import (
    N_DECISIONS,
    Sim,
    Stack,
    check_invariant,
    outcome_counts,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

StartWorker = Callable[..., WorkerProcess]
UPSTREAM_KINDS = ("server_error", "upstream_unreachable", "timeout")
#: How long the model server is down: longer than a lease (6 s) and the sweeper's requeue delay
#: (8 s) of ``worker_env``, so both come into play; the product's own delays do not depend on it.
OUTAGE_S = 10


def test_redis_restarted_with_aof_keeps_the_queue(
        stack: Stack, redis_server: RedisServer, worker_factory: StartWorker) -> None:
    """A clean Redis restart with AOF: queued messages survive and the worker reconnects and
    goes on consuming (requeue_after_s is long, so the sweeper does not re-publish them). A
    message the worker had fetched but not acknowledged when Redis went away comes back after
    the visibility timeout (short here); a worker that Celery lets die on the dropped
    connection is started again by ``dreads worker``."""
    stack.submit()
    worker_factory(stack.env(requeue_after_s=600, visibility_timeout_s=45,
                             task_time_limit_s=30))
    stack.wait_done_at_least(N_DECISIONS // 4, timeout_s=120)
    redis_server.stop()
    time.sleep(2)
    redis_server.start()
    stack.wait_settled(200)
    check_invariant(stack, n=N_DECISIONS)


def test_redis_wiped_mid_run_is_repaired_from_sql(
        stack: Stack, redis_server: RedisServer, worker_factory: StartWorker) -> None:
    """Every Redis key lost (queued and unacked messages, bindings): the sweeper re-publishes
    the decisions SQL still has as queued once their messages are older than requeue_after_s."""
    stack.submit()
    worker_factory(stack.env(requeue_after_s=5))
    stack.wait_done_at_least(N_DECISIONS // 4, timeout_s=120)
    redis_server.wipe()
    stack.wait_settled(150)
    check_invariant(stack, n=N_DECISIONS)


@pytest.fixture
def pg_stack(private_pg: PostgresServer, redis_server: RedisServer,
             sim: Sim) -> Iterator[Stack]:
    url = create_pg_database(private_pg.base_url, "pgstop")
    with Stack.open(url, redis_server.url, sim.url) as opened:
        yield opened


def test_postgres_stopped_immediately_mid_run(
        pg_stack: Stack, private_pg: PostgresServer, worker_factory: StartWorker) -> None:
    """``pg_ctl -m immediate stop`` mid-run, started again 5 s later: failed commits become
    ``db_error`` attempts and are redone; nothing is lost or written twice."""
    stack = pg_stack
    stack.submit()
    worker_factory(stack.env())
    stack.wait_done_at_least(N_DECISIONS // 4, timeout_s=120)
    private_pg.stop("immediate")
    time.sleep(5)
    private_pg.start()
    stack.wait_settled(180)
    check_invariant(stack, n=N_DECISIONS)
    outcomes = outcome_counts(stack)
    assert outcomes.get("db_error", 0) >= 1, outcomes
    assert set(outcomes) <= {"ok", "db_error", "worker_lost"}, outcomes


def test_upstream_down_mid_run(stack: Stack, sim: Sim, worker_factory: StartWorker) -> None:
    """With the breaker off, the workers ride out the outage: failed attempts, then every
    decision done. (With it on, and no read retries, the outage pauses the run instead:
    test_breaker.py.)"""
    stack.submit()
    worker_factory(stack.env(breaker_window=0))
    stack.wait_done_at_least(N_DECISIONS // 4, timeout_s=120)
    sim.down(OUTAGE_S)
    stack.wait_settled(200)
    check_invariant(stack, n=N_DECISIONS)
    outcomes = outcome_counts(stack)
    failures = sum(outcomes.get(k, 0) for k in UPSTREAM_KINDS)
    assert 1 <= failures <= sim.stats()["down_503"], (outcomes, sim.stats())
    assert set(outcomes) <= {"ok", *UPSTREAM_KINDS}, outcomes


@pytest.fixture
def faulty_sim(tmp_path: Path) -> Iterator[Sim]:
    server = Sim(tmp_path / "sim-faulty.log", "--fail-rate", "0.03", "--malformed-rate", "0.02")
    yield server
    server.stop()


def _spend_probe_fault(sim: Sim) -> dict[str, int]:
    """Send the workers' readiness probe once ourselves, so its first delivery (the only one a
    fault can strike) is not a worker's: afterwards every injected fault hit a decision."""
    from app.tokenizer.hf import load_tokenizer

    probe = build_probe_request(ReadSettings(), load_tokenizer("standin"))
    httpx.post(f"{sim.url}/v1/chat/completions", content=encode_body(probe.body),
               headers={"Content-Type": "application/json"}, timeout=10)
    return dict(sim.stats()["faults"])


def test_upstream_faults_at_a_fixed_rate_match_the_attempts(
        pg_url: str, redis_server: RedisServer, faulty_sim: Sim,
        worker_factory: StartWorker) -> None:
    """500s (3%) and malformed rows (2%) on first deliveries, no in-process retries: each
    injected fault is exactly one failed attempt of its kind, and every decision ends done."""
    before = _spend_probe_fault(faulty_sim)
    with Stack.open(pg_url, redis_server.url, faulty_sim.url) as stack:
        stack.submit()
        worker_factory(stack.env())
        stack.wait_settled(200)
        check_invariant(stack, n=N_DECISIONS)
        outcomes = outcome_counts(stack)
    faults = faulty_sim.stats()["faults"]
    assert outcomes.get("server_error", 0) == faults["fail"] - before["fail"] > 0
    assert outcomes.get("malformed_response", 0) == faults["malformed"] - before["malformed"] > 0
    assert outcomes["ok"] == N_DECISIONS
