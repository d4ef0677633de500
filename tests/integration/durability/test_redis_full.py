"""Workers outlive a full or lost Redis. A private redis-server at ``maxmemory`` with
``noeviction`` answers every write with an OOM error: a real ``dreads worker`` whose Celery
worker dies on it keeps restarting it with a capped backoff (it used to give up after 11
deaths), reports its state in the log and in ``/metrics``, starts it at once when memory is
freed in the middle of a long backoff, and answers the run (SQL kept the work). A Redis killed
for 45 s: the worker is still there when it is back. Times are scaled down with
``DREADS_WORKER_BACKOFF_*``."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.fixtures.services import RedisServer, WorkerProcess, free_port, wait_until
from tests.integration.durability.harness import Sim, Stack, check_invariant

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

N = 400
FULL_S = 60  #: how long Redis stays full (the trial's 5 minutes, scaled down)
FILLER = "dreads-test-filler:"


def _fill(redis: Any) -> None:
    """Write 4 MB of filler, then set ``maxmemory`` below what Redis holds: with
    ``noeviction`` every write that needs memory is refused (OOM) until memory is freed."""
    for i in range(256):
        redis.set(f"{FILLER}{i}", b"x" * 16_384)
    used = int(redis.info("memory")["used_memory"])
    redis.config_set("maxmemory", str(used - 2 * 1024 * 1024))
    with pytest.raises(Exception, match="maxmemory"):  # OutOfMemoryError
        redis.set("one-more", b"x")


def _free(redis: Any) -> None:
    for key in redis.scan_iter(f"{FILLER}*", count=1000):
        redis.delete(key)
    redis.config_set("maxmemory", "0")


def _metric(text: str, name: str) -> float | None:
    found = re.search(rf"^{re.escape(name)} ([0-9.e+-]+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else None


def _waiting(port: int) -> float:
    """The backoff the supervisor is waiting now (0: not in backoff)."""
    scraped = _scrape(port)
    if _metric(scraped, 'dreads_worker_supervisor_state{state="backoff"}') != 1:
        return 0.0
    return _metric(scraped, "dreads_worker_supervisor_backoff_seconds") or 0.0


def _scrape(port: int) -> str:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    except httpx.HTTPError:
        return ""


def test_a_worker_outlives_a_full_redis_and_answers_once_it_has_room(
        stack: Stack, sim: Sim, redis_server: RedisServer,
        worker_factory: Callable[..., WorkerProcess]) -> None:
    stack.submit(N)  # the messages are in Redis before it fills
    redis = redis_server.client()
    _fill(redis)
    port = free_port()
    worker = worker_factory(stack.env(worker_backoff_s=0.5, worker_backoff_max_s=30,
                                      metrics_port=port))
    full_at = time.monotonic()
    restarts = "dreads_worker_supervisor_restarts_total"
    wait_until(lambda: (_metric(_scrape(port), restarts) or 0) >= 1, timeout_s=FULL_S,
               what="the supervisor to restart its Celery worker", interval_s=0.5)
    time.sleep(max(0.0, FULL_S - (time.monotonic() - full_at)))
    assert worker.alive(), worker.log_text()[-4000:]
    assert stack.done() == 0  # nothing could run: Redis refused every write
    scraped = _scrape(port)
    assert (_metric(scraped, restarts) or 0) >= 2, scraped
    states = {s: _metric(scraped, f'dreads_worker_supervisor_state{{state="{s}"}}')
              for s in ("running", "backoff", "gave_up")}
    assert states["gave_up"] == 0 and (states["running"], states["backoff"]) in (
        (1, 0), (0, 1)), states
    log = worker.log_text()
    assert "Unrecoverable error" in log and "OutOfMemoryError" in log
    assert "exited with 1 (1 time(s) in a row); starting it again in 0.5 s" in log
    assert "exited with 1 (2 time(s) in a row); starting it again in 1 s" in log  # doubled
    assert "giving up" not in log

    # free the memory while the supervisor waits a long backoff: it starts at once
    wait_until(lambda: _waiting(port) >= 4, timeout_s=120, what="a backoff of 4 s or more",
               interval_s=0.2)
    _free(redis)
    freed_at = time.monotonic()
    wait_until(lambda: "the broker takes writes again" in worker.log_text(), timeout_s=10,
               what="the supervisor to see the broker back", interval_s=0.2)
    assert time.monotonic() - freed_at < 4
    stack.wait_settled(180)
    check_invariant(stack, n=N)
    assert worker.alive()
    assert _metric(_scrape(port), 'dreads_worker_supervisor_state{state="running"}') == 1


def test_a_worker_outlives_a_lost_redis_and_goes_on_when_it_is_back(
        stack: Stack, sim: Sim, redis_server: RedisServer,
        worker_factory: Callable[..., WorkerProcess]) -> None:
    """Redis killed mid-run and gone for 45 s, then started again (its AOF kept the queue):
    the worker is still there, and the run completes, every decision answered once."""
    stack.submit(N)
    port = free_port()
    worker = worker_factory(stack.env(worker_backoff_s=0.5, worker_backoff_max_s=2,
                                      metrics_port=port))
    stack.wait_done_at_least(N // 8, timeout_s=120)
    redis_server.kill()
    time.sleep(45)
    assert worker.alive(), worker.log_text()[-4000:]
    assert "giving up" not in worker.log_text()
    assert _metric(_scrape(port), 'dreads_worker_supervisor_state{state="gave_up"}') == 0
    redis_server.start()
    stack.wait_settled(180)
    check_invariant(stack, n=N)
    assert worker.alive()
