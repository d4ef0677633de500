"""The budget with PostgreSQL, Redis and two real workers: a run whose recorded cost reaches
its ``--max-cost`` mid-run pauses (pause kind ``budget``); the decisions already leased finish
and nothing more is claimed, nothing is failed and no attempt is charged but the ``ok`` ones;
the budget is passed by at most what was in flight; ``dreads resume --max-cost`` under the
spent figure is refused, and a higher one completes the run, every decision answered once."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable

import pytest
from sqlalchemy import func, select

from app.store.db import session_scope
from app.store.models import Attempt, Run, RunSpend
from app.store.spend import set_prices
from tests.fixtures.services import ROOT, VENV_BIN, WorkerProcess, wait_until
from tests.integration.durability.harness import N_DECISIONS, Sim, Stack, check_invariant

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

WORKERS, CONCURRENCY, CHUNK = 2, 2, 32
#: Decisions a worker process holds at most: its chunk, and the next one it starts while the
#: slowest decisions of the first finish (the hand-off).
IN_FLIGHT = WORKERS * CONCURRENCY * 2 * CHUNK
PRICE_INPUT = 50.0  #: dollars per million prompt tokens: the run costs tens of dollars
BUDGET = 5.0


def _run_row(stack: Stack) -> tuple[str, str | None, str | None]:
    with session_scope(stack.factory) as s:
        run = s.get(Run, stack.run_id)
        assert run is not None
        return run.status, run.pause_kind, run.pause_reason


def _spent(stack: Stack) -> tuple[float, int]:
    with session_scope(stack.factory) as s:
        cost, decisions = s.execute(select(func.sum(RunSpend.cost), func.sum(RunSpend.decisions))
                                    .where(RunSpend.run_id == stack.run_id)).one()
        return float(cost or 0.0), int(decisions or 0)


def _outcomes(stack: Stack) -> dict[str, int]:
    with session_scope(stack.factory) as s:
        rows = s.execute(select(Attempt.outcome, func.count()).where(
            Attempt.run_id == stack.run_id).group_by(Attempt.outcome)).all()
    return {kind: int(n) for kind, n in rows}


def _resume(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **stack.env()}
    return subprocess.run([str(VENV_BIN / "dreads"), "resume", "durable", *args], env=env,
                          cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_two_workers_pause_a_run_at_its_budget_and_a_higher_one_completes_it(
        stack: Stack, sim: Sim, worker_factory: Callable[..., WorkerProcess]) -> None:
    stack.submit(chunk_size=CHUNK)
    with session_scope(stack.factory) as s:  # what submit --price-input --max-cost records
        set_prices(s, stack.run_id, {"price_input_per_mtok": PRICE_INPUT, "max_cost": BUDGET})
    for _ in range(WORKERS):
        # probes every second: a budget pause is never probed, so it stays paused
        worker_factory(stack.env(breaker_probe_s=1), concurrency=CONCURRENCY)
    wait_until(lambda: _run_row(stack)[0] == "paused", timeout_s=180, what="the run to pause",
               interval_s=0.2)
    _, kind, reason = _run_row(stack)
    assert kind == "budget" and reason is not None
    assert "reached its budget of $5.0000" in reason and "--max-cost USD" in reason
    time.sleep(5)  # what was in flight ends; nothing new is claimed
    counts = stack.counts()
    assert counts.get("leased", 0) == 0 and counts.get("failed", 0) == 0, counts
    assert 0 < counts.get("done", 0) < N_DECISIONS, counts
    # nothing failed; the budget charged nothing but answers (a lease that expired on this
    # loaded machine and was taken over by a redelivery is recorded as worker_lost)
    assert set(_outcomes(stack)) <= {"ok", "worker_lost"}
    spent, recorded = _spent(stack)
    assert recorded >= counts["done"]  # a lost race (a redelivery) spent too
    per_decision = spent / recorded
    overshoot = spent - BUDGET
    assert 0 <= overshoot <= IN_FLIGHT * per_decision, (spent, per_decision)
    done_paused = counts["done"]
    time.sleep(3)
    assert stack.done() == done_paused  # nothing is claimed while it is paused

    refused = _resume(stack)
    assert refused.returncode == 2 and "give a higher budget" in refused.stderr, refused.stderr
    assert _run_row(stack)[0] == "paused"

    resumed = _resume(stack, "--max-cost", "100000")
    assert resumed.returncode == 0, resumed.stderr
    assert "was paused (" in resumed.stdout
    stack.wait_settled(200)
    check_invariant(stack, n=N_DECISIONS)
    assert _run_row(stack) == ("active", None, None)
    assert set(_outcomes(stack)) <= {"ok", "worker_lost"}
    assert _spent(stack)[1] >= N_DECISIONS
