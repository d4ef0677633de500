"""Workers dying: the whole worker SIGKILLed, a pool child killed, a decision that always kills
its process (attempt cap, no loop), and a warm shutdown. Each run has 2,000 decisions."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

import pytest

from tests.fixtures.services import WorkerProcess, wait_until
from tests.integration.durability.harness import (
    N_DECISIONS,
    Stack,
    check_invariant,
    outcome_counts,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

StartWorker = Callable[..., WorkerProcess]


def test_worker_sigkill_mid_run_then_a_new_worker_finishes(
        stack: Stack, worker_factory: StartWorker) -> None:
    stack.submit()
    first = worker_factory(stack.env())
    stack.wait_done_at_least(N_DECISIONS // 4, timeout_s=120, leased=True)
    first.kill()
    assert stack.counts().get("leased", 0) > 0, "the kill should leave leases behind"
    worker_factory(stack.env())
    stack.wait_settled(150)
    check_invariant(stack, n=N_DECISIONS)
    outcomes = outcome_counts(stack)
    assert outcomes.get("worker_lost", 0) >= 1, outcomes
    assert set(outcomes) <= {"ok", "worker_lost"}, outcomes


def test_pool_child_killed_and_poison_decision_stops_at_the_cap(
        stack: Stack, worker_factory: StartWorker) -> None:
    poison = "d7"
    stack.submit()
    worker = worker_factory(stack.env(max_attempts=3) | {"DREADS_TEST_POISON_KEY": poison})
    stack.wait_done_at_least(N_DECISIONS // 3, timeout_s=120)
    children = worker.children()
    assert children, "a prefork worker has pool children"
    os.kill(children[0], signal.SIGKILL)
    counts = stack.wait_settled(180)
    assert counts.get("failed") == 1, counts
    check_invariant(stack, n=N_DECISIONS, not_done=1)
    outcomes = outcome_counts(stack)
    assert outcomes["poison"] == 1, outcomes
    assert worker.alive(), "the main process survives its children"
    _assert_poison_history(stack, poison)


def _assert_poison_history(stack: Stack, key: str) -> None:
    from sqlalchemy import select

    from app.store.db import session_scope
    from app.store.models import Attempt, Decision

    with session_scope(stack.factory) as s:
        decision = s.scalars(select(Decision).where(Decision.run_id == stack.run_id,
                                                    Decision.key == key)).one()
        kinds = list(s.scalars(select(Attempt.outcome).where(Attempt.decision_id == decision.id)
                               .order_by(Attempt.id)))
    assert decision.status == "failed" and decision.last_error_kind == "poison"
    assert decision.attempts == 3, "claimed exactly up to the cap, then never again"
    assert kinds == ["worker_lost", "worker_lost", "poison"], kinds


def test_warm_shutdown_mid_run_loses_nothing(stack: Stack,
                                            worker_factory: StartWorker) -> None:
    """SIGTERM: running chunks finish, reserved messages go back; no lease is left behind.
    The worker is started with plain ``celery -A workers.celery_app worker``."""
    stack.submit()
    first = worker_factory(stack.env(), celery=True)
    stack.wait_done_at_least(N_DECISIONS // 4, timeout_s=120, leased=True)
    assert first.terminate(timeout_s=60) == 0, first.log_text()[-3000:]
    counts = stack.counts()
    assert counts.get("leased", 0) == 0, f"warm shutdown left leases: {counts}"
    assert counts.get("done", 0) < N_DECISIONS
    worker_factory(stack.env(), celery=True)
    stack.wait_settled(150)
    check_invariant(stack, n=N_DECISIONS)
    assert outcome_counts(stack) == {"ok": N_DECISIONS}, "nothing failed, nothing ran twice"


def test_worker_waits_for_its_upstream_before_consuming(
        stack: Stack, worker_factory: StartWorker) -> None:
    """A worker started while the model server is down logs that it waits, takes no message,
    and runs the chunks once the server answers."""
    from tests.fixtures.services import free_port

    dead = f"http://127.0.0.1:{free_port()}"
    stack.submit(64)
    worker = worker_factory(stack.env(upstream=dead))
    wait_until(lambda: "waits for its upstream" in worker.log_text(), timeout_s=60,
               what="the worker to say it waits")
    assert stack.counts() == {"queued": 64}
    worker.kill()
    worker_factory(stack.env())
    stack.wait_settled(90)
    check_invariant(stack, n=64)
