"""``dreads resume`` against the durable core: a finished run publishes nothing, a changed
setting is refused, and a run whose messages Redis lost is re-published and completed."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from app.broker.names import queue_for
from tests.fixtures.services import ROOT, VENV_BIN, RedisServer, WorkerProcess
from tests.integration.durability.harness import Stack, check_invariant

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

N = 300


def _dreads(stack: Stack, *args: str, **env: Any) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, **stack.env(**env)}
    return subprocess.run([str(VENV_BIN / "dreads"), *args], env=full, cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def _queue_length(redis: RedisServer) -> int:
    return int(redis.client().llen(queue_for("dgemma", 320)))


def test_resume_finished_run_publishes_nothing_and_refuses_changed_settings(
        stack: Stack, redis_server: RedisServer,
        worker_factory: Callable[..., WorkerProcess]) -> None:
    stack.submit(N)
    worker = worker_factory(stack.env())
    stack.wait_settled(120)
    worker.terminate(timeout_s=60)
    check_invariant(stack, n=N)
    for _ in range(2):
        before = _queue_length(redis_server)
        done = _dreads(stack, "resume", "durable", "--json", requeue_after_s=0)
        assert done.returncode == 0, done.stderr
        report = orjson.loads(done.stdout)
        assert report["sweep"]["published"] == 0 and report["sweep"]["messages"] == 0
        assert _queue_length(redis_server) == before
    # Under load the worker's sweeper may have re-published a chunk whose message was slow to
    # be taken (a harmless duplicate, acked without work); what matters is that a refused
    # resume adds nothing to what is there.
    before = _queue_length(redis_server)
    refused = _dreads(stack, "resume", "durable", "--threshold", "0.3")
    assert refused.returncode != 0
    assert "threshold" in (refused.stdout + refused.stderr)
    assert _queue_length(redis_server) == before


def test_resume_republishes_what_redis_lost(
        stack: Stack, redis_server: RedisServer,
        worker_factory: Callable[..., WorkerProcess]) -> None:
    """Submitted while no worker runs, then Redis loses every message: ``resume`` publishes
    every queued decision again (requeue_after_s 0) and a worker completes the run."""
    stack.submit(N)
    redis_server.wipe()
    done = _dreads(stack, "resume", "durable", "--json", requeue_after_s=0)
    assert done.returncode == 0, done.stderr
    assert orjson.loads(done.stdout)["sweep"]["published"] == N
    assert _queue_length(redis_server) == -(-N // 32)
    worker_factory(stack.env(requeue_after_s=600))
    stack.wait_settled(120)
    check_invariant(stack, n=N)
