"""``dreads_upstream_ready`` (the "upstream not ready" alert) is 0 while a worker waits for its
model server and 1 once the server answers."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx

from tests.fixtures.services import RedisServer, WorkerProcess, free_port, wait_until
from tests.integration.durability.harness import Sim, worker_env
from tests.integration.telemetry.scrape import Samples, scrape


def _ready(port: int, upstream: str) -> Samples | None:
    try:
        samples = scrape(f"http://127.0.0.1:{port}/metrics")
    except httpx.HTTPError:
        return None
    return samples if any(n == "dreads_upstream_ready" and ls.get("upstream") == upstream
                          for n, ls, _ in samples.rows) else None


def test_ready_gauge_follows_the_upstream(
        tmp_path: Path, pg_url: str, redis_server: RedisServer,
        worker_factory: Callable[..., WorkerProcess]) -> None:
    sim = Sim(tmp_path / "sim.log")
    try:
        sim.down(120)
        port = free_port()
        worker = worker_factory(worker_env(database_url=pg_url, broker_url=redis_server.url,
                                           upstream=sim.url),
                                extra=("--metrics-port", str(port)))
        waiting = wait_until(lambda: _ready(port, sim.url), timeout_s=60,
                             what="the worker's exporter")
        assert waiting.total("dreads_upstream_ready", upstream=sim.url) == 0.0
        wait_until(lambda: "waits for its upstream" in worker.log_text(), timeout_s=30,
                   what="the worker to say it waits")
        assert scrape(f"http://127.0.0.1:{port}/metrics").total(
            "dreads_upstream_ready", upstream=sim.url) == 0.0
        httpx.post(f"{sim.url}/sim/up", timeout=5)
        wait_until(lambda: (s := _ready(port, sim.url)) is not None and
                   s.total("dreads_upstream_ready", upstream=sim.url) == 1.0,
                   timeout_s=60, what="the gauge to turn 1 once the upstream answers")
    finally:
        sim.stop()
