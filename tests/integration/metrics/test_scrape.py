"""A simulated run with injected faults, watched through Prometheus' eyes: what the workers'
exporter and ``dreads serve``'s ``/metrics`` count equals what SQL recorded."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
from sqlalchemy import func, select

from app.store.db import session_scope
from app.store.models import Answer
from app.store.views import LOW_MASS
from tests.fixtures.api import ServeProcess
from tests.fixtures.services import RedisServer, WorkerProcess, free_port, wait_until
from tests.integration.durability.harness import Sim, Stack, outcome_counts
from tests.integration.metrics.scrape import Samples, scrape

KEY = "metrics-test-key-0123456789"
N = 240
FAULTS = ("--fail-rate", "0.04", "--malformed-rate", "0.04", "--low-mass-rate", "0.1",
          "--seed", "17")


def _answer_counts(stack: Stack) -> tuple[int, int]:
    """Answers kept, and those under the low label-mass line, from SQL."""
    with session_scope(stack.factory) as s:
        answers = s.scalar(select(func.count()).select_from(Answer)
                           .where(Answer.run_id == stack.run_id))
        low = s.scalar(select(func.count()).select_from(Answer)
                       .where(Answer.run_id == stack.run_id, Answer.label_mass < LOW_MASS))
    return int(answers or 0), int(low or 0)


def _api_matches(server: ServeProcess, counts: dict[str, int]) -> Samples | None:
    auth = {"authorization": f"Bearer {KEY}"}
    status = httpx.get(f"{server.url}/v1/runs/faulty", headers=auth, timeout=10.0).json()
    assert status["counts"] == counts, "the API's status is SQL's"
    samples = scrape(f"{server.url}/metrics", auth)
    by_status = samples.by("dreads_run_decisions", "status", run="faulty")
    return samples if by_status == {k: float(v) for k, v in counts.items()} else None


def test_scraped_counts_equal_sql_after_a_faulty_run(
        tmp_path: Path, pg_url: str, redis_server: RedisServer,
        worker_factory: Callable[..., WorkerProcess],
        serve_factory: Callable[..., ServeProcess]) -> None:
    sim = Sim(tmp_path / "sim.log", *FAULTS)
    try:
        with Stack.open(pg_url, redis_server.url, sim.url) as stack:
            port = free_port()
            worker = worker_factory(stack.env(), extra=("--metrics-port", str(port)))
            server = serve_factory("--upstream", sim.url, "--database-url", pg_url, env={
                "DREADS_BROKER_URL": redis_server.url, "DREADS_API_KEY": KEY,
                "DREADS_METRICS_CACHE_S": "0.5"})
            stack.submit(N, name="faulty")
            counts = stack.wait_settled(180)
            worker_side = scrape(f"http://127.0.0.1:{port}/metrics")
            attempts = outcome_counts(stack)
            answers, low = _answer_counts(stack)
            api_side = wait_until(lambda: _api_matches(server, counts), timeout_s=30,
                                  what="the API's gauges to catch up with SQL")
            denied = httpx.get(f"{server.url}/metrics", timeout=10.0)
            log = worker.log_text()
    finally:
        sim.stop()
    assert denied.status_code == 403, "the API's metrics need its key"
    # The faults happened, so the comparison below covers them.
    assert attempts.get("server_error", 0) > 0 and attempts.get("malformed_response", 0) > 0
    assert low > 0 and counts.get("done", 0) > 0
    # Workers: one attempt counted per attempt row (the sweeper's lost leases beside them).
    scraped = worker_side.by("dreads_decision_attempts_total", "outcome", run="faulty")
    for kind, n in worker_side.by("dreads_sweeper_expired_leases_total", "outcome").items():
        scraped[kind] = scraped.get(kind, 0.0) + n
    assert scraped == {k: float(v) for k, v in attempts.items()}, log[-3000:]
    assert worker_side.total("dreads_answers_total", run="faulty") == answers
    assert worker_side.total("dreads_answers_low_label_mass_total", run="faulty") == low
    assert worker_side.total("dreads_answer_draws_count", run="faulty") == answers
    # every server_error attempt had a failed read (one round's siblings can fail too)
    assert worker_side.total("dreads_reads_total", run="faulty", outcome="server_error") >= \
        attempts["server_error"]
    assert worker_side.total("dreads_reads_total", run="faulty", outcome="ok") > answers
    assert worker_side.total("dreads_upstream_ready", upstream=sim.url) == 1.0
    # The API: the per-run gauges are SQL's counts.
    failures = api_side.by("dreads_run_failures", "kind", run="faulty")
    assert failures == {k: float(v) for k, v in attempts.items() if k != "ok"}
    assert api_side.total("dreads_run_low_label_mass_answers", run="faulty") == low
    assert api_side.total("dreads_run_remaining_decisions", run="faulty") == 0
    assert api_side.total("dreads_run_decisions_per_second", run="faulty") > 0
    assert api_side.total("http_requests_total", handler="/v1/runs/{run}") >= 1
    assert api_side.total("http_requests_total", handler="/metrics") == 0  # not counted
    assert "dreads_run_eta_seconds" in api_side.names
