"""Runs answered by a decision endpoint through Celery: their chunks go to ``dreads.answers``,
which a pod's GPU workers never consume and ``dreads worker --answers`` (tied to no model
server) serves, one request per decision, each run's budget split among its processes."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import func, select

from app.engine import AnswerBy, ReadSettings
from app.store.db import session_scope
from app.store.models import Attempt, Decision
from tests.fixtures.services import RedisServer, WorkerProcess, wait_until
from tests.integration.durability.harness import Sim, Stack, check_invariant

StartWorker = Callable[..., WorkerProcess]


def _counts(stack: Stack, run_id: int) -> dict[str, int]:
    with session_scope(stack.factory) as s:
        rows = s.execute(select(Decision.status, func.count())
                         .where(Decision.run_id == run_id).group_by(Decision.status))
        return {str(k): int(n) for k, n in rows}


def _outcomes(stack: Stack, run_id: int) -> dict[str, int]:
    with session_scope(stack.factory) as s:
        rows = s.execute(select(Attempt.outcome, func.count())
                         .where(Attempt.run_id == run_id).group_by(Attempt.outcome))
        return {str(k): int(n) for k, n in rows}


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_gpu_workers_leave_endpoint_runs_to_answers_workers(
        pg_url: str, redis_server: RedisServer, tmp_path: Path,
        worker_factory: StartWorker) -> None:
    sim = Sim(tmp_path / "sim.log", "--decision-rps", "150", "--decision-max-concurrent", "4")
    try:
        with Stack.open(pg_url, redis_server.url, sim.url) as stack:
            by_endpoint = ReadSettings(answer_by=AnswerBy.SYSTEMONE, answer_url=sim.url,
                                       answer_rps=120.0, answer_concurrency=4)
            endpoint_run = stack.submit(300, name="by-endpoint", settings=by_endpoint,
                                        prefix="e")
            reads_run = stack.submit(300, name="by-reads", prefix="r")
            worker_factory(stack.env(upstream=sim.url))  # a pod's GPU worker
            wait_until(lambda: _counts(stack, reads_run) == {"done": 300}, timeout_s=120,
                       what="the reads run")
            time.sleep(2)  # time enough to take endpoint work, if it would
            assert _counts(stack, endpoint_run) == {"queued": 300}
            assert sim.stats()["decisions"] == 0
            # an answers worker, tied to no model server (its DREADS_UPSTREAM is dead)
            answers = worker_factory(stack.env(upstream="http://127.0.0.1:9", worker_answers=1),
                                     concurrency=2)
            wait_until(lambda: _counts(stack, endpoint_run) == {"done": 300}, timeout_s=120,
                       what="the endpoint run")
            stack.run_id = endpoint_run
            check_invariant(stack, n=300)
            assert _outcomes(stack, endpoint_run) == {"ok": 300}
            stats = sim.stats()
            # one request per decision; inside the budget (split between two processes)
            assert stats["decisions_answered"] == 300 and stats["throttled"] == 0
            assert stats["decision_peak_in_flight"] <= 4
            assert "consumes dreads.answers" in answers.log_text()
    finally:
        sim.stop()


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_an_answers_worker_killed_mid_run_is_taken_over_exactly_once(
        pg_url: str, redis_server: RedisServer, tmp_path: Path,
        worker_factory: StartWorker) -> None:
    """SIGKILL an answers worker while it holds leases: another answers worker takes them over
    after the lease and sweep, and every decision ends done once, with one winning attempt."""
    sim = Sim(tmp_path / "sim.log", "--step-ms", "40", "--max-batch", "8")
    try:
        with Stack.open(pg_url, redis_server.url, sim.url) as stack:
            settings = ReadSettings(answer_by=AnswerBy.SYSTEMONE, answer_url=sim.url,
                                    answer_concurrency=8)
            stack.submit(600, name="killed", settings=settings, chunk_size=16)
            env = stack.env(upstream="http://127.0.0.1:9", worker_answers=1)
            doomed = worker_factory(env)
            stack.wait_done_at_least(100, timeout_s=120, leased=True)
            doomed.kill()
            worker_factory(env)
            stack.wait_settled(150)
            check_invariant(stack, n=600)
            outcomes = _outcomes(stack, stack.run_id)
            assert outcomes["ok"] >= 600 and outcomes.get("worker_lost", 0) > 0
            assert set(outcomes) <= {"ok", "worker_lost"}
    finally:
        sim.stop()
