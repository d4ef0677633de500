"""Runs answered by a decision endpoint: decisions/s through the queue against a bare asyncio
client, on the same endpoint of fixed capacity.

    python bench/answers.py                        # 4,000 decisions per row (about two minutes)
    python bench/answers.py --decisions 8000 --concurrency 2

The endpoint is ``dreads sim``'s ``/v1/systemone`` in a subprocess (vLLM's own reader: one read
per question), with a simulated GPU of fixed capacity (``--step-ms 100 --max-batch 12``: 120
reads/s; the decisions have one question each, so 120 decisions/s at most: below what the
queue path's CPU allows on a 2-core machine, some 200 decisions/s, so the endpoint is what
limits both paths). Each row on fresh services:

1. through the queue: a private redis-server and a new database on the PostgreSQL at ``--pg``;
   the run (``answer_by systemone``, ``answer_concurrency`` = ``--in-flight``) committed queued
   and published to ``dreads.answers``; ``dreads worker --answers -c N`` subprocesses run it
   (claim, one request per decision, commit answers + draws + attempt per decision). Timed
   from the first publish to the last decision settled in SQL.
2. a bare asyncio client: aiohttp, one session, the same request bodies, ``--in-flight``
   requests at once; no SQL, no queue.

The ratio is the queue's efficiency on a saturated endpoint (target >= 0.95).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import orjson
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.engine import AnswerBy, ReadSettings, parse_decision  # noqa: E402
from app.engine.systemone import systemone_request  # noqa: E402
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

SIM_ARGS = ("--step-ms", "100", "--max-batch", "12")


def _tree(pid: int) -> list[psutil.Process]:
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def queue_rate(tmp: Path, pg: str, n: int, processes: int, in_flight: int, chunk: int) -> float:
    """Decisions/s through submit -> Redis -> answers worker -> endpoint -> PostgreSQL."""
    redis = RedisServer(tmp / f"redis-{time.monotonic_ns()}", appendonly=False)
    redis.start()
    url = create_pg_database(pg, "answers")
    sim = Sim(tmp / "sim-queue.log", *SIM_ARGS)
    worker: WorkerProcess | None = None
    try:
        with Stack.open(url, redis.url, sim.url) as stack:
            env = {**os.environ, **stack.env(upstream="http://127.0.0.1:9", worker_answers=1),
                   "PYTHONUNBUFFERED": "1"}
            worker = WorkerProcess([str(VENV_BIN / "dreads"), "worker", "-c", str(processes),
                                    "-n", f"answers{time.monotonic_ns()}@%h", "--loglevel",
                                    "WARNING", "--without-mingle", "--without-gossip"],
                                   env, tmp / "worker.log")
            # supervisor -> Celery main -> pool: the pool processes are grandchildren
            wait_until(lambda: len(_tree(worker.pid)) >= processes + 2, timeout_s=120,
                       what="the worker's pool")
            time.sleep(4)  # pool processes finish their init
            settings = ReadSettings(answer_by=AnswerBy.SYSTEMONE, answer_url=sim.url,
                                    answer_concurrency=in_flight)
            t0 = time.perf_counter()
            stack.submit(n, name="bench", settings=settings, chunk_size=chunk)
            wait_until(lambda: stack.done() == n, timeout_s=1800, interval_s=0.05,
                       what="the run to finish")
            elapsed = time.perf_counter() - t0
            assert stack.counts() == {"done": n}, stack.counts()
            return n / elapsed
    finally:
        if worker is not None:
            worker.stop()
        sim.stop()
        redis.kill()
        drop_pg_database(url)


def bare_rate(tmp: Path, n: int, in_flight: int) -> float:
    """Decisions/s of a bare asyncio client on the same endpoint: aiohttp, same bodies."""
    sim = Sim(tmp / "sim-bare.log", *SIM_ARGS)
    bodies = [orjson.dumps(systemone_request(parse_decision(orjson.loads(line)), "dgemma"))
              for _, line in job_lines(n)]

    async def main() -> float:
        connector = aiohttp.TCPConnector(limit=in_flight)
        async with aiohttp.ClientSession(connector=connector) as session:
            sem = asyncio.Semaphore(in_flight)

            async def one(body: bytes) -> None:
                async with sem, session.post(sim.url + "/v1/systemone", data=body,
                                             headers={"content-type": "application/json"}) as r:
                    assert r.status == 200, await r.text()
                    await r.read()

            t0 = time.perf_counter()
            await asyncio.gather(*(one(b) for b in bodies))
            return n / (time.perf_counter() - t0)

    try:
        return asyncio.run(main())
    finally:
        sim.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--decisions", type=int, default=4000)
    parser.add_argument("--concurrency", type=int, default=2, help="answers worker processes")
    parser.add_argument("--in-flight", type=int, default=64,
                        help="requests in flight: the run's answer_concurrency, the bare "
                             "client's bound")
    parser.add_argument("--chunk", type=int, default=64, help="decisions per message")
    parser.add_argument("--pg", default="postgresql+psycopg://postgres@127.0.0.1:5432/test")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dreads-bench-answers-") as tmp_name:
        tmp = Path(tmp_name)
        bare = bare_rate(tmp, args.decisions, args.in_flight)
        queued = queue_rate(tmp, args.pg, args.decisions, args.concurrency, args.in_flight,
                            args.chunk)
    capacity = "sim /v1/systemone, 100 ms x 12 reads (120 decisions/s at most)"
    print(f"\nendpoint: {capacity}; {args.decisions} one-question decisions, "
          f"{args.in_flight} requests in flight")
    print(f"{'path':<58} {'decisions/s':>12}")
    print(f"{'bare asyncio client (aiohttp, no SQL, no queue)':<58} {bare:>12.1f}")
    label = f"through the queue (answers worker -c {args.concurrency}, chunk {args.chunk})"
    print(f"{label:<58} {queued:>12.1f}")
    print(f"{'ratio queue / bare (target >= 0.95)':<58} {queued / bare:>12.2f}")


if __name__ == "__main__":
    main()
