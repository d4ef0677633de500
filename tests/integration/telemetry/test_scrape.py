"""A simulated run with injected faults, watched through Prometheus' eyes: what the workers'
exporter and ``dreads serve``'s ``/metrics`` count equals what SQL recorded, and every metric
the Grafana dashboard and the alerts query is one these scrapes expose."""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
from sqlalchemy import func, select

from app.errors import outcome_class
from app.store.db import session_scope
from app.store.models import Answer
from app.store.spend import spend_of
from app.store.views import LOW_MASS
from tests.fixtures.api import StartServe
from tests.fixtures.services import (
    ROOT,
    SHARED_PG,
    VENV_BIN,
    RedisServer,
    WorkerProcess,
    create_pg_database,
    drop_pg_database,
    free_port,
    wait_until,
)
from tests.integration.durability.harness import Sim, Stack, outcome_counts
from tests.integration.telemetry.scrape import Samples, scrape

KEY = "metrics-test-key-0123456789"
N = 240
FAULTS = ("--fail-rate", "0.04", "--malformed-rate", "0.04", "--low-mass-rate", "0.1",
          "--seed", "17")
DASHBOARD = ROOT / "monitoring" / "grafana" / "dashboards" / "dreads.json"
ALERTS = ROOT / "monitoring" / "prometheus" / "alerts.yml"


@dataclass
class FaultyRun:
    """The scrapes and SQL's counts once the run settled."""

    counts: dict[str, int]  #: decisions by status
    attempts: dict[str, int]  #: attempt rows by outcome
    answers: int
    low_mass: int
    worker: Samples
    api: Samples
    sim: Samples
    sim_url: str
    api_denied: int  #: the status of a scrape without the key
    worker_log: str
    spend_reads: int  #: the reads (requests) of the run's spend, as `dreads status` says


def _answer_counts(stack: Stack) -> tuple[int, int]:
    """Answers kept, and those under the low label-mass line, from SQL."""
    with session_scope(stack.factory) as s:
        answers = s.scalar(select(func.count()).select_from(Answer)
                           .where(Answer.run_id == stack.run_id))
        low = s.scalar(select(func.count()).select_from(Answer)
                       .where(Answer.run_id == stack.run_id, Answer.label_mass < LOW_MASS))
    return int(answers or 0), int(low or 0)


def _api_matches(url: str, counts: dict[str, int]) -> Samples | None:
    auth = {"authorization": f"Bearer {KEY}"}
    status = httpx.get(f"{url}/v1/runs/faulty", headers=auth, timeout=10.0).json()
    assert status["counts"] == counts, "the API's status is SQL's"
    samples = scrape(f"{url}/metrics", auth)
    by_status = samples.by("dreads_run_decisions", "status", run="faulty")
    return samples if by_status == {k: float(v) for k, v in counts.items()} else None


def _worker_scrape(port: int, n_attempts: int) -> Samples:
    """The workers' metrics once they have counted ``n_attempts`` attempts (a counter moves
    just after its commit), or after 15 s as they are."""
    deadline = time.monotonic() + 15
    while True:
        samples = scrape(f"http://127.0.0.1:{port}/metrics")
        counted = (samples.total("dreads_decision_attempts_total")
                   + samples.total("dreads_sweeper_expired_leases_total"))
        if counted >= n_attempts or time.monotonic() > deadline:
            return samples
        time.sleep(0.2)


@pytest.fixture(scope="module")
def faulty_run(tmp_path_factory: pytest.TempPathFactory,
               module_serve_factory: StartServe) -> Iterator[FaultyRun]:
    """One run of N decisions through a real ``dreads worker`` (prefork, 2 children, metrics
    on) and a simulator injecting 500s, malformed rows and low label mass; ``dreads serve``
    on the same database."""
    workdir = tmp_path_factory.mktemp("faulty")
    pg_url = create_pg_database(SHARED_PG, "m")
    redis = RedisServer(workdir / "redis")
    redis.start()
    sim = Sim(workdir / "sim.log", *FAULTS)
    worker: WorkerProcess | None = None
    try:
        with Stack.open(pg_url, redis.url, sim.url) as stack:
            port = free_port()
            worker = WorkerProcess(
                [str(VENV_BIN / "dreads"), "worker", "--concurrency", "2", "--hostname",
                 "metrics@%h", "--metrics-port", str(port)],
                {**os.environ, **stack.env(), "PYTHONUNBUFFERED": "1"}, workdir / "worker.log")
            server = module_serve_factory("--upstream", sim.url, "--database-url", pg_url, env={
                "DREADS_BROKER_URL": redis.url, "DREADS_API_KEY": KEY,
                "DREADS_METRICS_CACHE_S": "0.5"})
            stack.submit(N, name="faulty")
            counts = stack.wait_settled(180)
            attempts = outcome_counts(stack)
            worker_side = _worker_scrape(port, sum(attempts.values()))
            answers, low = _answer_counts(stack)
            api_side = wait_until(lambda: _api_matches(server.url, counts), timeout_s=30,
                                  what="the API's gauges to catch up with SQL")
            denied = httpx.get(f"{server.url}/metrics", timeout=10.0).status_code
            with session_scope(stack.factory) as session:
                spend_reads = spend_of(session, stack.run_id).total.reads
            yield FaultyRun(counts, attempts, answers, low, worker_side, api_side,
                            scrape(f"{sim.url}/metrics"), sim.url, denied, worker.log_text(),
                            spend_reads)
    finally:
        if worker is not None:
            worker.stop()
        sim.stop()
        redis.kill()
        with contextlib.suppress(Exception):
            drop_pg_database(pg_url)


def test_the_faults_happened(faulty_run: FaultyRun) -> None:
    """So the comparisons below cover failed attempts and low label mass."""
    attempts = faulty_run.attempts
    assert attempts.get("server_error", 0) > 0 and attempts.get("malformed_response", 0) > 0
    assert faulty_run.low_mass > 0 and faulty_run.counts.get("done", 0) > 0


def test_worker_counts_equal_sql(faulty_run: FaultyRun) -> None:
    """One attempt counted per attempt row (with the sweeper's lost leases), one answer per
    answer row, across the pool's child processes."""
    worker, attempts = faulty_run.worker, faulty_run.attempts
    scraped = worker.by("dreads_decision_attempts_total", "outcome", run="faulty")
    for kind, n in worker.by("dreads_sweeper_expired_leases_total", "outcome").items():
        scraped[kind] = scraped.get(kind, 0.0) + n
    scraped = {k: v for k, v in scraped.items() if v}  # series exported at zero from the start
    assert scraped == {k: float(v) for k, v in attempts.items()}, faulty_run.worker_log[-3000:]
    for kind, n in worker.by("dreads_decision_attempts_total", "outcome", run="faulty").items():
        if n:
            assert worker.total("dreads_decision_attempts_total", run="faulty", outcome=kind,
                                **{"class": outcome_class(kind).value}) == n
    assert worker.total("dreads_answers_total", run="faulty") == faulty_run.answers
    assert worker.total("dreads_answers_low_label_mass_total", run="faulty") == \
        faulty_run.low_mass
    assert worker.total("dreads_answer_draws_count", run="faulty") == faulty_run.answers
    # every server_error attempt had a failed read (one round's siblings can fail too)
    assert worker.total("dreads_reads_total", run="faulty", outcome="server_error") >= \
        attempts["server_error"]
    assert worker.total("dreads_reads_total", run="faulty", outcome="ok") > faulty_run.answers
    assert worker.total("dreads_upstream_ready", upstream=faulty_run.sim_url) == 1.0


def test_api_gauges_equal_sql_behind_the_key(faulty_run: FaultyRun) -> None:
    api, attempts = faulty_run.api, faulty_run.attempts
    assert faulty_run.api_denied == 403, "the API's metrics need its key"
    failures = api.by("dreads_run_failures", "kind", run="faulty")
    assert failures == {k: float(v) for k, v in attempts.items() if k != "ok"}
    # each kind carries its class; the infrastructure's are the run's (no cell)
    classes: dict[str, float] = {}
    for kind, n in failures.items():
        classes[outcome_class(kind).value] = classes.get(outcome_class(kind).value, 0.0) + n
    assert api.by("dreads_run_failures", "class", run="faulty") == classes
    assert set(api.by("dreads_run_failures", "cell", run="faulty",
                      **{"class": "infrastructure"})) <= {""}
    assert api.total("dreads_run_low_label_mass_answers", run="faulty") == faulty_run.low_mass
    assert api.total("dreads_run_remaining_decisions", run="faulty") == 0
    assert api.total("dreads_run_decisions_per_second", run="faulty") > 0
    assert "dreads_run_eta_seconds" in api.names
    # spend: the run has no price, so tokens and GPU-seconds and no dollar figure
    assert api.total("dreads_run_spend_tokens", run="faulty", kind="input") > 0
    assert api.total("dreads_run_gpu_seconds", run="faulty") > 0
    # reads: the requests the spend counts, as `dreads status` says them
    assert api.total("dreads_run_spend_reads", run="faulty") == faulty_run.spend_reads
    dollars = {"dreads_run_spend_dollars", "dreads_run_projected_spend_dollars"}
    assert [row for row in api.rows if row[0] in dollars] == []
    assert api.total("http_requests_total", handler="/v1/runs/{run}") >= 1
    assert api.total("http_requests_total", handler="/metrics") == 0  # scrapes not counted


_FUNCTIONS = {
    "sum", "min", "max", "avg", "count", "rate", "irate", "increase", "delta", "by", "without",
    "on", "ignoring", "histogram_quantile", "label_values", "and", "or", "unless", "bool",
    "humanizePercentage",
}


def _metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads (label matchers, groupings, ranges and
    strings taken out first)."""
    expr = re.sub(r"label_values\(([^,]*),[^)]*\)", r"\1", expr)  # its 2nd argument: a label
    expr = re.sub(r'"[^"]*"', "", expr)
    expr = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", expr)
    expr = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", " ", expr)
    names = set(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", expr))
    return {n for n in names - _FUNCTIONS if not re.fullmatch(r"\d+[smhd]?|e\d*", n)}


def _dashboard_queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    exprs += [v["definition"] for v in dashboard["templating"]["list"]]
    return exprs


def _alert_queries() -> list[str]:
    import yaml

    rules = yaml.safe_load(ALERTS.read_text())["groups"][0]["rules"]
    return [r["expr"] for r in rules]


def test_dashboard_and_alerts_query_only_exposed_metrics(faulty_run: FaultyRun) -> None:
    exposed = faulty_run.worker.names | faulty_run.api.names | faulty_run.sim.names
    queried = {n for e in _dashboard_queries() + _alert_queries() for n in _metric_names(e)}
    assert len(queried) > 15, queried
    assert queried - exposed == set(), "the dashboard queries metrics nothing exposes"
    # the panels the issue asks for
    assert {"dreads_run_decisions", "dreads_run_eta_seconds", "dreads_reads_total",
            "dreads_read_seconds_bucket", "dreads_run_failures", "dreads_answer_draws_bucket",
            "dreads_answers_low_label_mass_total", "vllm:num_requests_running",
            "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"} <= queried
