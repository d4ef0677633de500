"""End-to-end throughput of the durable pipeline against the simulator, and what it costs.

    python bench/pipeline.py                      # everything (a few minutes on 2 cores)
    python bench/pipeline.py --decisions 1000 --submit-n 20000

Measures, each on fresh services (a private redis-server, a new database on the PostgreSQL at
``--pg``, ``dreads sim`` and ``dreads worker`` subprocesses):

1. capacity-bound: ``dreads sim --step-ms 100 --max-batch 32`` (320 reads/s). Decisions/s through
   submit (``dreads submit``'s own ``submit_job``, publishing as it writes) -> Redis -> Celery
   -> simulator -> PostgreSQL, from the submit's start until SQL has every decision settled
   (polled every 50 ms), against a plain asyncio client (the same ``VllmUpstream`` and engine,
   no SQL, no queue) sending the same decisions to the same simulator with the same number of
   decisions in flight (worker processes x chunk size). The ratio is the pipeline's efficiency
   (target >= 0.95).
2. orchestration ceiling: the same with ``--step-ms 0``; worker CPU ms per decision (every
   process of the worker tree: the ``dreads worker`` supervisor, the Celery main process and
   its pool children, with psutil, measured over the run only).
3. ``dreads submit`` and ``dreads resume`` wall time for ``--submit-n`` decisions (resume with
   nothing to re-publish, and after the broker lost every message).
4. pods: 1, 2 and 4 pods end to end (a simulator of fixed capacity and a worker each).
5. pod loss: two pods at the default lease, sweep and requeue settings; one is killed (its
   worker with SIGKILL, its simulator) while it holds leases: how long until the survivor
   has taken over every decision the dead pod held, and that the run ends with each done once.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.engine import Decision, ReadSettings, parse_decision, settings_to_dict  # noqa: E402
from app.runs.answer import answer_decision  # noqa: E402
from tests.fixtures.job_rows import job_lines  # noqa: E402
from tests.fixtures.services import (  # noqa: E402
    VENV_BIN,
    RedisServer,
    WorkerProcess,
    create_pg_database,
    drop_pg_database,
    wait_until,
)
from tests.integration.durability.harness import Sim, Stack  # noqa: E402

CHUNK = 64  #: decisions per message (``--chunk``): the product default, DREADS_CHUNK_SIZE


@dataclass
class Row:
    name: str
    value: str
    note: str = ""


@contextmanager
def services(tmp: Path, pg: str, *sim_args: str) -> Iterator[tuple[Stack, Sim, RedisServer]]:
    redis = RedisServer(tmp / f"redis-{time.monotonic_ns()}", appendonly=False)
    redis.start()
    url = create_pg_database(pg, "bench")
    sim = Sim(tmp / "sim.log", *sim_args)
    try:
        with Stack.open(url, redis.url, sim.url) as stack:
            yield stack, sim, redis
    finally:
        sim.stop()
        redis.kill()
        drop_pg_database(url)


def _tree(pid: int) -> list[psutil.Process]:
    """``pid`` and every process under it (``dreads worker`` -> Celery main -> pool)."""
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of every live process of the tree under ``pid`` (pool
    children recycled during the run are counted through their parent's children times)."""
    total = 0.0
    for proc in _tree(pid):
        try:
            times = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system + times.children_user + times.children_system
    return total


def pipeline_rate(stack: Stack, tmp: Path, n: int, concurrency: int,
                  chunk: int) -> tuple[float, float]:
    """(decisions/s, worker CPU ms per decision) for ``n`` decisions."""
    env = {**os.environ, **stack.env(max_in_flight=256, read_retries=4), "PYTHONUNBUFFERED": "1"}
    worker = WorkerProcess([str(VENV_BIN / "dreads"), "worker", "-c", str(concurrency), "-n",
                            f"bench{time.monotonic_ns()}@%h", "--loglevel", "WARNING",
                            "--without-mingle", "--without-gossip"], env,
                           tmp / "worker.log")
    try:
        # supervisor -> Celery main -> pool: the pool processes are grandchildren
        wait_until(lambda: len(_tree(worker.pid)) >= concurrency + 2, timeout_s=120,
                   what="the worker's pool")
        time.sleep(3)  # children finish their process init
        submit = product_submit(stack, n, f"bench{time.monotonic_ns()}", chunk)
        cpu0 = _cpu_s(worker.pid)
        t0 = time.perf_counter()
        submit()
        stack.wait_settled(1800, interval_s=0.05)
        elapsed = time.perf_counter() - t0
        cpu = _cpu_s(worker.pid) - cpu0
    finally:
        worker.stop()
    assert stack.done() == n, stack.counts()
    return n / elapsed, cpu * 1000 / n


def product_submit(stack: Stack, n: int, name: str, chunk: int) -> Any:
    """``dreads submit``'s own code (``submit_job`` streaming the lines into the store and
    publishing each batch to the run's queue) for ``n`` decisions, ready to be called: the
    tokenizer and the broker client are made before the clock starts, as the bare client's
    are."""
    from app.broker.client import make_client
    from app.broker.names import queue_of_run
    from app.broker.publish import RunPublisher
    from app.config import get_settings
    from app.runs.submit import SubmitRequest, submit_job
    from app.tokenizer.hf import load_tokenizer

    settings = ReadSettings()
    tokenizer = load_tokenizer(settings.tokenizer)
    celery = make_client(get_settings(), broker_url=stack.broker_url)
    publisher = RunPublisher(celery, chunk, run_name=name,
                             queue=queue_of_run(settings_to_dict(settings)))
    request = SubmitRequest(path=Path("job.jsonl"), run_name=name, settings=settings,
                            upstream=stack.upstream)
    lines = job_lines(n)

    def submit() -> None:
        report = submit_job(request, stack.factory, tokenizer, lines=lines, publisher=publisher)
        assert report.run is not None and report.publish.published == n, report.as_dict()
        stack.run_id = report.run.id

    return submit


def plain_rate(sim_url: str, n: int, in_flight: int) -> float:
    """Decisions/s of a bare asyncio client: same engine and HTTP client, no queue, no SQL."""
    from app.tokenizer.hf import load_tokenizer
    from app.upstream.vllm import VllmUpstream

    tokenizer = load_tokenizer("standin")
    settings = ReadSettings()
    decisions = [parse_decision(orjson.loads(line)) for _, line in job_lines(n)]

    async def one(upstream: VllmUpstream, sem: asyncio.Semaphore, decision: Decision) -> None:
        async with sem:
            await answer_decision(decision, settings, tokenizer, upstream)

    async def main() -> float:
        upstream = VllmUpstream(sim_url, model=settings.model,
                                canvas_length=settings.canvas_length, max_in_flight=256)
        sem = asyncio.Semaphore(in_flight)
        t0 = time.perf_counter()
        await asyncio.gather(*(one(upstream, sem, d) for d in decisions))
        elapsed = time.perf_counter() - t0
        await upstream.aclose()
        return n / elapsed

    return asyncio.run(main())


def cli_time(args: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    done = subprocess.run([str(VENV_BIN / "dreads"), *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"dreads {args[0]} failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")
    return time.perf_counter() - t0


def submit_resume(stack: Stack, redis: RedisServer, tmp: Path, n: int) -> list[Row]:
    job = tmp / "job.jsonl"
    job.write_text("\n".join(line for _, line in job_lines(n)) + "\n")
    env = {**os.environ, **stack.env(requeue_after_s=600)}
    submit_s = cli_time(["submit", str(job), "--run", "big", "--json"], env)
    resume_s = cli_time(["resume", "big", "--json"], env)
    redis.wipe()
    env_lost = {**env, "DREADS_REQUEUE_AFTER_S": "0"}
    republish_s = cli_time(["resume", "big", "--json"], env_lost)
    return [
        Row(f"dreads submit, {n:,} decisions", f"{submit_s:.1f} s",
            f"{n / submit_s:,.0f} decisions/s incl. ~4 s CLI start"),
        Row("dreads resume, nothing to re-publish", f"{resume_s:.1f} s", ""),
        Row("dreads resume after Redis lost everything", f"{republish_s:.1f} s",
            f"re-publishes {n:,}"),
    ]


def rate_rows(tmp: Path, pg: str, n: int, concurrency: int, chunk: int, sim_args: list[str],
              label: str) -> list[Row]:
    in_flight = concurrency * chunk
    with services(tmp, pg, *sim_args) as (stack, sim, _):
        plain = plain_rate(sim.url, n, in_flight)
    with services(tmp, pg, *sim_args) as (stack, sim, _):
        rate, cpu_ms = pipeline_rate(stack, tmp, n, concurrency, chunk)
    return [
        Row(f"{label}: pipeline, -c {concurrency} x chunk {chunk}", f"{rate:,.0f} dec/s",
            f"worker CPU {cpu_ms:.2f} ms/decision"),
        Row(f"{label}: plain asyncio client, {in_flight} decisions in flight",
            f"{plain:,.0f} dec/s", ""),
        Row(f"{label}: ratio pipeline / plain", f"{rate / plain:.2f}", "target >= 0.95"),
    ]


#: A pod's simulated GPU for the scale-out rows: 200 ms steps of at most 8 reads (40 reads/s),
#: small enough that four pods (four simulators and four 2-process workers) stay within this
#: 2-core machine's CPU, so the rows measure the pipeline, not the machine.
POD_SIM = ("--step-ms", "200", "--max-batch", "8")


@dataclass
class Pods:
    """Pods sharing one PostgreSQL and Redis: a simulator of fixed capacity (``POD_SIM``) and
    a 2-process ``dreads worker`` each."""

    stack: Stack
    sims: list[Sim]
    workers: list[WorkerProcess]


@contextmanager
def pods(tmp: Path, pg: str, n: int, label: str, **timing: Any) -> Iterator[Pods]:
    """Start ``n`` pods (workers with ``timing`` overrides of the harness's settings), wait
    for every pool, and stop them all after."""
    redis = RedisServer(tmp / f"redis-{label}", appendonly=False)
    redis.start()
    url = create_pg_database(pg, label)
    sims = [Sim(tmp / f"sim-{label}-{i}.log", *POD_SIM) for i in range(n)]
    workers: list[WorkerProcess] = []
    try:
        with Stack.open(url, redis.url, sims[0].url) as stack:
            for i, sim in enumerate(sims):
                env = {**os.environ, **stack.env(upstream=sim.url, **timing),
                       "PYTHONUNBUFFERED": "1"}
                workers.append(WorkerProcess(
                    [str(VENV_BIN / "dreads"), "worker", "-c", "2", "-n", f"pod{i}@%h",
                     "--loglevel", "WARNING", "--without-mingle", "--without-gossip"],
                    env, tmp / f"{label}-{i}.log"))
            for w in workers:
                wait_until(lambda w=w: len(_tree(w.pid)) >= 4, timeout_s=120, what="a pod")
            yield Pods(stack, sims, workers)
    finally:
        for w in workers:
            w.stop()
        for sim in sims:
            sim.stop()
        redis.kill()
        drop_pg_database(url)


def pods_rate(tmp: Path, pg: str, n: int, per_pod: int, chunk: int) -> float:
    """End-to-end decisions/s of ``n`` pods, ``per_pod`` decisions per pod."""
    with pods(tmp, pg, n, f"pods{n}") as group:
        time.sleep(3)
        t0 = time.perf_counter()
        group.stack.submit(n * per_pod, name=f"pods{n}", chunk_size=chunk)
        group.stack.wait_settled(1800)
        return n * per_pod / (time.perf_counter() - t0)


def pods_rows(tmp: Path, pg: str, per_pod: int, chunk: int) -> list[Row]:
    one = pods_rate(tmp, pg, 1, per_pod, chunk)
    rows = [Row("1 pod (sim 200ms x 8), end to end", f"{one:,.1f} dec/s", "")]
    for pods, target in ((2, 1.9), (4, 3.6)):
        rate = pods_rate(tmp, pg, pods, per_pod, chunk)
        rows.append(Row(f"{pods} pods, end to end", f"{rate:,.1f} dec/s",
                        f"{rate / one:.2f}x one pod (target >= {target}x)"))
    return rows


#: The worker settings a pod runs with by default (``app.config``), not the test harness's
#: short ones: the pod-loss row measures what a user's run sees.
DEFAULT_TIMING = {"lease_s": 15, "sweep_interval_s": 3, "requeue_after_s": 600,
                  "visibility_timeout_s": 3600, "task_time_limit_s": 1800,
                  "read_timeout_s": 120, "read_retries": 4}


def _held(stack: Stack, owners: set[str]) -> set[int]:
    """Decisions leased now by one of ``owners`` (``host:pid`` of a pool process)."""
    from sqlalchemy import select

    from app.store.db import session_scope
    from app.store.models import Decision

    with session_scope(stack.factory) as session:
        stmt = select(Decision.id).where(Decision.run_id == stack.run_id,
                                         Decision.status == "leased",
                                         Decision.lease_owner.in_(owners))
        return set(session.scalars(stmt))


def pod_loss(tmp: Path, pg: str, n: int, chunk: int) -> list[Row]:
    """Two pods; one dies holding leases. Seconds from its death until none of its leases is
    still held by it (each expired and re-published by the survivor's sweeper), then the run
    settles with every decision done once."""
    with pods(tmp, pg, 2, "loss", **DEFAULT_TIMING) as group:
        stack = group.stack
        doomed = _tree(group.workers[0].pid)
        owners = {f"{socket.gethostname()}:{p.pid}" for p in doomed}
        stack.submit(n, name="loss", chunk_size=chunk)
        wait_until(lambda: _held(stack, owners), timeout_s=120,
                   what="the doomed pod to hold leases")
        time.sleep(2)
        held = wait_until(lambda: _held(stack, owners), timeout_s=60,
                          what="the doomed pod to hold leases")
        for proc in reversed(doomed):
            proc.kill()
        group.sims[0].stop()
        died = time.perf_counter()
        wait_until(lambda: not (_held(stack, owners) & held), timeout_s=300,
                   what="the dead pod's leases to be taken over")
        taken_over = time.perf_counter() - died
        stack.wait_settled(1800)
        done, counts = stack.done(), stack.counts()
    assert done == n, counts
    return [Row("pod lost holding leases: until the survivor has them", f"{taken_over:.1f} s",
                f"{len(held)} decisions held; lease 15 s, sweep 3 s; {done:,}/{n:,} done once "
                "(target <= 20 s)")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--decisions", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=2, help="worker pool processes")
    parser.add_argument("--submit-n", type=int, default=100_000)
    parser.add_argument("--pg", default="postgresql+psycopg://postgres@127.0.0.1:5432/test")
    parser.add_argument("--chunk", type=int, default=CHUNK, help="decisions per message")
    parser.add_argument("--skip", default="",
                        help="comma list: capacity,ceiling,submit,pods,loss")
    parser.add_argument("--per-pod", type=int, default=600, help="decisions per pod (pods)")
    args = parser.parse_args()

    skip = set(filter(None, args.skip.split(",")))
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="dreads-bench-") as tmp_name:
        tmp = Path(tmp_name)
        if "capacity" not in skip:
            rows += rate_rows(tmp, args.pg, args.decisions, args.concurrency, args.chunk,
                              ["--step-ms", "100", "--max-batch", "32"], "sim 100ms x 32")
        if "ceiling" not in skip:
            rows += rate_rows(tmp, args.pg, args.decisions, args.concurrency, args.chunk,
                              ["--step-ms", "0"], "sim zero latency")
        if "submit" not in skip:
            with services(tmp, args.pg) as (stack, _, redis):
                rows += submit_resume(stack, redis, tmp, args.submit_n)
        if "pods" not in skip:
            rows += pods_rows(tmp, args.pg, args.per_pod, 16)
        if "loss" not in skip:
            rows += pod_loss(tmp, args.pg, 2 * args.per_pod, 16)
    width = max(len(r.name) for r in rows)
    print(f"\n{'measure':<{width}}  {'value':>14}  note")
    for r in rows:
        print(f"{r.name:<{width}}  {r.value:>14}  {r.note}")


if __name__ == "__main__":
    main()
