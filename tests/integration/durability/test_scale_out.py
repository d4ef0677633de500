"""Several pods: submit racing the claims (nothing stranded), runs routed by the model a pod
serves (two pods, two models), and a pod lost mid-run (its leases taken over in seconds)."""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from sqlalchemy import func, select

from app.broker.names import queue_for
from app.broker.publish import RunPublisher
from app.engine import ReadSettings
from app.runs.submit import SubmitRequest, submit_job
from app.store.db import make_engine, make_sessionmaker, session_scope
from app.store.models import Attempt, Decision
from app.store.queue import claim_decisions
from app.tokenizer.hf import load_tokenizer
from tests.fixtures.job_rows import job_lines
from tests.fixtures.services import RedisServer, WorkerProcess, wait_until
from tests.integration.durability.harness import Sim, Stack, check_invariant
from workers.celery_app import make_celery

StartWorker = Callable[..., WorkerProcess]


def _claimer(redis: RedisServer, queue: str, factory, stop: threading.Event,  # type: ignore[no-untyped-def]
             busy: threading.Event) -> None:
    """A worker's first step, as fast as possible: pop a message, claim its decisions."""
    client = redis.client()
    while not stop.is_set():
        item = client.brpop([queue], timeout=0.2)
        if item is None:
            busy.clear()
            continue
        busy.set()
        body = orjson.loads(base64.b64decode(orjson.loads(item[1])["body"]))
        _run_id, ids = body[0]
        with session_scope(factory) as s:
            claim_decisions(s, decision_ids=ids, owner="racer", lease_s=600)


def _queued(factory, run_id: int) -> int:  # type: ignore[no-untyped-def]
    with session_scope(factory) as s:
        return int(s.scalar(select(func.count()).select_from(Decision).where(
            Decision.run_id == run_id, Decision.status == "queued")) or 0)


def test_submit_racing_claims_strands_nothing(pg_url: str, redis_server: RedisServer,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """``submit`` publishes batch by batch while claimers take every message at once, eight
    times over: once the queue is drained, no decision is left queued (each had a message
    when it was claimable, and no claim skipped rows the producer was still stamping)."""
    monkeypatch.setattr("app.runs.submit.SUBMIT_BATCH", 50)
    engine = make_engine(pg_url, pool_size=4)
    factory = make_sessionmaker(engine)
    celery = make_celery(broker_url=redis_server.url)
    queue = queue_for("dgemma", 320)
    tokenizer = load_tokenizer("standin")
    try:
        for round_no in range(8):
            stop, busy = threading.Event(), threading.Event()
            claimers = [threading.Thread(target=_claimer, args=(redis_server, queue, factory,
                                                                stop, busy)) for _ in range(3)]
            for t in claimers:
                t.start()
            name = f"race{round_no}"
            report = submit_job(
                SubmitRequest(path=Path("race.jsonl"), run_name=name, settings=ReadSettings(),
                              upstream="sim"), factory, tokenizer,
                lines=job_lines(400, prefix=f"r{round_no}-"),
                publisher=RunPublisher(celery, 8, run_name=name, queue=queue))
            assert report.publish.published == 400 and report.publish.error is None
            wait_until(lambda b=busy: redis_server.client().llen(queue) == 0 and not b.is_set(),
                       timeout_s=30, what="the claimers to drain the queue")
            time.sleep(0.5)
            stop.set()
            for t in claimers:
                t.join(5)
            assert report.run is not None
            assert _queued(factory, report.run.id) == 0, f"round {round_no}: stranded"
    finally:
        celery.close()
        engine.dispose()


def _settle(stack: Stack, run_id: int, timeout_s: float) -> dict[str, int]:
    def counts() -> dict[str, int]:
        with session_scope(stack.factory) as s:
            rows = s.execute(select(Decision.status, func.count())
                             .where(Decision.run_id == run_id).group_by(Decision.status))
            return {str(k): int(n) for k, n in rows}

    wait_until(lambda: not any(counts().get(k) for k in ("pending", "queued", "leased")),
               timeout_s=timeout_s, what=f"run {run_id} to settle", interval_s=0.5)
    return counts()


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_two_pods_two_models_each_run_goes_to_its_pod(
        pg_url: str, redis_server: RedisServer, tmp_path: Path,
        worker_factory: StartWorker) -> None:
    """Pod A serves model alpha, pod B beta; one run per model. Each worker consumes only the
    queue of what its server serves: both runs complete and nothing is rejected."""
    sim_a = Sim(tmp_path / "a.log", "--model", "alpha")
    sim_b = Sim(tmp_path / "b.log", "--model", "beta")
    try:
        with Stack.open(pg_url, redis_server.url, sim_a.url) as stack:
            run_a = stack.submit(400, name="ra", settings=ReadSettings(model="alpha"),
                                 prefix="a")
            run_b = stack.submit(400, name="rb", settings=ReadSettings(model="beta"),
                                 prefix="b")
            worker_factory(stack.env(upstream=sim_a.url))
            worker_factory(stack.env(upstream=sim_b.url))
            assert _settle(stack, run_a, 150) == {"done": 400}
            assert _settle(stack, run_b, 150) == {"done": 400}
            with session_scope(stack.factory) as s:
                outcomes = dict(s.execute(select(Attempt.outcome, func.count())
                                          .group_by(Attempt.outcome)).all())
            assert outcomes == {"ok": 800}, outcomes
        assert sim_a.stats()["reads"] > 0 and sim_b.stats()["reads"] > 0
    finally:
        sim_a.stop()
        sim_b.stop()


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_pod_lost_mid_run_is_taken_over_within_lease_and_sweep(
        pg_url: str, redis_server: RedisServer, tmp_path: Path,
        worker_factory: StartWorker) -> None:
    """Two pods (a simulator and a worker each), one killed mid-run with its simulator: its
    leases expire (6 s here, renewed every 2 s while alive) and the survivor's sweeper
    re-publishes them at its next sweep (1 s); the run ends with every decision done once."""
    sims = [Sim(tmp_path / f"s{i}.log", "--step-ms", "20") for i in range(2)]
    try:
        with Stack.open(pg_url, redis_server.url, sims[0].url) as stack:
            stack.submit(2000)
            doomed = worker_factory(stack.env(upstream=sims[0].url))
            worker_factory(stack.env(upstream=sims[1].url))
            stack.wait_done_at_least(400, timeout_s=120, leased=True)
            held = _leased_ids(stack)
            doomed.kill()
            sims[0].stop()
            killed = time.monotonic()
            wait_until(lambda: not (held & _leased_ids(stack, stale=True)), timeout_s=60,
                       what="the dead pod's leases to be taken over")
            took_over_s = time.monotonic() - killed
            stack.wait_settled(150)
            check_invariant(stack, n=2000)
        assert took_over_s < 6 + 1 + 5, f"took {took_over_s:.1f} s"
    finally:
        for sim in sims:
            sim.stop()


def _leased_ids(stack: Stack, *, stale: bool = False) -> set[int]:
    """Decisions leased now (``stale``: only those whose lease was not renewed since)."""
    with session_scope(stack.factory) as s:
        stmt = select(Decision.id, Decision.attempts).where(Decision.run_id == stack.run_id,
                                                            Decision.status == "leased")
        rows = s.execute(stmt).all()
    if not stale:
        _leased_ids.attempts = {int(i): int(a) for i, a in rows}  # type: ignore[attr-defined]
        return set(_leased_ids.attempts)  # type: ignore[attr-defined]
    before: dict[int, int] = getattr(_leased_ids, "attempts", {})
    return {int(i) for i, a in rows if before.get(int(i)) == int(a)}
