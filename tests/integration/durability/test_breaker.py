"""The breaker with PostgreSQL, Redis and two real workers: the simulator turns to 503 on every
read mid-run; the run pauses within the window, fewer than a window of attempts are charged,
nothing more is claimed while it is paused, and once the faults stop ``dreads resume``
completes it, every decision answered once; with probes on (the default), the workers resume
it by themselves once the simulator answers again, one probe per interval between them."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable

import pytest
from sqlalchemy import func, select

from app.runs.breaker import TRIPPING
from app.store.db import session_scope
from app.store.models import Attempt, Run
from tests.fixtures.services import ROOT, VENV_BIN, WorkerProcess, wait_until
from tests.integration.durability.harness import N_DECISIONS, Sim, Stack, check_invariant

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

WINDOW = 50  #: the default breaker window


def _run_row(stack: Stack) -> tuple[str, str | None]:
    with session_scope(stack.factory) as s:
        run = s.get(Run, stack.run_id)
        assert run is not None
        return run.status, run.pause_reason


def _attempts(stack: Stack, kinds: frozenset[str] | set[str]) -> int:
    with session_scope(stack.factory) as s:
        return int(s.scalar(select(func.count()).select_from(Attempt).where(
            Attempt.run_id == stack.run_id, Attempt.outcome.in_(list(kinds)))) or 0)


def test_two_workers_pause_a_run_whose_server_fails_every_read(
        stack: Stack, sim: Sim, worker_factory: Callable[..., WorkerProcess]) -> None:
    stack.submit()
    for _ in range(2):
        worker_factory(stack.env(read_retries=1, breaker_probe_s=0))  # resumed by hand
    stack.wait_done_at_least(N_DECISIONS // 5, timeout_s=120)
    sim.down(3600)
    fault_at = time.monotonic()
    wait_until(lambda: _run_row(stack)[0] == "paused", timeout_s=60, what="the run to pause",
               interval_s=0.2)
    took_s = time.monotonic() - fault_at
    time.sleep(5)  # what was in flight ends; nothing new is claimed
    charged = _attempts(stack, TRIPPING)
    assert 0 < charged < WINDOW, (charged, took_s)
    status, reason = _run_row(stack)
    assert status == "paused" and reason is not None
    assert "attempts failed with server_error" in reason and "`dreads resume durable`" in reason
    counts = stack.counts()
    assert counts.get("leased", 0) == 0 and counts.get("failed", 0) == 0, counts
    attempts_paused = _attempts(stack, {"ok", *TRIPPING})
    time.sleep(3)
    assert _attempts(stack, {"ok", *TRIPPING}) == attempts_paused  # no attempt is charged

    sim.down(0)
    env = {**os.environ, **stack.env()}
    resumed = subprocess.run([str(VENV_BIN / "dreads"), "resume", "durable"], env=env,
                             cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    assert "was paused (" in resumed.stdout
    stack.wait_settled(200)
    check_invariant(stack, n=N_DECISIONS)
    assert _run_row(stack) == ("active", None)


def test_two_workers_resume_a_paused_run_by_themselves_when_the_server_is_back(
        stack: Stack, sim: Sim, worker_factory: Callable[..., WorkerProcess]) -> None:
    stack.submit()
    workers = [worker_factory(stack.env(read_retries=1, breaker_probe_s=1)) for _ in range(2)]
    stack.wait_done_at_least(N_DECISIONS // 5, timeout_s=120)
    sim.down(12)  # the simulator's outage knob: 503 on every model route for 12 s
    down_at = time.monotonic()
    wait_until(lambda: _run_row(stack)[0] == "paused", timeout_s=60, what="the run to pause",
               interval_s=0.2)
    wait_until(lambda: _run_row(stack)[0] == "active", timeout_s=60,
               what="the run to resume by itself", interval_s=0.2)
    assert time.monotonic() - down_at >= 11  # not before the server answered
    stack.wait_settled(200)
    check_invariant(stack, n=N_DECISIONS)
    assert _run_row(stack) == ("active", None)
    logs = "".join(w.log_text() for w in workers)
    # one worker took the first probe and said so; one resumed it
    assert logs.count("run durable paused: server unreachable since ") == 1, logs[-3000:]
    assert "probing every 1 s" in logs
    assert logs.count("run durable resumed at ") == 1
    assert "(its server answered a probe read)" in logs
